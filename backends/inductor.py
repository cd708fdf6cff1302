"""``inductor``: ``torch.compile`` in the default mode, training through AOTAutograd.

Inductor is called exactly as ``backend="inductor"`` calls it, through
``compile_fx``, with a recording shim as its ``inner_compile``: the shim keeps
the partitioned forward and backward graphs inductor lowers, so the measured
memory can be held to the lifetime model of *those* graphs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch
import torch.fx

from conformance.api.adapter import Backend, Capabilities, CompiledStep
from conformance.api.aot import AotRecorder, AotStep, DynamoStep, ReceivedGraph, model_of_received
from conformance.api.case import Case, Workload
from conformance.models.lifetime import LifetimeModel, ModelError, Observation, model_forward_backward
from conformance.models.optimizer import OptimizerSegment, segment_of_program
from conformance.models.program import WrapperProgram, model_program

__all__ = ["DynamoStep", "InductorBackend", "ReceivedGraph", "RecordingCompiler", "model_of_received"]


class RecordingCompiler:
    """A ``torch.compile`` backend: inductor's ``compile_fx`` with a recording ``inner_compile``."""

    def __init__(self, config_patches: dict[str, Any] | None = None) -> None:
        self.recorder = AotRecorder()
        #: inductor options, as ``torch.compile(mode=...)`` would set them (e.g. CUDA graphs)
        self.config_patches = config_patches

    @property
    def graphs(self) -> list[ReceivedGraph]:
        return self.recorder.graphs

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        def inner(gm: torch.fx.GraphModule, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
            # A snapshot, taken before inductor's post-grad passes rewrite the graph in
            # place: they run only on an FX-graph-cache miss, so modelling the rewritten
            # graph would make the verdict depend on the cache's state.
            is_backward = bool(kwargs.get("is_backward"))
            received = self.recorder.record(gm, is_backward)
            compiled = compile_fx_inner(gm, example_inputs, *args, **kwargs)
            received.source = getattr(compiled, "source_code", None)  # the same on a cache hit
            received.code_file = _code_file(compiled)
            dispatched = self.recorder.dispatched(compiled, received)  # which call ran it, at which sizes
            return self.recorder.watch(dispatched, gm) if is_backward else dispatched

        return compile_fx(gm, example_inputs, inner_compile=inner, config_patches=self.config_patches)


#: inductor lowerings known to be wrong in some form: the defect (with its upstream issue) -> the ATen ops lowered
KNOWN_LOWERING_DEFECTS: dict[str, tuple[str, ...]] = {
    # a ceil_mode window that overhangs the padded input is divided by the whole kernel in the backward
    # (the forward and eager divide by its part inside): docs/findings/inductor-repro-avg-pool-ceil-mode-backward.py
    "avg_pool backward's divisor for a ceil_mode window past the padding (pytorch/pytorch#198119)":
        ("avg_pool2d_backward", "avg_pool3d_backward"),
}


@contextmanager
def aten_kernels_for(ops: tuple[str, ...]) -> Iterator[None]:
    """Inductor runs the ATen ops ``ops`` as ATen's kernels (its fallback) instead of lowering them, with its
    FX graph cache off (a cached program has the lowering in it); the lowerings are put back after."""
    import torch._inductor.config as inductor_config
    from torch._inductor import lowering

    overloads = [getattr(packet, name) for packet in (getattr(torch.ops.aten, op) for op in ops)
                 for name in packet.overloads()]
    saved = {o: lowering.lowerings[o] for o in overloads if o in lowering.lowerings}
    try:
        for overload in saved:
            lowering.lowerings[overload] = lowering.fallback_handler(overload, add_to_fallback_set=False)
        with inductor_config.patch(fx_graph_cache=False):
            yield
    finally:
        lowering.lowerings.update(saved)


class InductorStep(AotStep):
    optimizer_backend = "inductor"
    follows_compile_mode = True  # a case whose shapes change is compiled as its schedule says

    def __init__(self, case: Case, workload: Workload) -> None:
        self.compiler = RecordingCompiler()
        self.recorder = self.compiler.recorder
        #: inductor as ``torch.compile(optimizer.step)`` calls it, recording the program it generates
        self.optimizer_recorder = RecordingCompiler()
        #: why the compiled optimizer step is not modelled (a note), where it is not
        self.optimizer_not_modelled = ""
        super().__init__(case, workload, self.compiler)

    def notes(self) -> list[str]:
        why = [f"the compiled optimizer step: {self.optimizer_not_modelled}"] if self.optimizer_not_modelled else []
        return [*super().notes(), *why]

    def lowering_fallbacks(self) -> dict[str, AbstractContextManager[object]]:
        """The known lowering defects (:data:`KNOWN_LOWERING_DEFECTS`) whose ops a graph this step received calls."""
        called = {str(node.target).split(".")[1] for graph in self.recorder.graphs for node in graph.gm.graph.nodes
                  if node.op == "call_function" and str(node.target).startswith("aten.")}
        return {defect: aten_kernels_for(ops) for defect, ops in KNOWN_LOWERING_DEFECTS.items()
                if called.intersection(ops)}

    def optimizer_compiler(self) -> Any:
        return self.optimizer_recorder

    def begin_optimizer_call(self) -> None:
        self.optimizer_recorder.recorder.log.begin_call()

    def optimizer_model(self, eager: OptimizerSegment) -> OptimizerSegment | None:
        """A compiled optimizer step is held to the wrapper inductor generated for the graph its latest call
        ran (the steady state: its state made, any recompile for it done), modelled as the step's are;
        ``None`` (not modelled, a note) when that call ran several graphs or none that shows its program."""
        if not self.compiles_optimizer(self.workload):
            return eager
        log = self.optimizer_recorder.recorder.log
        ran = sorted({d.graph for d in log.calls[-1]}) if log.calls else []
        graphs = [self.optimizer_recorder.graphs[i] for i in ran]
        if len(graphs) != 1 or graphs[0].source is None or graphs[0].is_backward:
            self.optimizer_not_modelled = (f"its latest call ran {len(graphs)} compiled graphs (one program is "
                                           "modelled)")
            return None
        vals = [n.meta.get("val") for n in graphs[0].gm.graph.nodes if n.op == "placeholder"]
        try:
            return segment_of_program(model_program(WrapperProgram(graphs[0].source, "forward"), vals))
        except ModelError as exc:
            self.optimizer_not_modelled = f"its program is not modelled: {exc}"
            return None

    def program_model(self, observation: Observation) -> LifetimeModel | None:
        ran = self.recorder.ran(observation)
        if ran is None:
            return None
        forward, backward, bound = ran
        return model_of_programs([forward] if backward is None else [forward, backward], bound)

    def program_files(self) -> frozenset[str]:
        graphs = [*self.recorder.graphs, *self.optimizer_recorder.graphs]
        return frozenset(g.code_file for g in graphs if g.code_file)


def _code_file(compiled: Any) -> str | None:
    """The wrapper module's file: its ``call`` (a function, or a ``Runner`` method from 2.14 on)."""
    code = getattr(getattr(compiled, "current_callable", None), "__code__", None)
    return code.co_filename if code is not None else None


def runs_as_graph(graph: ReceivedGraph) -> bool:
    """Whether inductor ran ``graph`` as its own FX code, generating no program: a graph that calls
    nothing (a backward that only passes a saved tensor on as a gradient) is returned as
    ``make_boxed_func(gm.forward)`` by ``compile_fx_inner``, so the graph itself is what runs and the
    lifetime model walks it; any other graph without a source is one whose program we cannot see."""
    return graph.source is None and not any("call" in n.op for n in graph.gm.graph.nodes)


def model_of_programs(graphs: list[ReceivedGraph], observation: Observation) -> LifetimeModel | None:
    """Model the Python wrappers inductor generated for one forward (and its backward), a dynamic
    one's symbolic sizes at the values ``observation.sizes`` binds."""
    forwards = [g for g in graphs if not g.is_backward]
    backwards = [g for g in graphs if g.is_backward]
    if len(forwards) != 1 or len(backwards) > 1 or any(g.source is None and not runs_as_graph(g) for g in graphs):
        return None
    programs = [None if g.source is None else WrapperProgram(g.source, "backward" if g.is_backward else "forward")
                for g in (*forwards, *backwards)]
    return model_forward_backward(forwards[0].gm, backwards[0].gm if backwards else None, observation,
                                  programs=programs)


class InductorBackend(Backend):
    name = "inductor"
    preload_modules = ("torch._dynamo", "torch._inductor.compile_fx")
    capabilities = Capabilities(dynamic_shapes=True, dtypes=("float32", "float64"))
    cost_weight = 6.0

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "inductor": torch.__version__}

    def warm_up(self) -> None:
        """Inductor's first compile in a process sets up its C++ toolchain probe, vector-ISA check and
        compile workers (seconds); a tiny forward and backward compile pays that, then is forgotten."""
        x = torch.ones(4, requires_grad=True)
        torch.compile(lambda t: (t * 2).relu().sum(), backend="inductor", dynamic=False)(x).backward()
        torch._dynamo.reset()

    def eager_rounding(self) -> AbstractContextManager[object]:
        """Inductor keeps a fused kernel's bfloat16/float16 intermediates in float32 unless told to round them
        after every op as eager does (off by default: ``torch/_inductor/config.py``)."""
        import torch._inductor.config as inductor_config

        return inductor_config.patch(emulate_precision_casts=True)

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        # AOTAutograd's cache is off while the step runs (conformance.api.aot.modelled_compile): a hit
        # would skip inductor's inner compile and the graphs we model. Inductor's FX graph cache
        # still applies: the models read the graph as received and the wrapper's source, both the
        # same on a hit.
        return InductorStep(case, workload)
