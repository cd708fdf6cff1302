"""An example vendor backend for torch-conformance: copy this package to plug in yours.

The "vendor compiler" here is deliberately simple: ``torch.compile`` hands the graph
to ``aot_autograd``, which partitions it into forward and backward ATen graphs, and
each is "compiled" into a boxed ``torch.fx.Interpreter`` run that drops every value
after its last use.  Swap ``_compile_graph`` for your own code generator.

What the harness needs from an adapter is four things: ``name``, ``capabilities``,
``compile(case, workload)`` returning a ``CompiledStep`` whose ``run()`` does one step,
and (optionally, but it makes the memory contract much sharper) the graphs the
backend received, through ``received_model``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch._dynamo.backends.common import aot_autograd

from conformance.adapter import Backend, Capabilities, CompiledStep
from conformance.case import Case, Workload
from conformance.lifetime import LifetimeModel, Observation, model_forward_backward
from conformance.step import StepOutput, run_module_step
from conformance.transients import reference_kernels

__all__ = ["ExampleVendorBackend"]


def _compile_graph(gm: torch.fx.GraphModule) -> Any:
    """The 'vendor compiler': a boxed interpreter (takes the argument list and clears it)."""

    def run(args: list[Any]) -> Any:
        # eager kernels as the harness's transient table models them (native convolutions)
        with reference_kernels():
            return torch.fx.Interpreter(gm, garbage_collect_values=True).boxed_run(args)

    run._boxed_call = True  # type: ignore[attr-defined]  # aot_autograd's boxed-call marker
    return run


class _VendorStep(CompiledStep):
    def __init__(self, case: Case, workload: Workload) -> None:
        self.case, self.workload = case, workload
        self.forward: list[torch.fx.GraphModule] = []
        self.backward: list[torch.fx.GraphModule] = []

        def fw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            self.forward.append(gm)
            return _compile_graph(gm)

        def bw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            self.backward.append(gm)
            return _compile_graph(gm)

        backend = aot_autograd(fw_compiler=fw, bw_compiler=bw)
        self.compiled = torch.compile(workload.model, backend=backend, dynamic=False)

    def run(self) -> StepOutput:
        return run_module_step(self.compiled, self.workload, self.case.trains)

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        if len(self.forward) != 1 or len(self.backward) > 1:
            return None  # graph breaks: the harness falls back to the user-level model
        # The interpreter runs eager ATen kernels, so their in-op allocations are part of the contract.
        return model_forward_backward(self.forward[0], self.backward[0] if self.backward else None, observation,
                                      kernel_transients=True)


class ExampleVendorBackend(Backend):
    name = "example-vendor"
    capabilities = Capabilities(training=True, while_loop=True, custom_ops=True)
    cost_weight = 2.0
    manifest_path = Path(__file__).with_name("manifest.toml")

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "example-vendor": "0.1.0"}

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _VendorStep(case, workload)
