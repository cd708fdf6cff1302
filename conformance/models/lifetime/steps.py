"""Whole steps: the user-level graph of a step, or an ``aot_autograd`` forward and backward with
what crosses between them (saved tensors, tangents) and what outlives the step (gradients)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.fx

from conformance.models.lifetime.accumulate import Layout, accumulate_grads, dense_layout, layout_of
from conformance.models.lifetime.aliasing import storages_in
from conformance.models.lifetime.cached import NotCachable, cached, graph_digest, observation_parts
from conformance.models.lifetime.graph import GraphWalker
from conformance.models.lifetime.liveness import ModelBuilder
from conformance.models.lifetime.model import LifetimeModel, Observation, Storage
from conformance.models.lifetime.sizes import storage_nbytes
from conformance.models.lifetime.staging import CallingConvention


class GraphProgram(Protocol):
    """What a backend generated for one graph, able to model its own references (a program model);
    ``result_layouts``: the layouts of what its last modelled call returned."""

    result_layouts: list[Layout | None]

    def model(self, builder: ModelBuilder, inputs: Sequence[Any], input_vals: Sequence[Any], prefix: str,
              donated: bool, input_layouts: Sequence[Layout | None] = ()) -> list[Any]: ...


def model_graph(
    gm: torch.fx.GraphModule,
    observation: Observation | None = None,
    retained_outputs: Iterable[int] = (),
    staged: bool = False,
    results_at_start: int = 0,
    kernel_transients: bool = True,
    high: bool = True,
    cache_as: str | None = "received-model",
) -> LifetimeModel:
    """Model a whole step traced as one graph (the user-level graph).

    ``retained_outputs`` are output positions that outlive the step (parameter
    gradients); the rest are outputs the caller drops after the step.  ``staged`` and
    ``results_at_start``: see :class:`~conformance.models.lifetime.staging.CallingConvention`
    (a backend that copies its inputs for the call and allocates its results up front).
    ``kernel_transients`` adds what eager kernels allocate inside an op
    (:func:`conformance.models.transients.kernel_transient_bytes`): this graph is what eager runs op by op.
    The graphs a compiler received are modelled without them.  ``high``: a kernel whose workspace
    depends on the CPU (:func:`conformance.models.transients.kernel_transient_bounds`) counts its
    upper bound; ``False``, its lower.  ``cache_as``: the kind of entry the model is kept under in the run's
    result cache (:mod:`conformance.models.lifetime.cached`); ``None``: not kept.
    """
    retained = sorted(set(retained_outputs))
    return cached(cache_as,
                  lambda: ["graph", graph_digest(gm), observation_parts(observation), retained, staged,
                           results_at_start, kernel_transients, high],
                  lambda: _model_graph(gm, observation, retained, staged, results_at_start, kernel_transients, high))


def _model_graph(gm: torch.fx.GraphModule, observation: Observation | None, retained_outputs: Iterable[int],
                 staged: bool, results_at_start: int, kernel_transients: bool, high: bool) -> LifetimeModel:
    builder = ModelBuilder(observation or Observation())
    inputs = [builder.caller_input(v, name) for name, v in _placeholder_vals(gm)]
    convention = CallingConvention(staged=staged, results_at_start=results_at_start)
    outputs = GraphWalker(builder, kernel_transients, high).run_graph(gm, inputs, "", convention)
    return builder.finish(outputs, set(retained_outputs))


#: a forward graph's ``meta`` key: how many of its leading outputs AOTAutograd's runtime wrapper copies into
#: the inputs they update and drops (``ViewAndMutationMeta.num_mutated_inp_runtime_indices``)
INPUT_UPDATES = "conformance_input_updates"


def model_forward_backward(
    forward: torch.fx.GraphModule,
    backward: torch.fx.GraphModule | None,
    observation: Observation | None = None,
    saved_inputs: str = "donated",
    staged: bool = False,
    results_at_start: int = 0,
    kernel_transients: bool = False,
    programs: Sequence[GraphProgram | None] = (),
    cache_as: str | None = None,
) -> LifetimeModel:
    """Model an ``aot_autograd`` step: the partitioned forward, then the backward.

    ``programs``: what the backend generated for the forward and the backward (e.g.
    :class:`conformance.models.program.WrapperProgram`); a graph with a program is modelled
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
    with both tells which one a backend follows (:mod:`conformance.models.donation`).
    ``staged`` and ``results_at_start`` model a backend that copies each call's inputs and
    allocates its results up front (:class:`~conformance.models.lifetime.staging.CallingConvention`).

    The model is kept in the run's result cache (:mod:`conformance.models.lifetime.cached`) as a
    ``program-model`` where a program is given (one that names its own :meth:`cache_key`; any other is
    modelled every time), else as a ``received-model``; ``cache_as`` names another kind.
    """
    if saved_inputs not in ("donated", "held"):
        raise ValueError(f"saved_inputs must be 'donated' or 'held', not {saved_inputs!r}")
    kind = cache_as or ("program-model" if any(p is not None for p in programs) else "received-model")

    def key() -> list[Any]:
        return ["forward-backward", graph_digest(forward, backward), observation_parts(observation), saved_inputs,
                staged, results_at_start, kernel_transients, [_program_key(p) for p in programs]]

    return cached(kind, key, lambda: _model_forward_backward(forward, backward, observation, saved_inputs, staged,
                                                             results_at_start, kernel_transients, programs))


def _program_key(program: GraphProgram | None) -> Any:
    """A program's part of a model's key: its own :meth:`cache_key` (its text); one without is not cached."""
    if program is None:
        return None
    key = getattr(program, "cache_key", None)
    if key is None:
        raise NotCachable(f"{type(program).__name__} names no cache_key")
    return [f"{type(program).__module__}.{type(program).__qualname__}", key()]


def _model_forward_backward(
    forward: torch.fx.GraphModule, backward: torch.fx.GraphModule | None, observation: Observation | None,
    saved_inputs: str, staged: bool, results_at_start: int, kernel_transients: bool,
    programs: Sequence[GraphProgram | None],
) -> LifetimeModel:
    builder = ModelBuilder(observation or Observation())
    walker = GraphWalker(builder, kernel_transients)
    fw_program, bw_program = [*programs, None, None][:2]
    fw_outputs = _model_forward(builder, walker, forward, fw_program, staged, results_at_start)
    # AOTAutograd's runtime wrapper copies the leading outputs into the inputs they update (a parameter
    # changed in place under no_grad, as Embedding's max_norm does) and drops them when the call returns
    updates = int(forward.meta.get(INPUT_UPDATES, 0))
    if backward is None:
        builder.release(fw_outputs[:updates])
        return builder.finish(fw_outputs[updates:], set())
    crossing = _crossing(builder, forward, backward, fw_outputs, fw_program, updates)
    bw_inputs, tangents = _backward_inputs(builder, backward, crossing.saved)
    donated = saved_inputs == "donated"
    bw_outputs = _model_backward(builder, walker, backward, bw_program, bw_inputs, crossing, donated,
                                 CallingConvention(donated, staged, results_at_start))
    root = _release_backward_inputs(builder, backward, bw_inputs, tangents, donated)
    bw_outputs = _gradients(builder, forward, backward, bw_program, bw_outputs, results_at_start)
    builder.release(root)
    user_outputs = crossing.user_outputs
    return builder.finish(
        [*user_outputs, *bw_outputs],
        set(range(len(user_outputs), len(user_outputs) + len(bw_outputs))),
    )


def _model_forward(builder: ModelBuilder, walker: GraphWalker, forward: torch.fx.GraphModule,
                   program: GraphProgram | None, staged: bool, results_at_start: int) -> list[Any]:
    """The forward's outputs: by its program's own references where there is one, else by the walker."""
    inputs = [builder.caller_input(v, name) for name, v in _placeholder_vals(forward)]
    if program is not None:
        vals = [v for _, v in _placeholder_vals(forward)]
        return program.model(builder, inputs, vals, "fw:", donated=False)
    return walker.run_graph(forward, inputs, "fw:", CallingConvention(staged=staged, results_at_start=results_at_start))


@dataclass
class _Crossing:
    """What the forward hands on: the values it saves for the backward (by name), the user's outputs, and
    the layouts the forward's program returned them in (its saved tensors' real strides)."""

    saved: dict[str, Any]
    user_outputs: list[Any]
    layouts: dict[str | None, Layout | None]


def _crossing(builder: ModelBuilder, forward: torch.fx.GraphModule, backward: torch.fx.GraphModule,
              fw_outputs: list[Any], program: GraphProgram | None, updates: int) -> _Crossing:
    """Sort the forward's outputs: a value the backward takes by name is saved, the rest are the user's; the
    leading ``updates`` outputs the runtime wrapper drops are released."""
    out_node = next(n for n in forward.graph.nodes if n.op == "output")
    out_names = [a.name if isinstance(a, torch.fx.Node) else None for a in _flat_args(out_node)]
    bw_names = {name for name, _ in _placeholder_vals(backward)}
    saved = {name: v for name, v in zip(out_names, fw_outputs) if name in bw_names}
    layouts = dict(zip(out_names, program.result_layouts)) if program is not None else {}
    builder.release([v for name, v in zip(out_names[:updates], fw_outputs) if name not in bw_names])
    user_outputs = [v for i, (name, v) in enumerate(zip(out_names, fw_outputs))
                    if name not in bw_names and i >= updates]
    for value in saved.values():
        for s in storages_in(value):
            if s.role == "intermediate":
                s.role = "saved"
    if program is not None:
        mark_input_copies(saved, {name for name, _ in _placeholder_vals(forward)})
    return _Crossing(saved, user_outputs, layouts)


def _backward_inputs(builder: ModelBuilder, backward: torch.fx.GraphModule, saved: dict[str, Any],
                     ) -> tuple[list[Any], list[Storage]]:
    """The backward's inputs (the saved values, and tangents the autograd engine makes), and the tangents."""
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
    return bw_inputs, tangents


def _model_backward(builder: ModelBuilder, walker: GraphWalker, backward: torch.fx.GraphModule,
                    program: GraphProgram | None, inputs: list[Any], crossing: _Crossing, donated: bool,
                    convention: CallingConvention) -> list[Any]:
    """The backward's outputs: by its program's own references (its saved inputs in the layouts the forward's
    program returned them in) where there is one, else by the walker."""
    if program is not None:
        vals = [v for _, v in _placeholder_vals(backward)]
        layouts = [crossing.layouts.get(name) for name, _ in _placeholder_vals(backward)]
        return program.model(builder, inputs, vals, "bw:", donated=donated, input_layouts=layouts)
    return walker.run_graph(backward, inputs, "bw:", convention)


def _release_backward_inputs(builder: ModelBuilder, backward: torch.fx.GraphModule, bw_inputs: list[Any],
                             tangents: list[Storage], donated: bool) -> list[Storage]:
    """Release what the backward call held once it returns; the scalar loss's gradient (the engine's root),
    returned, lives until ``backward()`` ends."""
    if not donated:  # the caller's list of saved tensors is dropped only after the call
        builder.release([v for v in bw_inputs if not (isinstance(v, Storage) and v.role == "tangent")])
        builder.release(tangents)  # the list's reference to each tangent
    # A scalar loss's gradient is the engine's root (GraphRoot keeps it until backward() ends);
    # another tangent is released when the backward call returns.
    scalar = {name for name, val in _placeholder_vals(backward) if isinstance(val, torch.Tensor) and val.dim() == 0}
    root = [v for v in tangents if v.producer.removeprefix("bw:") in scalar]
    builder.release([v for v in tangents if v not in root])
    return root


def _gradients(builder: ModelBuilder, forward: torch.fx.GraphModule, backward: torch.fx.GraphModule,
               program: GraphProgram | None, bw_outputs: list[Any], results_at_start: int) -> list[Any]:
    """The engine makes each gradient its leaf's ``.grad``, copying one whose layout breaks the contract."""
    layouts = (program.result_layouts if program is not None
               else [layout_of(v, builder.symbols) for v in _flat_args(_output_node(backward), meta=True)])
    if program is None and results_at_start:  # a backend that makes each result a dense buffer of its own (IREE)
        layouts = [dense_layout(layout) for layout in layouts]  # returns it contiguous, whatever the graph's strides
    return accumulate_grads(builder, bw_outputs, layouts, [v for _, v in _placeholder_vals(forward)])


def mark_input_copies(saved: dict[str, Any], graph_inputs: set[str]) -> None:
    """Mark each saved buffer a forward program allocated for a value the forward graph saves as one of its own
    inputs (``primals_4``): the graphs' backward reads the caller's tensor, which costs the step nothing, so the
    buffer is alive in the program where the graphs hold no storage at all (inductor saves its channels-last copy
    of a convolution's input).  Blame can name it whatever size and order say (:mod:`conformance.checks.blame`)."""
    for name, value in saved.items():
        if name not in graph_inputs:
            continue
        for s in storages_in(value):
            if s.role != "caller" and s.nbytes:
                s.copy_of_input = name


def _placeholder_vals(gm: torch.fx.GraphModule) -> list[tuple[str, Any]]:
    return [(n.name, n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]


def _flat_args(out_node: torch.fx.Node, meta: bool = False) -> list[Any]:
    """The output node's arguments (with ``meta``: their fake values)."""
    args = out_node.args[0]
    flat = list(args) if isinstance(args, (list, tuple)) else [args]
    if meta:
        return [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in flat]
    return flat


def _output_node(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.op == "output")
