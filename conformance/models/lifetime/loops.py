"""``while_loop``: unrolled with the trip counts a real run observed, so the timeline is exact.

Each trip runs the condition graph, then the body graph on the carried values; the body's
results replace the carry.  ``while_loop_stack_output`` keeps every trip's carry and stacks
them, its leading size an unbacked symbol the observed trip count binds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conformance.models.lifetime.aliasing import storages_in
from conformance.models.lifetime.liveness import ModelBuilder
from conformance.models.lifetime.model import ModelError, op_name
from conformance.models.lifetime.sizes import Symbols, storage_nbytes

WHILE_LOOP_OPS = ("while_loop", "while_loop_stack_output")

#: Models one subgraph call on model values held by the caller; returns the values it returns.
RunGraph = Callable[[torch.fx.GraphModule, Sequence[Any], str], list[Any]]


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


def trip_symbols(node: torch.fx.Node, trips: int) -> Symbols:
    """The unbacked leading size of a stacked loop's outputs, bound to the observed trip count.

    A loop that runs no trip still stacks one row: torch's dense kernel returns each carried
    input as ``val.unsqueeze(0).clone()``, so the size is ``max(trips, 1)``, and every value the
    backward derives from it (the ``cat`` of the initial carry with the stack's rows) has it too."""
    if _hop_name(node) != "while_loop_stack_output":
        return {}
    val = node.meta.get("val")
    for v in val if isinstance(val, (list, tuple)) else [val]:
        if isinstance(v, torch.Tensor) and v.dim() and isinstance(v.shape[0], torch.SymInt):
            for sym in v.shape[0].node.expr.free_symbols:
                return {sym: max(trips, 1)}
    return {}


def unroll_while_loop(node: torch.fx.Node, env: dict[torch.fx.Node, Any], label: str, builder: ModelBuilder,
                      run_graph: RunGraph) -> Any:
    """Model one ``while_loop`` node on the values in ``env``; returns its result's model value."""
    root = node.graph.owning_module
    assert root is not None
    loop = loop_parts(node, root)
    carried = [env[n] if isinstance(n, torch.fx.Node) else None for n in loop.carried]
    additional = [env[n] if isinstance(n, torch.fx.Node) else None for n in loop.additional]
    trips = builder.next_trip_count()
    if trips is None:
        raise ModelError(f"{label}: no observed trip count for this loop")
    builder.symbols.update(trip_symbols(node, trips))
    builder.acquire(carried)
    history: list[list[Any]] = []
    for trip in range(trips + 1):
        pred = run_graph(loop.cond, [*carried, *additional], f"{label}.cond{trip}:")
        for storage in storages_in(pred):
            storage.loop_predicate = True
        builder.release(pred)
        if trip == trips:
            break
        new = run_graph(loop.body, [*carried, *additional], f"{label}.body{trip}:")
        if loop.stacked:
            builder.acquire(new)
            history.append(new)
        builder.release(carried)
        carried = new
    if loop.stacked:
        result = _fresh_results(node, f"{label}.stack", builder)
        for h in history:
            builder.release(h)
        builder.release(carried)
        return result
    if trips == 0:  # the dense kernel returns clones of the inputs
        builder.release(carried)
        return _fresh_results(node, f"{label}.clone", builder)
    return tuple(carried)


def _fresh_results(node: torch.fx.Node, label: str, builder: ModelBuilder) -> tuple[Any, ...]:
    """New storages for the loop's results (the stacked carries, or clones of the inputs), made in one event."""
    val = node.meta.get("val")
    result = tuple(
        builder.new_storage(storage_nbytes(v, builder.symbols), label, op_name(node), v, "intermediate")
        if isinstance(v, torch.Tensor)
        else None
        for v in (val if isinstance(val, (list, tuple)) else [val])
    )
    builder.acquire(result)
    builder.event(label)
    return result
