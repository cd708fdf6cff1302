"""``while_loop`` for IREE's FX importer: what a loop reads from outside, carried through it unchanged.

The importer (``FxImporter._import_hop_while_loop``, iree-base-compiler 3.13) lowers
``while_loop(cond, body, carried, additional)`` to a ``torch.prim.Loop`` whose operands are
the carried *and* the additional inputs, but whose results and region successor take only
the carried ones: the op fails verification ("region branch point has N operands, but region
successor needs M inputs") and the in-process compile then crashes.  A loop without
additional inputs imports and compiles.  :func:`lift_loop_inputs` rewrites every loop so it
has none: each additional input (a tensor the body or condition reads from outside: a
parameter, a closure tensor, an outer loop's value) becomes one more carry, which the body
returns unchanged.  Both subgraphs already take ``(*carried, *additional)``, so only the
body's results, the loop's operands and the loop's result metadata change; the values the
program reads from the loop (``getitem`` of a carried position) keep their positions.
The program computes the same values: a carried-through tensor is the same tensor every trip.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx


def _is_plain_while_loop(node: torch.fx.Node) -> bool:
    target: Any = node.target
    return (node.op == "call_function" and isinstance(target, torch._ops.HigherOrderOperator)
            and target.name() == "while_loop")


def _subgraph(gm: torch.fx.GraphModule, node: Any) -> torch.fx.GraphModule:
    module = getattr(gm, node.target)
    assert isinstance(module, torch.fx.GraphModule), f"{node.target} is not a graph"
    return module


def _carry_through(body: torch.fx.GraphModule, n_carried: int) -> None:
    """The body returns its inputs past the first ``n_carried`` unchanged, after its own results."""
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    output = next(n for n in body.graph.nodes if n.op == "output")
    results = output.args[0]
    results = tuple(results) if isinstance(results, (list, tuple)) else (results,)
    output.args = ((*results, *placeholders[n_carried:]),)
    body.recompile()


def _own_copy(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``module``'s graph (node metadata shared), so rewriting it leaves the original alone."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(module.graph, {}))
    return torch.fx.GraphModule(module, graph)


def lift_loop_inputs(gm: torch.fx.GraphModule) -> int:
    """Rewrite every ``while_loop`` in ``gm`` and its subgraphs (nested loops included) so that it has
    no additional inputs; returns how many loops were rewritten.  ``gm``'s own graph is rewritten in
    place; its subgraphs are replaced by rewritten copies (they may be shared with a graph the caller
    keeps, such as the one the lifetime model reads)."""
    lifted = 0
    done: set[int] = set()  # a body two loops share is rewritten once
    for name, child in list(gm.named_children()):  # nested loops first: their additional inputs are the outer body's
        if isinstance(child, torch.fx.GraphModule):
            child = _own_copy(child)
            setattr(gm, name, child)
            lifted += lift_loop_inputs(child)
    for node in gm.graph.nodes:
        if not _is_plain_while_loop(node):
            continue
        cond_node, body_node, carried, additional = node.args[:4]
        if not additional:
            continue
        body = _subgraph(gm, body_node)
        if id(body) not in done:
            _carry_through(body, len(carried))
            done.add(id(body))
        node.args = (cond_node, body_node, (*carried, *additional), ())
        val = node.meta.get("val")
        vals = tuple(val) if isinstance(val, (list, tuple)) else (val,)
        node.meta["val"] = (*vals, *(a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in additional))
        lifted += 1
    if lifted:
        gm.recompile()
    return lifted


#: What a higher-order op the importer lacks is, for the verdict (others are named only).
HOP_MEANING = {
    "while_loop_stack_output": "the forward of a while_loop under autograd, which keeps every trip's carry "
                               "(stacked, its leading size the trip count) for the backward",
}


def missing_hops(gm: torch.fx.GraphModule) -> str:
    """What in ``gm`` or its subgraphs turbine's FX importer cannot lower, as one verdict line (``""``: nothing)."""
    from iree.compiler.extras.fx_importer import GraphNodeImporter

    missing: dict[str, None] = {}

    def walk(module: torch.fx.GraphModule) -> None:
        for node in module.graph.nodes:
            target: Any = node.target
            if (node.op == "call_function" and isinstance(target, torch._ops.HigherOrderOperator)
                    and not hasattr(GraphNodeImporter, f"_import_hop_{target.name()}")):
                missing[target.name()] = None
        for child in module.children():
            if isinstance(child, torch.fx.GraphModule):
                walk(child)

    walk(gm)
    return "; ".join(
        f"the FX importer has no lowering for the higher-order op {name} (no _import_hop_{name})"
        + (f": {HOP_MEANING[name]}" if name in HOP_MEANING else "") for name in missing)


def views_for_view_copies(gm: torch.fx.GraphModule) -> int:
    """Replace, in ``gm``'s subgraphs (loop bodies and conditions), each ``aten.*_copy`` that is the
    functional form of a view (``torch.Tag.view_copy``: ``t_copy``, ``view_copy``, ...) by that view;
    returns how many.

    Turbine's decomposition pass re-traces a loop's body and leaves its views as ``*_copy`` ops, which
    IREE has no lowering for ("failed to legalize operation 'torch.aten.t_copy'": ``nn.Linear`` in a loop
    body).  The importer gives every value its own tensor (value semantics), so the view computes the same."""
    replaced = 0
    for module in (c for c in gm.modules() if c is not gm and isinstance(c, torch.fx.GraphModule)):
        changed = 0
        for node in module.graph.nodes:
            target: Any = node.target
            if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
                continue
            if torch.Tag.view_copy not in target.tags or not target._schema.name.endswith("_copy"):
                continue
            view_packet = getattr(torch.ops.aten, target._schema.name.split("::")[-1][:-len("_copy")], None)
            view = getattr(view_packet, target._overloadname, None) if view_packet is not None else None
            if isinstance(view, torch._ops.OpOverload) and view.is_view:
                node.target = view
                changed += 1
        if changed:
            module.recompile()
            replaced += changed
    return replaced


def _loops(gm: torch.fx.GraphModule) -> list[tuple[torch.fx.GraphModule, torch.fx.Node]]:
    """Every ``while_loop`` node in ``gm`` and its subgraphs, with the graph module that holds it."""
    return [(module, node) for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
            for node in module.graph.nodes if _is_plain_while_loop(node)]


def has_nested_loop(gm: torch.fx.GraphModule) -> bool:
    """Whether a ``while_loop`` of ``gm`` holds another in its body or condition (at any depth)."""
    for module, node in _loops(gm):
        for sub in node.args[:2]:
            name = sub.target if isinstance(sub, torch.fx.Node) else None
            target = getattr(module, name, None) if isinstance(name, str) else None
            if isinstance(target, torch.fx.GraphModule) and _loops(target):
                return True
    return False


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), torch.Tensor)


def non_tensor_carries(gm: torch.fx.GraphModule) -> str:
    """Why a loop of ``gm`` cannot go to the importer, where it carries a Python number (``while_loop(cond, body,
    (0, x))``, or a size); ``""`` if none does.  The importer types the condition's call as a tensor
    (``func.call @cond -> !torch.vtensor<[],i1>``) while a condition on an int returns ``!torch.bool``: the
    module fails verification ("'func.call' op result type mismatch") and the in-process compile segfaults."""
    for _, node in _loops(gm):
        carried: Any = node.args[2]
        numbers = [(k, c) for k, c in enumerate(carried) if not _is_tensor(c)]
        if numbers:
            shown = ", ".join(f"carry {k}: {c.meta.get('val') if isinstance(c, torch.fx.Node) else c!r}"
                              for k, c in numbers)
            return (f"the while_loop carries a Python number ({shown}); turbine's FX importer types the loop "
                    "condition's call as a tensor while a condition on a number returns !torch.bool, so the module "
                    "fails verification ('func.call' op result type mismatch) and the in-process compile would "
                    "segfault: refused before import. Carry a 0-d tensor instead "
                    "(torch.zeros((), dtype=torch.int64))")
    return ""


def max_for_full_amax(gm: torch.fx.GraphModule) -> int:
    """In every loop condition of ``gm`` (copies: call after :func:`lift_loop_inputs`), ``aten.amax`` over all
    dims (keepdim false) becomes ``aten.max`` (the same value, NaN included); returns how many.

    iree-compile 3.13 fails on a loop whose entry condition reduces with ``amax`` ("failed to legalize
    unresolved target materialization from ('i1') to ('!stream.resource<*>', 'index')"), the condition the
    generated loops draw, ``(i < steps) & (h.abs().amax() < 1e4)``; with ``max`` (or ``sum``, ``mean``) it
    compiles (docs/findings/iree-repro-while-loop-amax-cond.py)."""
    replaced = 0
    for module, node in _loops(gm):
        cond = _subgraph(module, node.args[0])
        changed = 0
        for n in cond.graph.nodes:
            if n.op != "call_function" or n.target is not torch.ops.aten.amax.default:
                continue
            x = n.args[0]
            dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", [])
            keepdim = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
            val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
            if keepdim or not isinstance(val, torch.Tensor):
                continue
            ndim = max(val.dim(), 1)
            if dims and {int(d) % ndim for d in dims} != set(range(ndim)):
                continue
            n.target, n.args, n.kwargs = torch.ops.aten.max.default, (x,), {}
            changed += 1
        if changed:
            cond.recompile()
            replaced += changed
    return replaced
