"""The reference tensor-lifetime model.

Given ATen-level FX graphs, work out when every *storage* is born (its producing
node) and when it dies (right after the last node that needs any value aliasing
it), and turn that into a live-bytes timeline with its peak and residual.

The discipline is the one an ideal executor follows, and the one
:mod:`conformance.interpreter` implements with real tensors: a value is held from
the node that produces it until the last node that uses it; a storage is alive
while any value that aliases it is held; graph outputs and retained tensors
survive the step; caller-owned inputs cost the step nothing.  Loops are unrolled
with the trip counts a real run observed, so the timeline is exact.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef

from conformance.transients import kernel_transient_bytes

WHILE_LOOP_OPS = ("while_loop", "while_loop_stack_output")


@dataclass(eq=False)
class Storage:
    """One storage the step allocates, with where it came from and when it lives (identity-compared)."""

    sid: int
    nbytes: int
    producer: str
    op: str
    shape: tuple[int, ...]
    dtype: str
    role: str = "intermediate"  # intermediate | output | retained | saved | tangent
    birth: int = -1
    death: int | None = None  # event index after which it is freed; None: outlives the step
    refs: int = field(default=0, repr=False)
    # Set by a program model (:mod:`conformance.program`) for the storages a generated program handles:
    last_use: int | None = None  # the last event that read or wrote it
    held_by: str = ""  # what still referenced it at the first work past its last use
    op_writer: str = ""  # the kernel or op that produced its contents
    modelled_by_program: bool = False
    allocated_by_program: bool = False  # allocated by the program itself (not returned by an op)

    def describe(self) -> dict[str, Any]:
        return {
            "producer": self.producer,
            "op": self.op_writer or self.op,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "bytes": self.nbytes,
            "role": self.role,
            "model_birth": self.birth,
            "model_death": self.death,
        }


@dataclass
class LifetimeModel:
    """A live-bytes timeline: ``events[i]`` is a node run, ``live_bytes[i]`` the bytes live during it."""

    events: list[str]
    live_bytes: list[int]
    storages: list[Storage]
    #: Events that allocated or computed (a program model's kernels and ops); empty for graph models.
    work_events: set[int] = field(default_factory=set)
    #: What a program model found about the program's own references (late ones, see conformance.program).
    findings: list[Any] = field(default_factory=list)

    @property
    def peak_bytes(self) -> int:
        return max(self.live_bytes, default=0)

    @property
    def peak_event(self) -> int:
        return max(range(len(self.live_bytes)), key=self.live_bytes.__getitem__, default=-1)

    @property
    def residual_bytes(self) -> int:
        return sum(s.nbytes for s in self.storages if s.death is None and s.role == "retained")

    @property
    def end_bytes(self) -> int:
        """Bytes live at the end of the step while outputs are still held."""
        return sum(s.nbytes for s in self.storages if s.death is None)


def release_schedule(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """For each node, the nodes whose values may be dropped right after it runs.

    A value is dropped after its last user; a value nobody uses is dropped right
    after it is made.  Values the graph returns are never dropped.
    """
    nodes = list(graph.nodes)
    returned: set[torch.fx.Node] = set()
    last_use: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in nodes:
        if node.op == "output":
            returned.update(_flat_nodes(node.args))
            continue
        for used in _flat_nodes((node.args, node.kwargs)):
            last_use[used] = node
    schedule: dict[torch.fx.Node, list[torch.fx.Node]] = {n: [] for n in nodes}
    for node in nodes:
        if node.op in ("output", "get_attr") or node in returned:
            continue
        schedule[last_use.get(node, node)].append(node)
    return schedule


def _flat_nodes(tree: Any) -> list[torch.fx.Node]:
    out: list[torch.fx.Node] = []
    torch.fx.node.map_arg(tree, out.append)
    return out


def op_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None) or str(target)
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    return name


def is_while_loop(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and isinstance(node.target, torch._ops.HigherOrderOperator)
        and _hop_name(node) in WHILE_LOOP_OPS
    )


def _hop_name(node: torch.fx.Node) -> str:
    target: Any = node.target
    return str(target.name()) if isinstance(target, torch._ops.HigherOrderOperator) else ""


@dataclass(frozen=True)
class LoopParts:
    """A ``while_loop`` node's pieces: its subgraphs, carried and additional inputs."""

    cond: torch.fx.GraphModule
    body: torch.fx.GraphModule
    carried: tuple[Any, ...]
    additional: tuple[Any, ...]
    stacked: bool  # while_loop_stack_output: every trip's carry is kept and stacked


def loop_parts(node: torch.fx.Node, root: torch.nn.Module) -> LoopParts:
    args: Any = node.args
    cond_attr, body_attr, carried, additional = args[:4]
    return LoopParts(
        getattr(root, cond_attr.target),
        getattr(root, body_attr.target),
        tuple(carried),
        tuple(additional),
        _hop_name(node) == "while_loop_stack_output",
    )


def storage_nbytes(t: torch.Tensor, symbols: dict[Any, int]) -> int:
    """The bytes of ``t``'s storage, resolving symbolic sizes with observed values."""
    n = t.untyped_storage().nbytes()
    if isinstance(n, int):
        return n
    return _concrete(n, symbols)


def _concrete(value: Any, symbols: dict[Any, int]) -> int:
    if isinstance(value, int):
        return value
    expr = value.node.expr if isinstance(value, torch.SymInt) else value
    resolved = expr.xreplace(symbols) if symbols else expr
    try:
        return int(resolved)
    except TypeError as exc:  # still symbolic: the observation did not cover it
        raise ModelError(f"size {expr} is unknown: no observed value for its symbols") from exc


def _concrete_shape(t: torch.Tensor, symbols: dict[Any, int]) -> tuple[int, ...]:
    return tuple(_concrete(s, symbols) for s in t.shape)


class ModelError(RuntimeError):
    """The graph could not be modelled (a size or an op the model does not know)."""


class GraphProgram(Protocol):
    """What a backend generated for one graph, able to model its own references (a program model)."""

    def model(self, builder: _Builder, inputs: Sequence[Any], input_vals: Sequence[Any], prefix: str,
              donated: bool) -> list[Any]: ...


@dataclass
class Observation:
    """What a real run saw that a graph alone does not say: loop trip counts, in run order."""

    trip_counts: list[int] = field(default_factory=list)


class _Builder:
    """Walks graphs the way the reference executor runs them, logging births and deaths."""

    def __init__(self, observation: Observation, kernel_transients: bool = False) -> None:
        self.kernel_transients = kernel_transients
        self.events: list[str] = []
        self.live: list[int] = []
        self.work_events: set[int] = set()
        self.findings: list[Any] = []
        self.storages: list[Storage] = []
        self._live_now = 0
        self._trips = list(observation.trip_counts)
        self._symbols: dict[Any, int] = {}
        self._early: dict[torch.fx.Node, Storage] = {}

    # -- storages and references ---------------------------------------------------
    def new_storage(
        self, nbytes: int, producer: str, op: str, val: torch.Tensor | None, role: str
    ) -> Storage:
        shape = _concrete_shape(val, self._symbols) if val is not None else ()
        dtype = str(val.dtype).removeprefix("torch.") if val is not None else ""
        s = Storage(len(self.storages), nbytes, producer, op, shape, dtype, role)
        s.birth = len(self.events)
        self.storages.append(s)
        self._live_now += nbytes
        return s

    def acquire(self, value: Any) -> None:
        for s in _storages_in(value):
            s.refs += 1

    def release(self, value: Any) -> None:
        for s in _storages_in(value):
            s.refs -= 1
            if s.refs == 0 and s.role not in ("caller",):
                s.death = len(self.events) - 1
                self._live_now -= s.nbytes

    def event(self, label: str, transient_peak: int | None = None) -> None:
        """Close an event: everything born so far during it was live at its peak."""
        self.events.append(label)
        self.live.append(max(self._live_now, transient_peak or 0))

    # -- graphs ----------------------------------------------------------------------
    def run_graph(
        self,
        gm: torch.fx.GraphModule,
        inputs: Sequence[Any],
        prefix: str,
        donated: bool = False,
        staged: bool = False,
        results_at_start: int = 0,
    ) -> list[Any]:
        """Model one graph; ``inputs`` are storage-structured values the caller holds.

        With ``donated`` the caller hands its references over (the boxed calling
        convention: the argument list is cleared), so inputs die at their last use.

        With ``staged`` the backend copies every tensor input into a buffer of its own
        (contiguous, ``numel * itemsize`` bytes) and holds the copies for the whole
        call, as IREE's runtime does with its VM argument list; the graph then reads
        the copies.  A donated original dies right after its copy is made, one input
        at a time; an original that is not donated stays alive until the call returns.

        With ``results_at_start=N`` (N > 0) the backend allocates each result the graph
        computes when the call starts, rounded up to a multiple of N bytes (IREE allocates
        a function's results before its first dispatch, 64-byte aligned).  Each result is
        still its own storage: one result dying frees its bytes whatever the others do.
        """
        env: dict[torch.fx.Node, Any] = {}
        call_refs: list[Any] = []  # staged copies and held originals: released when the call returns
        keys: dict[Any, Storage] = {}
        schedule = release_schedule(gm.graph)
        position = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
        if len(position) != len(inputs):
            raise ModelError(f"{prefix}: {len(position)} placeholders, {len(inputs)} inputs")
        outputs: list[Any] = []
        pending_results = self._result_nodes(gm) if results_at_start else []
        for node in gm.graph.nodes:
            if pending_results and node.op not in ("placeholder", "get_attr"):
                call_refs.extend(self._allocate_results(pending_results, prefix, results_at_start))
                pending_results = []
            if node.op == "placeholder":
                value = inputs[position[node]]
                if staged:
                    value = self._stage(node, value, prefix, donated, call_refs)
                elif not donated:
                    self.acquire(value)
                env[node] = value
                for key, s in zip(_storage_keys(node.meta.get("val")), _flatten(value)):
                    if key is not None and isinstance(s, Storage):
                        keys[key] = s
                continue
            if node.op == "get_attr":
                env[node] = None
                continue
            if node.op == "output":
                # A result still waiting in its up-front buffer is a view of another value:
                # the backend materialises it there (results are dense buffers of their own).
                def value_of(n: torch.fx.Node) -> Any:
                    return self._early.pop(n, None) or env[n]

                result: Any = torch.fx.node.map_arg(node.args[0], value_of)
                outputs = list(result) if isinstance(result, (list, tuple)) else [result]
                for value in outputs:
                    self.acquire(value)
                break
            label = f"{prefix}{node.name}"
            if is_while_loop(node):
                env[node] = self._while_loop(node, env, label)
                for key, s in zip(_storage_keys(node.meta.get("val")), _flatten(env[node])):
                    if key is not None and isinstance(s, Storage):
                        keys.setdefault(key, s)
            elif node.target is operator.getitem:
                container = env[node.args[0]]
                env[node] = container[node.args[1]] if container is not None else None
                self.acquire(env[node])
            else:
                env[node] = self._op(node, keys, label)
                self.acquire(env[node])
                extra = kernel_transient_bytes(node) if self.kernel_transients else 0
                self.event(label, self._live_now + extra if extra else None)
            for dead in schedule[node]:
                if dead in env:
                    self.release(env.pop(dead))
        for value in env.values():
            self.release(value)
        self.release(call_refs)
        return outputs

    @staticmethod
    def _result_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
        out = next(n for n in gm.graph.nodes if n.op == "output")
        seen: dict[torch.fx.Node, None] = {}  # in order, each once
        for n in _flat_nodes(out.args):
            if n.op not in ("placeholder", "get_attr") and isinstance(n.meta.get("val"), torch.Tensor):
                seen.setdefault(n)
        return list(seen)

    def _allocate_results(self, nodes: list[torch.fx.Node], prefix: str, align: int) -> list[Storage]:
        made = []
        for n in nodes:
            val = n.meta["val"]
            nbytes = _concrete(val.numel(), self._symbols) * val.element_size()
            nbytes = -(-nbytes // align) * align
            s = self.new_storage(nbytes, f"{prefix}{n.name}", op_name(n), val, "intermediate")
            self.acquire(s)  # the call's own reference, dropped when it returns
            self._early[n] = s
            made.append(s)
        self.event(f"{prefix}results")
        return made

    def _stage(self, node: torch.fx.Node, value: Any, prefix: str, donated: bool, call_refs: list[Any]) -> Any:
        """The backend's copy of one call input; the env holds the copy in place of the original."""
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(value, Storage):
            if not donated:
                self.acquire(value)
            return value
        nbytes = _concrete(val.numel(), self._symbols) * val.element_size()
        copy = self.new_storage(nbytes, f"{prefix}stage:{node.name}", "stage", val, "staging")
        self.acquire(copy)  # the env's reference, dropped at the copy's last use
        self.acquire(copy)  # the argument list's, dropped when the call returns
        call_refs.append(copy)
        self.event(f"{prefix}stage:{node.name}")
        if donated:
            self.release(value)  # the caller's reference was handed over; the copy replaces it
        else:
            self.acquire(value)
            call_refs.append(value)
        return copy

    def _op(self, node: torch.fx.Node, keys: dict[Any, Storage], label: str) -> Any:
        val = node.meta.get("val")
        op = op_name(node)

        def make(t: Any) -> Any:
            if not isinstance(t, torch.Tensor):
                return None
            key = StorageWeakRef(t.untyped_storage())
            if key in keys:  # a view or in-place result: same storage as an earlier value
                return keys[key]
            if node in self._early:  # a result allocated when the call started
                keys[key] = self._early.pop(node)
                return keys[key]
            s = self.new_storage(storage_nbytes(t, self._symbols), label, op, t, "intermediate")
            keys[key] = s
            return s

        if isinstance(val, (list, tuple)):
            return tuple(make(t) for t in val)
        return make(val)

    def _while_loop(self, node: torch.fx.Node, env: dict[torch.fx.Node, Any], label: str) -> Any:
        root = node.graph.owning_module
        assert root is not None
        loop = loop_parts(node, root)
        cond_gm, body_gm, stacked = loop.cond, loop.body, loop.stacked
        carried = [env[n] if isinstance(n, torch.fx.Node) else None for n in loop.carried]
        additional = [env[n] if isinstance(n, torch.fx.Node) else None for n in loop.additional]
        if not self._trips:
            raise ModelError(f"{label}: no observed trip count for this loop")
        trips = self._trips.pop(0)
        self._bind_trip_symbols(node, trips)
        self.acquire(carried)
        history: list[list[Any]] = []
        for trip in range(trips + 1):
            pred = self.run_graph(cond_gm, [*carried, *additional], f"{label}.cond{trip}:")
            self.release(pred)
            if trip == trips:
                break
            new = self.run_graph(body_gm, [*carried, *additional], f"{label}.body{trip}:")
            if stacked:
                self.acquire(new)
                history.append(new)
            self.release(carried)
            carried = new
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (list, tuple)) else [val]
        if stacked:
            result = tuple(
                self.new_storage(storage_nbytes(v, self._symbols), f"{label}.stack", op_name(node), v, "intermediate")
                if isinstance(v, torch.Tensor)
                else None
                for v in vals
            )
            self.acquire(result)
            self.event(f"{label}.stack")
            for h in history:
                self.release(h)
            self.release(carried)
            return result
        if trips == 0:  # the dense kernel returns clones of the inputs
            self.release(carried)
            result = tuple(
                self.new_storage(storage_nbytes(v, self._symbols), f"{label}.clone", op_name(node), v, "intermediate")
                if isinstance(v, torch.Tensor)
                else None
                for v in vals
            )
            self.acquire(result)
            self.event(f"{label}.clone")
            return result
        return tuple(carried)

    def _bind_trip_symbols(self, node: torch.fx.Node, trips: int) -> None:
        """Bind the unbacked leading size of stacked loop outputs to the observed trip count."""
        if _hop_name(node) != "while_loop_stack_output":
            return
        val = node.meta.get("val")
        for v in val if isinstance(val, (list, tuple)) else [val]:
            if isinstance(v, torch.Tensor) and v.dim() and isinstance(v.shape[0], torch.SymInt):
                expr = v.shape[0].node.expr
                for sym in expr.free_symbols:
                    self._symbols[sym] = trips
                    return


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _storages_in(value: Any) -> Iterable[Storage]:
    return (s for s in _flatten(value) if isinstance(s, Storage))


def _storage_keys(val: Any) -> list[Any]:
    return [
        StorageWeakRef(t.untyped_storage()) if isinstance(t, torch.Tensor) else None
        for t in _flatten(val)
    ]


def _caller_value(val: Any, name: str, builder: _Builder) -> Any:
    """A caller-owned input: it exists before the step and costs it nothing."""
    if isinstance(val, (list, tuple)):
        return tuple(_caller_value(v, name, builder) for v in val)
    if not isinstance(val, torch.Tensor):
        return None
    s = Storage(len(builder.storages), 0, name, "input", tuple(val.shape), str(val.dtype), "caller")
    s.birth = -1
    builder.storages.append(s)
    return s


def _placeholder_vals(gm: torch.fx.GraphModule) -> list[tuple[str, Any]]:
    return [(n.name, n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]


def _finish(builder: _Builder, outputs: Sequence[Any], retained: set[int]) -> LifetimeModel:
    for i, value in enumerate(outputs):
        for s in _storages_in(value):
            if s.role == "caller":
                continue
            s.role = "retained" if i in retained else "output"
    # A storage with no references left died already; one still referenced outlives the step.
    for s in builder.storages:
        if s.role == "caller":
            s.death = None
    return LifetimeModel(builder.events, builder.live, builder.storages, builder.work_events, builder.findings)


def model_graph(
    gm: torch.fx.GraphModule,
    observation: Observation | None = None,
    retained_outputs: Iterable[int] = (),
    staged: bool = False,
    results_at_start: int = 0,
    kernel_transients: bool = True,
) -> LifetimeModel:
    """Model a whole step traced as one graph (the user-level graph).

    ``retained_outputs`` are output positions that outlive the step (parameter
    gradients); the rest are outputs the caller drops after the step.  ``staged``:
    see :meth:`_Builder.run_graph` (a backend that copies its inputs for the call).
    ``kernel_transients`` adds what eager kernels allocate inside an op
    (:func:`kernel_transient_bytes`): this graph is what eager runs op by op.
    The graphs a compiler received are modelled without them.
    """
    builder = _Builder(observation or Observation(), kernel_transients)
    inputs = [_caller_value(v, name, builder) for name, v in _placeholder_vals(gm)]
    outputs = builder.run_graph(gm, inputs, "", staged=staged, results_at_start=results_at_start)
    return _finish(builder, outputs, set(retained_outputs))


def model_forward_backward(
    forward: torch.fx.GraphModule,
    backward: torch.fx.GraphModule | None,
    observation: Observation | None = None,
    saved_inputs: str = "donated",
    staged: bool = False,
    results_at_start: int = 0,
    kernel_transients: bool = False,
    programs: Sequence[GraphProgram | None] = (),
) -> LifetimeModel:
    """Model an ``aot_autograd`` step: the partitioned forward, then the backward.

    ``programs``: what the backend generated for the forward and the backward (e.g.
    :class:`conformance.program.WrapperProgram`); a graph with a program is modelled
    by running the program's own references instead of the ideal executor's.

    ``kernel_transients``: the backend runs the graphs' ATen ops with eager kernels
    (an interpreting backend), so what those kernels allocate inside an op counts.

    The forward returns the user's outputs and what it saves for backward; a
    forward output is saved when the backward takes an input of the same name (the
    partitioner's naming).  Saved tensors cross into the backward as its inputs
    and must die at their last use there (the boxed convention).
    Tangents are made by the autograd engine just before the backward runs and are
    held by it for the whole backward call.  The
    backward's outputs are gradients, retained past the step.

    ``saved_inputs="held"`` models the other convention, the one of a compiled
    backward that takes its inputs unpacked and never clears the boxed list: saved
    tensors stay alive until the backward call returns.  Comparing a measurement
    with both tells which one a backend follows (:mod:`conformance.donation`).
    ``staged`` and ``results_at_start`` model a backend that copies each call's inputs and
    allocates its results up front (see ``run_graph``).
    """
    if saved_inputs not in ("donated", "held"):
        raise ValueError(f"saved_inputs must be 'donated' or 'held', not {saved_inputs!r}")
    builder = _Builder(observation or Observation(), kernel_transients)
    fw_program, bw_program = [*programs, None, None][:2]
    fw_inputs = [_caller_value(v, name, builder) for name, v in _placeholder_vals(forward)]
    if fw_program is not None:
        fw_vals = [v for _, v in _placeholder_vals(forward)]
        fw_outputs = fw_program.model(builder, fw_inputs, fw_vals, "fw:", donated=False)
    else:
        fw_outputs = builder.run_graph(forward, fw_inputs, "fw:", staged=staged, results_at_start=results_at_start)
    if backward is None:
        return _finish(builder, fw_outputs, set())
    out_node = next(n for n in forward.graph.nodes if n.op == "output")
    out_names = [a.name if isinstance(a, torch.fx.Node) else None for a in _flat_args(out_node)]
    bw_names = {name for name, _ in _placeholder_vals(backward)}
    saved = {name: v for name, v in zip(out_names, fw_outputs) if name in bw_names}
    user_outputs = [v for name, v in zip(out_names, fw_outputs) if name not in bw_names]
    for value in saved.values():
        for s in _storages_in(value):
            if s.role == "intermediate":
                s.role = "saved"
    bw_inputs: list[Any] = []
    for name, val in _placeholder_vals(backward):
        if name in saved:
            bw_inputs.append(saved[name])
        elif isinstance(val, torch.Tensor):  # a tangent, made by the autograd engine
            tangent = builder.new_storage(storage_nbytes(val, {}), f"bw:{name}", "tangent", val, "tangent")
            builder.acquire(tangent)
            bw_inputs.append(tangent)
        else:
            bw_inputs.append(None)
    # The engine passes grad_outputs unpacked to Function.backward: they are held
    # for the whole backward call whatever the compiled graph does with them.
    tangents = [v for v in bw_inputs if isinstance(v, Storage) and v.role == "tangent"]
    builder.acquire(tangents)
    donated = saved_inputs == "donated"
    if bw_program is not None:
        bw_vals = [v for _, v in _placeholder_vals(backward)]
        bw_outputs = bw_program.model(builder, bw_inputs, bw_vals, "bw:", donated=donated)
    else:
        bw_outputs = builder.run_graph(backward, bw_inputs, "bw:", donated=donated, staged=staged,
                                       results_at_start=results_at_start)
    if not donated:  # the caller's list of saved tensors is dropped only after the call
        builder.release([v for v in bw_inputs if not (isinstance(v, Storage) and v.role == "tangent")])
        builder.release(tangents)  # the list's reference to each tangent
    builder.release(tangents)
    return _finish(
        builder,
        [*user_outputs, *bw_outputs],
        set(range(len(user_outputs), len(user_outputs) + len(bw_outputs))),
    )


def _flat_args(out_node: torch.fx.Node) -> list[Any]:
    args = out_node.args[0]
    return list(args) if isinstance(args, (list, tuple)) else [args]
