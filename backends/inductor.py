"""``inductor``: ``torch.compile`` in the default mode, training through AOTAutograd.

Inductor is called exactly as ``backend="inductor"`` calls it, through
``compile_fx``, with a recording shim as its ``inner_compile``: the shim keeps
the partitioned forward and backward graphs inductor lowers, so the measured
memory can be held to the lifetime model of *those* graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conformance.adapter import Backend, Capabilities, CompiledStep
from conformance.case import Case, Workload
from conformance.donation import BackwardWatch, classify, saved_positions
from conformance.lifetime import LifetimeModel, Observation, model_forward_backward
from conformance.probe import MemoryTrace
from conformance.step import StepOutput, run_module_step


@dataclass
class ReceivedGraph:
    gm: torch.fx.GraphModule
    is_backward: bool


def snapshot(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm``'s graph that later in-place passes cannot touch.

    Node metadata is copied shallowly: the fake tensors in ``meta["val"]`` are shared,
    which keeps the storage identities the lifetime model reads views and aliases from.
    """
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


class RecordingCompiler:
    """A ``torch.compile`` backend: inductor's ``compile_fx`` with a recording ``inner_compile``."""

    def __init__(self, config_patches: dict[str, Any] | None = None) -> None:
        self.graphs: list[ReceivedGraph] = []
        #: inductor options, as ``torch.compile(mode=...)`` would set them (e.g. CUDA graphs)
        self.config_patches = config_patches
        self.watches: list[BackwardWatch] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        def inner(gm: torch.fx.GraphModule, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
            # A snapshot, taken before inductor's post-grad passes rewrite the graph in
            # place: they run only on an FX-graph-cache miss, so modelling the rewritten
            # graph would make the verdict depend on the cache's state.
            is_backward = bool(kwargs.get("is_backward"))
            self.graphs.append(ReceivedGraph(snapshot(gm), is_backward))
            forwards = [g.gm for g in self.graphs if not g.is_backward]
            positions = saved_positions(gm, forwards[-1] if forwards else None) if is_backward else []
            compiled = compile_fx_inner(gm, example_inputs, *args, **kwargs)
            if not is_backward:
                return compiled
            watch = BackwardWatch(compiled, positions)  # sees whether saved inputs outlive the call
            self.watches.append(watch)
            return watch

        return compile_fx(gm, example_inputs, inner_compile=inner, config_patches=self.config_patches)


class DynamoStep(CompiledStep):
    """A workload run through ``torch.compile`` with a given backend callable."""

    def __init__(self, case: Case, workload: Workload, backend: Any, **compile_kwargs: Any) -> None:
        self.case = case
        self.workload = workload
        self.compiled = torch.compile(workload.model, backend=backend, dynamic=False, **compile_kwargs)

    def run(self) -> StepOutput:
        return run_module_step(self.compiled, self.workload, self.case.trains)


class InductorStep(DynamoStep):
    def __init__(self, case: Case, workload: Workload) -> None:
        self.recorder = RecordingCompiler()
        super().__init__(case, workload, self.recorder)

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        return model_of_received(self.recorder.graphs, observation)

    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        if not self.case.trains:
            return {}
        donated = model_of_received(self.recorder.graphs, observation)
        held = model_of_received(self.recorder.graphs, observation, saved_inputs="held")
        return classify(self.recorder.watches, max(t.peak_bytes for t in traces), donated, held)


def model_of_received(
    graphs: list[ReceivedGraph], observation: Observation, saved_inputs: str = "donated"
) -> LifetimeModel | None:
    """Model one forward (and its backward); several graphs (graph breaks) are not modelled."""
    forwards = [g.gm for g in graphs if not g.is_backward]
    backwards = [g.gm for g in graphs if g.is_backward]
    if len(forwards) != 1 or len(backwards) > 1:
        return None
    return model_forward_backward(forwards[0], backwards[0] if backwards else None, observation, saved_inputs)


class InductorBackend(Backend):
    name = "inductor"
    capabilities = Capabilities()
    cost_weight = 6.0

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "inductor": torch.__version__}

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        # A cache hit in AOTAutograd would skip inductor's inner compile, and with it
        # the graphs we model; inductor's own FX graph cache still applies.
        torch._functorch.config.enable_autograd_cache = False
        return InductorStep(case, workload)
