"""An example vendor backend for torch-conformance: copy this package to plug in yours.

The "vendor compiler" here is deliberately simple: ``torch.compile`` hands the graph
to ``aot_autograd``, which partitions it into forward and backward ATen graphs, and
each is "compiled" into a boxed ``torch.fx.Interpreter`` run that drops every value
after its last use.  Swap ``_compile_graph`` for your own code generator.

What the harness needs from an adapter is three things: ``name``, ``capabilities``,
and ``compile(case, workload)`` returning a ``CompiledStep`` whose ``run()`` does one
step.  Building the ``torch.compile`` backend with :class:`conformance.api.aot.AotRecorder`
and deriving the step from :class:`conformance.api.aot.AotStep` adds, with no code here,
the model of the graphs the backend received (the bound its memory is held to) and
the watch on its compiled backward (saved activations must die at their last use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.fx

from conformance.adapter import Backend, Capabilities, CompiledStep
from conformance.api.aot import AotRecorder, AotStep
from conformance.case import Case, Workload
from conformance.models.transients import reference_kernels

__all__ = ["ExampleVendorBackend"]


def _compile_graph(gm: torch.fx.GraphModule) -> Any:
    """The 'vendor compiler': a boxed interpreter (takes the argument list and clears it)."""

    def run(args: list[Any]) -> Any:
        # eager kernels as the harness's transient table models them (native convolutions)
        with reference_kernels():
            return torch.fx.Interpreter(gm, garbage_collect_values=True).boxed_run(args)

    run._boxed_call = True  # type: ignore[attr-defined]  # aot_autograd's boxed-call marker
    return run


def _vendor_compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    return _compile_graph(gm)


class _VendorStep(AotStep):
    # The interpreter runs eager ATen kernels, so their in-op allocations are part of the contract.
    model_options = {"kernel_transients": True}

    def __init__(self, case: Case, workload: Workload) -> None:
        self.recorder = AotRecorder()
        super().__init__(case, workload, self.recorder.backend(_vendor_compiler))


class ExampleVendorBackend(Backend):
    name = "example-vendor"
    preload_modules = ("torch._dynamo",)  # imported ahead by the run's fork server: a respawned worker has it
    # An interpreter of the graphs it received, with eager kernels: its memory is exactly their model.
    capabilities = Capabilities(training=True, while_loop=True, custom_ops=True, exact_memory=True)
    cost_weight = 2.0
    manifest_path = Path(__file__).with_name("manifest.toml")

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "example-vendor": "0.1.0"}

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _VendorStep(case, workload)
