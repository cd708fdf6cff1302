"""What every ``aot_autograd`` backend gets from the harness: its received graphs, modelled, and
a watch on every compiled backward.

An adapter whose compiler sits behind ``torch._dynamo.backends.common.aot_autograd``
(inductor, IREE through iree-turbine, a vendor's) builds its ``torch.compile``
backend with :meth:`AotRecorder.backend` (or calls :meth:`AotRecorder.record` and
:meth:`AotRecorder.watch` from its own compiler hooks, as inductor's
``inner_compile`` does) and derives its step from :class:`AotStep`.  It then has,
with no code of its own:

* ``received_model``: the lifetime model of the partitioned forward and backward
  graphs it received (the bound its measured peak is held to);
* ``memory_findings``: whether its compiled backward releases the saved activations
  at their last use (:mod:`conformance.models.donation`), which fails the pair when it holds
  them for the whole call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.fx

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, CompileMode, Workload
from conformance.api.dispatch import Dispatched, DispatchLog
from conformance.api.step import StepOutput, run_module_step
from conformance.models.donation import BackwardWatch, classify, saved_positions
from conformance.models.lifetime import LifetimeModel, Observation, bind_symbols, model_forward_backward
from conformance.models.lifetime.split import SplitRun, model_split_step
from conformance.models.lifetime.steps import INPUT_UPDATES
from conformance.models.optimizer import OptimizerSegment
from conformance.probes.cpu import MemoryTrace

CompileFn = Callable[[torch.fx.GraphModule, list[Any]], Any]


@dataclass
class ReceivedGraph:
    gm: torch.fx.GraphModule
    is_backward: bool
    #: what the backend generated for it, where it shows it (inductor: its Python wrapper's source)
    source: str | None = None
    #: the file its generated Python code runs from, where it has one (statement spans: see
    #: :meth:`conformance.api.adapter.CompiledStep.program_files`)
    code_file: str | None = None


def snapshot(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm``'s graph that later in-place passes cannot touch.

    Node metadata is copied shallowly: the fake tensors in ``meta["val"]`` are shared,
    which keeps the storage identities the lifetime model reads views and aliases from.
    """
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


@dataclass
class AotRecorder:
    """The graphs an ``aot_autograd`` backend received, and a :class:`BackwardWatch` per compiled backward."""

    graphs: list[ReceivedGraph] = field(default_factory=list)
    watches: list[BackwardWatch] = field(default_factory=list)
    #: which graphs each call ran, at which sizes, where the backend wraps them (:meth:`dispatched`)
    log: DispatchLog = field(default_factory=DispatchLog)

    def record(self, gm: torch.fx.GraphModule, is_backward: bool) -> ReceivedGraph:
        """Keep a snapshot of a graph as received (before the backend's own passes rewrite it)."""
        received = ReceivedGraph(snapshot(gm), is_backward)
        if not is_backward:
            received.gm.meta[INPUT_UPDATES] = _input_updates()
        self.graphs.append(received)
        return received

    def dispatched(self, compiled: Any, received: ReceivedGraph) -> Dispatched:
        """``compiled`` (for ``received``) logging each run: a call's model is of the graphs it ran."""
        return Dispatched(compiled, self.log, next(i for i, g in enumerate(self.graphs) if g is received))

    def watch(self, compiled: Any, bw_gm: torch.fx.GraphModule) -> BackwardWatch:
        """Wrap a compiled backward so the step sees whether saved activations outlive its call."""
        forwards = [g.gm for g in self.graphs if not g.is_backward]
        watch = BackwardWatch(compiled, saved_positions(bw_gm, forwards[-1] if forwards else None))
        self.watches.append(watch)
        return watch

    def compiler(self, compile_graph: CompileFn, is_backward: bool) -> CompileFn:
        """``compile_graph`` as aot_autograd's forward or backward compiler, recorded (and watched)."""

        def compile_one(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            self.record(gm, is_backward)
            compiled = compile_graph(gm, example_inputs)
            return self.watch(compiled, gm) if is_backward else compiled

        return compile_one

    def backend(self, fw_compiler: CompileFn, bw_compiler: CompileFn | None = None,
                decompositions: Mapping[Any, Callable[..., Any]] | None = None, **aot_options: Any) -> Any:
        """A ``torch.compile`` backend: aot_autograd with recorded and watched compilers.

        ``decompositions`` (an op -> function table, as ``torch._decomp.get_decompositions`` returns) is what
        AOTAutograd decomposes the graphs with before your compilers receive them, as ``aot_autograd``'s own
        argument (OpenVINO's backend passes its table); the recorded graphs are the decomposed ones, so the
        received-graph model is of what your compilers really got.  Other ``aot_autograd`` keyword arguments
        (``partition_fn``, ``keep_inference_input_mutations``) pass through as given."""
        from torch._dynamo.backends.common import aot_autograd

        if decompositions is not None:
            aot_options["decompositions"] = dict(decompositions)  # a copy: the caller's table stays its own
        return aot_autograd(fw_compiler=self.compiler(fw_compiler, False),
                            bw_compiler=self.compiler(bw_compiler or fw_compiler, True), **aot_options)

    def single(self) -> tuple[ReceivedGraph, ReceivedGraph | None] | None:
        """The one forward and its backward; ``None`` after graph breaks (several graphs)."""
        forwards = [g for g in self.graphs if not g.is_backward]
        backwards = [g for g in self.graphs if g.is_backward]
        if len(forwards) != 1 or len(backwards) > 1:
            return None
        return forwards[0], backwards[0] if backwards else None

    def ran(self, observation: Observation) -> tuple[ReceivedGraph, ReceivedGraph | None, Observation] | None:
        """The forward (and backward) the observed call ran, with the observation its models need: the
        values the graphs' symbolic sizes took in that call bound.  Without a log of that call (a
        backend that does not wrap its graphs), :meth:`single`; None after graph breaks."""
        ran = self.log.of_call(observation.call)
        if not ran:
            pair = self.single()
            return None if pair is None else (*pair, observation)
        order = list(dict.fromkeys(d.graph for d in ran))
        forwards = [i for i in order if not self.graphs[i].is_backward]
        backwards = [i for i in order if self.graphs[i].is_backward]
        if len(forwards) != 1 or len(backwards) > 1:
            return None
        bound = observation.copy()
        for dispatch in ran:
            gm = self.graphs[dispatch.graph].gm
            vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
            bound.sizes.update(bind_symbols(vals, dispatch.sizes))
        fw = self.graphs[forwards[0]]
        return fw, self.graphs[backwards[0]] if backwards else None, bound

    def received_model(self, observation: Observation, saved_inputs: str = "donated",
                       **kwargs: Any) -> LifetimeModel | None:
        """The model of the received graphs the observed call ran (``kwargs``: see :func:`model_forward_backward`)."""
        ran = self.ran(observation)
        if ran is None:
            return None
        fw, bw, bound = ran
        return model_forward_backward(fw.gm, bw.gm if bw else None, bound, saved_inputs, **kwargs)

    def split_model(self, observation: Observation) -> LifetimeModel | None:
        """The model of a split step composed from every graph the observed call ran, in order, with the storages
        that crossed between them (:func:`model_split_step`); ``None`` where the log did not see the call, where it
        ran one forward graph (not split), or where
        eager code made values a graph read or the step returned (what that code held is not composed here)."""
        ran = self.log.of_call(observation.call)
        if not ran or any(len(d.args) != len(d.sizes) for d in ran) \
                or sum(not self.graphs[d.graph].is_backward for d in ran) < 2:  # one graph: not split
            return None
        bound = observation.copy()
        for dispatch in ran:
            vals = [n.meta.get("val") for n in self.graphs[dispatch.graph].gm.graph.nodes if n.op == "placeholder"]
            bound.sizes.update(bind_symbols(vals, dispatch.sizes))
        caller = set(self.log.caller_of(observation.call))
        made = caller.union(*(d.results for d in ran))
        returned = self.log.outputs_of(observation.call)
        if returned is None or any(k is not None and k not in made for k in returned):
            return None  # eager code made what the step returned (the frame's eager tail after the graphs)
        runs = [SplitRun(self.graphs[d.graph].gm, self.graphs[d.graph].is_backward, d.args, d.results) for d in ran]
        split = model_split_step(runs, caller, bound, self.log.gradients_of(observation.call), returned)
        return None if split.eager_made else split.model

    def backward_findings(self, traces: list[MemoryTrace], observation: Observation,
                          still_allocated_bytes: int = 0, **kwargs: Any) -> dict[str, Any]:
        """``memory["backward_inputs"]`` and its detail: do saved activations die at their last use?"""
        ran = self.ran(observation)
        if ran is None or ran[1] is None:
            return {}
        donated = self.received_model(observation, **kwargs)
        held = self.received_model(observation, "held", **kwargs)
        return classify(self.watches, max(t.peak_bytes for t in traces), donated, held,
                        still_allocated_bytes=still_allocated_bytes).to_json()


def model_of_received(graphs: list[ReceivedGraph], observation: Observation,
                      saved_inputs: str = "donated") -> LifetimeModel | None:
    """Model one forward (and its backward); several graphs (graph breaks) are not modelled."""
    return AotRecorder(graphs).received_model(observation, saved_inputs)


@contextmanager
def modelled_compile() -> Iterator[None]:
    """What the models read from a compile, kept whole while the harness calls the compiled step (restored
    after): AOTAutograd's cache would skip the backend's compilers (and with them the graphs we model), and
    FakeTensorMode's dispatch cache gives a result seen before the storage of its own extent, not its kernel's
    (``aten.copy`` of a slice clones the slice's whole base), so the received graphs' storages would depend on
    what the process traced before (:func:`conformance.models.lifetime.sizes.storage_exact_fake_mode`)."""
    fake_cache: dict[str, Any] = {"fake_tensor_cache_enabled": False} \
        if hasattr(torch._dynamo.config, "fake_tensor_cache_enabled") else {}  # a torch without it: nothing to turn off
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._dynamo.config.patch(fake_cache):
        yield


#: its name before it kept the fake-tensor storages too, for an adapter that calls it
no_autograd_cache = modelled_compile


class DynamoStep(CompiledStep):
    """A workload run through ``torch.compile`` with a given backend callable."""

    #: what ``torch.compile(optimizer.step, backend=...)`` gets for a case with ``compile_optimizer`` (a plain
    #: backend, not the recording one: the optimizer's graphs are not the step's received graphs); ``None``:
    #: the optimizer runs eagerly (and the pair gets a note)
    optimizer_backend: ClassVar[Any] = None
    #: whether this step compiles as users do (``torch.compile``'s default, or what a case whose
    #: shapes change asks: ``case.shapes.compile``); a step that does not keeps ``dynamic=False``
    follows_compile_mode: ClassVar[bool] = False

    def __init__(self, case: Case, workload: Workload, backend: Any, **compile_kwargs: Any) -> None:
        self.case = case
        self.workload = workload
        self.mode: CompileMode | None = None
        if self.follows_compile_mode:  # as users compile: the default unless the case asks otherwise
            self.mode = case.shapes.compile if case.shapes is not None else "default"
        dynamic = {None: False, "default": None, "dynamic": True, "mark_dynamic": None}[self.mode]
        self.compiled = torch.compile(workload.model, backend=backend, dynamic=dynamic, **compile_kwargs)
        self._compiled_optimizer_step: Callable[[], Any] | None = None

    def run(self) -> StepOutput:
        self.begin_call()
        if self.mode == "mark_dynamic" and self.case.shapes is not None:
            for position, dim in self.case.shapes.dims:
                torch._dynamo.mark_dynamic(self.workload.inputs[position], dim)
        with modelled_compile():
            return run_module_step(self.compiled, self.workload, self.case.trains)

    def optimizer_step(self, workload: Workload) -> None:
        """The optimizer step, compiled with :attr:`optimizer_backend` when the case asks for it."""
        if not self.compiles_optimizer(workload) or workload.optimizer is None:
            return super().optimizer_step(workload)
        if self._compiled_optimizer_step is None:
            self._compiled_optimizer_step = torch.compile(workload.optimizer.step, backend=self.optimizer_compiler())
        self.begin_optimizer_call()
        with modelled_compile():
            self._compiled_optimizer_step()
        workload.optimizer.zero_grad(set_to_none=True)

    def begin_optimizer_call(self) -> None:
        """A new call of the compiled optimizer step begins (what its compiler's dispatch log counts by)."""

    def optimizer_compiler(self) -> Any:
        """What ``torch.compile(optimizer.step, backend=...)`` gets: :attr:`optimizer_backend` unless the step
        records what it compiles (:meth:`optimizer_model` then models it)."""
        return self.optimizer_backend

    def optimizer_model(self, eager: OptimizerSegment) -> OptimizerSegment | None:
        """The eager optimizer's segment, unless the optimizer step is compiled (its program is not modelled
        here: a step whose backend shows its program overrides this)."""
        return None if self.compiles_optimizer(self.workload) else eager

    def compiles_optimizer(self, workload: Workload) -> bool:
        """The optimizer step is compiled too: the case asks for it and this backend names a compiler for it."""
        return bool(self.case.compile_optimizer and self.optimizer_backend is not None
                    and workload.optimizer is not None)

    def notes(self) -> list[str]:
        if self.case.compile_optimizer and self.optimizer_backend is None:
            return ["the optimizer step ran eagerly: this backend names no compiler for it (optimizer_backend)"]
        return []

    def begin_call(self) -> None:
        """A new call of the step begins (what a dispatch log counts calls by)."""

    def leaves_modules_to_eager(self) -> bool:
        """Dynamo leaves the modules it does not trace (RNNs) to eager PyTorch: a graph break."""
        return True


class AotStep(DynamoStep):
    """A :class:`DynamoStep` whose backend is built on :class:`AotRecorder`: received graphs modelled,
    backward inputs watched, by default."""

    recorder: AotRecorder
    #: how the received graphs are modelled (see :func:`model_forward_backward`), e.g.
    #: ``{"kernel_transients": True}`` for a backend that runs ATen ops with eager kernels
    model_options: ClassVar[dict[str, Any]] = {}

    def begin_call(self) -> None:
        model = self.workload.model
        inputs = torch.utils._pytree.tree_leaves(list(self.workload.inputs))
        self.recorder.log.begin_call([*inputs, *model.parameters(), *model.buffers()])

    def run(self) -> StepOutput:
        out = super().run()
        # what the call returned, for its split model (not the gradients: the engine copies one into .grad where
        # something else holds it, which is then no graph's result, as any grad a backend keeps would be)
        self.recorder.log.ended(list(out.outputs), list(out.retained.values()))
        return out

    def split_model(self, observation: Observation) -> LifetimeModel | None:
        if self.model_options:  # the composition walks each graph as received, under no convention of a backend's
            return None
        return self.recorder.split_model(observation)

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        return self.recorder.received_model(observation, **self.model_options)

    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        if not self.case.trains:
            return {}
        return self.recorder.backward_findings(traces, observation, **self.model_options)


def _input_updates() -> int:
    """How many leading outputs of the forward being compiled update inputs at run time (AOTAutograd's
    metadata of the graph it is compiling; 0 where none is at hand)."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    return int(getattr(metadata, "num_mutated_inp_runtime_indices", 0) or 0)


def graph_breaks() -> dict[str, int]:
    """Dynamo's graph breaks in this process so far, by reason (its own counters): the breaks it made, and
    the backend compiler's failures on a graph it then left to eager PyTorch (an op the compiler cannot
    lower, such as a data-dependent scalar: Dynamo counts those as ``unimplemented``, not as breaks)."""
    if "torch._dynamo" not in sys.modules:
        return {}
    from torch._dynamo.utils import counters

    breaks = {str(reason): int(n) for reason, n in counters["graph_break"].items()}
    for reason, n in counters["unimplemented"].items():
        if str(reason).startswith(BACKEND_COMPILER_FAILED):
            breaks[str(reason)] = breaks.get(str(reason), 0) + int(n)
    return breaks


#: how Dynamo's ``unimplemented`` counter names a graph the backend compiler failed on (run eagerly then)
BACKEND_COMPILER_FAILED = "Backend compiler exception"
