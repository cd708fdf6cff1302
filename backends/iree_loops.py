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

import operator
from dataclasses import dataclass, field
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
    """Why a loop of ``gm`` cannot go to the importer, where it carries a Python number; ``""`` if none does.
    The importer types the condition's call as a tensor (``func.call @cond -> !torch.vtensor<[],i1>``) while a
    condition on a number returns ``!torch.bool``: the module fails verification ("'func.call' op result type
    mismatch") and the in-process compile segfaults.  iree-boxed first carries ints and bools as 0-d tensors
    (:func:`number_carries_as_tensors`); what is left here (a float) is refused before import."""
    for _, node in _loops(gm):
        carried: Any = node.args[2]
        numbers = [(k, c) for k, c in enumerate(carried) if not _is_tensor(c)]
        if numbers:
            shown = ", ".join(f"carry {k}: {c.meta.get('val') if isinstance(c, torch.fx.Node) else c!r}"
                              for k, c in numbers)
            return (f"the while_loop carries a Python number ({shown}) that the loop route does not carry as a "
                    "0-d tensor (it does so for ints and bools only); turbine's FX importer types the loop "
                    "condition's call as a tensor while a condition on a number returns !torch.bool, so the module "
                    "fails verification ('func.call' op result type mismatch) and the in-process compile would "
                    "segfault: refused before import. Carry a 0-d tensor instead")
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


# -- Python numbers carried as 0-d tensors --------------------------------------------------

#: The dtype a carried Python number becomes (floats stay refused: IREE demotes f64 to f32 by default, so a
#: float carry would not compute as Python's double does).
_NUMBER_DTYPES: dict[type, torch.dtype] = {int: torch.int64, bool: torch.bool}

#: Python's operators on numbers (as Dynamo records them on SymInts) and the aten ops that compute them on a 0-d
#: tensor: (overload with a tensor other, overload with a number other, whether the operands may swap).
_OPERATORS: dict[Any, tuple[Any, Any, Any]] = {
    operator.add: (torch.ops.aten.add.Tensor, torch.ops.aten.add.Scalar, operator.add),
    operator.mul: (torch.ops.aten.mul.Tensor, torch.ops.aten.mul.Scalar, operator.mul),
    operator.sub: (torch.ops.aten.sub.Tensor, torch.ops.aten.sub.Scalar, None),
    operator.mod: (torch.ops.aten.remainder.Tensor, torch.ops.aten.remainder.Scalar, None),
    operator.and_: (torch.ops.aten.bitwise_and.Tensor, torch.ops.aten.bitwise_and.Scalar, operator.and_),
    operator.or_: (torch.ops.aten.bitwise_or.Tensor, torch.ops.aten.bitwise_or.Scalar, operator.or_),
    operator.lt: (torch.ops.aten.lt.Tensor, torch.ops.aten.lt.Scalar, operator.gt),
    operator.le: (torch.ops.aten.le.Tensor, torch.ops.aten.le.Scalar, operator.ge),
    operator.gt: (torch.ops.aten.gt.Tensor, torch.ops.aten.gt.Scalar, operator.lt),
    operator.ge: (torch.ops.aten.ge.Tensor, torch.ops.aten.ge.Scalar, operator.le),
    operator.eq: (torch.ops.aten.eq.Tensor, torch.ops.aten.eq.Scalar, operator.eq),
    operator.ne: (torch.ops.aten.ne.Tensor, torch.ops.aten.ne.Scalar, operator.ne),
}
_UNARY: dict[Any, Any] = {operator.neg: torch.ops.aten.neg.default,
                          torch.sym_not: torch.ops.aten.logical_not.default}


def _number_dtype(value: Any) -> torch.dtype | None:
    """The 0-d tensor dtype for a carried Python number (or SymInt/SymBool), ``None`` for a float."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    if isinstance(value, (bool, torch.SymBool)):
        return torch.bool
    if isinstance(value, (int, torch.SymInt)):
        return torch.int64
    return None


def _fake_mode(gm: torch.fx.GraphModule) -> Any:
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    vals = [n.meta.get("val") for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]
    try:
        found = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    except AssertionError:  # values from more than one fake mode: the new 0-d values need only their dtype
        found = None
    return found if found is not None else FakeTensorMode()


def _set_tensor_meta(node: torch.fx.Node, val: torch.Tensor) -> None:
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    node.meta["val"] = val
    node.meta["tensor_meta"] = _extract_tensor_metadata(val)


@dataclass
class _Tensorizer:
    """Rewrites one graph's nodes so the numbers in ``numbers`` (nodes now computing 0-d tensors) are used as
    tensors: Python operators on them become aten ops, and any other use reads the number back
    (``aten._local_scalar_dense``, which the importer lowers to ``torch.aten.Int.Tensor``)."""

    gm: torch.fx.GraphModule
    fake_mode: Any
    #: the graph's own results must stay numbers (the program's), not the loop's: read back there
    read_back_output: bool = False
    numbers: set[torch.fx.Node] = field(default_factory=set)

    def fake(self, dtype: torch.dtype) -> torch.Tensor:
        with self.fake_mode:
            return torch.empty((), dtype=dtype)

    def to_tensor(self, value: Any, dtype: torch.dtype, before: torch.fx.Node) -> torch.fx.Node:
        """A node computing ``value`` (a number or a number's node) as a 0-d tensor."""
        with self.gm.graph.inserting_before(before):
            node = self.gm.graph.call_function(torch.ops.aten.scalar_tensor.default, (value,), {"dtype": dtype})
        _set_tensor_meta(node, self.fake(dtype))
        self.numbers.add(node)
        return node

    def read_back(self, node: torch.fx.Node, number: Any, before: torch.fx.Node) -> torch.fx.Node:
        """A node reading the 0-d tensor ``node`` back as the number ``number`` (its original value)."""
        with self.gm.graph.inserting_before(before):
            read = self.gm.graph.call_function(torch.ops.aten._local_scalar_dense.default, (node,))
        read.meta["val"] = number
        return read

    def rewrite(self, originals: dict[torch.fx.Node, Any]) -> None:
        """Rewrite every user of the tensorized numbers (``originals``: their number values), in graph order."""
        for node in list(self.gm.graph.nodes):
            if not any(a in originals for a in node.all_input_nodes):
                continue
            if node.op == "output":
                if self.read_back_output:
                    self._read_back_args(node, originals)
                continue
            if not self._as_tensor_op(node, originals):
                self._read_back_args(node, originals)
        self.gm.recompile()

    def _as_tensor_op(self, node: torch.fx.Node, originals: dict[torch.fx.Node, Any]) -> bool:
        if node.op != "call_function" or node.kwargs:
            return False
        target: Any = node.target
        if isinstance(target, torch._ops.OpOverload):  # a tensor op: a number where it takes a Tensor stays a tensor
            schema_args = target._schema.arguments
            for pos, arg in enumerate(node.args):
                if pos < len(schema_args) and isinstance(schema_args[pos].type, torch.TensorType) \
                        and isinstance(arg, torch.fx.Node):
                    continue
                node.update_arg(pos, torch.fx.node.map_arg(  # a Scalar, an int, a size list: the number
                    arg, lambda a: self.read_back(a, originals[a], node) if a in originals else a))
            return True
        args: tuple[Any, ...]
        if target in _UNARY and node.args[0] in self.numbers:
            new_target, args = _UNARY[target], (node.args[0],)
        elif target in _OPERATORS and len(node.args) == 2:
            with_tensor, with_number, swapped = _OPERATORS[target]
            lhs, rhs = node.args
            if lhs not in self.numbers:
                if swapped is None:
                    return False
                with_tensor, with_number, _ = _OPERATORS[swapped]
                lhs, rhs = rhs, lhs
            new_target = with_tensor if rhs in self.numbers else with_number
            args = (lhs, rhs)
        else:
            return False
        with self.fake_mode:
            fake_args = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
            try:
                val = new_target(*fake_args)
            except Exception:
                return False
        if not isinstance(val, torch.Tensor) or val.dtype not in (torch.int64, torch.bool):
            return False  # a float result (true division, a float operand): Python computes it in double
        originals[node] = node.meta.get("val")
        node.target, node.args = new_target, args
        _set_tensor_meta(node, val)
        self.numbers.add(node)
        return True

    def _read_back_args(self, node: torch.fx.Node, originals: dict[torch.fx.Node, Any]) -> None:
        for arg in [a for a in node.all_input_nodes if a in originals]:
            read = self.read_back(arg, originals[arg], node)
            node.replace_input_with(arg, read)


def _tensorize_subgraph(sub: torch.fx.GraphModule, positions: dict[int, torch.dtype], n_carried: int,
                        fake_mode: Any, returns_carries: bool) -> None:
    """The loop body or condition ``sub`` taking its inputs at ``positions`` as 0-d tensors: the body returns
    the carried ones (the first ``n_carried`` inputs) as 0-d tensors, the condition a 0-d bool tensor."""
    tensorizer = _Tensorizer(sub, fake_mode)
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    originals: dict[torch.fx.Node, Any] = {}
    for k, dtype in positions.items():
        originals[placeholders[k]] = placeholders[k].meta.get("val")
        _set_tensor_meta(placeholders[k], tensorizer.fake(dtype))
        tensorizer.numbers.add(placeholders[k])
    tensorizer.rewrite(originals)
    output = next(n for n in sub.graph.nodes if n.op == "output")
    results = output.args[0]
    multiple = isinstance(results, (list, tuple))
    values = list(results) if multiple else [results]
    wanted = {k: d for k, d in positions.items() if k < n_carried} if returns_carries else {0: torch.bool}
    for k, dtype in wanted.items():
        if values[k] not in tensorizer.numbers and not _is_tensor(values[k]):
            values[k] = tensorizer.to_tensor(values[k], dtype, output)
    output.args = ((*values,) if multiple else values[0],)
    sub.recompile()


def number_carries_as_tensors(gm: torch.fx.GraphModule) -> int:
    """Every ``while_loop`` of ``gm`` (and of its subgraphs) that carries a Python int or bool (``while_loop(cond,
    body, (0, x))``, a size) carries it as a 0-d tensor (int64, bool) instead, as it does a number it reads from
    outside (an additional input: a size under ``dynamic=True``); returns how many inputs it converted.

    The importer types a loop condition's call as a 0-d bool tensor (``!torch.vtensor<[],i1>``) while a condition
    on a number returns ``!torch.bool``: as received, the module fails verification.  Here the loop's inputs at
    those positions become ``aten.scalar_tensor``, the body and condition take 0-d tensors, Python's operators on
    them become aten ops (``i + 1`` -> ``aten.add.Scalar``, ``i < n`` -> ``aten.lt.Scalar``), a tensor op takes the
    0-d tensor where it took the number (the same type promotion: a 0-d operand does not raise a dimensioned
    one's dtype within its category), and any other use reads the number back (``aten._local_scalar_dense``), as
    does the program wherever it uses the loop's number result.  Call after :func:`lift_loop_inputs` (which
    gives the subgraphs their own copies)."""
    if not _loops(gm):  # every graph of iree-boxed's model comes here: most have no loop
        return 0
    return _numbers_as_tensors(gm, _fake_mode(gm))


def _numbers_as_tensors(gm: torch.fx.GraphModule, fake_mode: Any) -> int:
    converted = 0
    done: set[str] = set()  # a subgraph two loops share is rewritten once
    for node in [n for n in gm.graph.nodes if _is_plain_while_loop(n)]:
        carried, additional = tuple(node.args[2]), tuple(node.args[3])
        # an additional number (a size the condition reads) too: the model reads the loop unlifted
        positions = {k: dtype for k, c in enumerate((*carried, *additional)) if not _is_tensor(c)
                     and (dtype := _number_dtype(c)) is not None}
        if not positions:
            continue
        cond_node, body_node = node.args[:2]
        for sub_node, returns_carries in ((cond_node, False), (body_node, True)):
            if sub_node.target in done:
                continue
            done.add(sub_node.target)
            sub = _own_copy(_subgraph(gm, sub_node))
            setattr(gm, sub_node.target, sub)
            _tensorize_subgraph(sub, positions, len(carried), fake_mode, returns_carries)
        outer = _Tensorizer(gm, fake_mode, read_back_output=True)
        inputs = [outer.to_tensor(c, positions[k], node) if k in positions else c
                  for k, c in enumerate((*carried, *additional))]
        node.args = (*node.args[:2], tuple(inputs[:len(carried)]), tuple(inputs[len(carried):]), *node.args[4:])
        converted += len(positions)
        positions = {k: dtype for k, dtype in positions.items() if k < len(carried)}  # the loop's results
        vals = list(node.meta["val"])
        originals = {}
        for k, dtype in positions.items():
            vals[k] = outer.fake(dtype)
        node.meta["val"] = tuple(vals)
        for user in list(node.users):  # getitem k: the loop's number result, read back where the program uses it
            if user.target is operator.getitem and user.args[1] in positions:
                originals[user] = user.meta.get("val")
                _set_tensor_meta(user, vals[user.args[1]])
                outer.numbers.add(user)
        outer.rewrite(originals)
    for child in list(gm.children()):  # loops in the (rewritten) bodies and conditions
        if isinstance(child, torch.fx.GraphModule):
            converted += _numbers_as_tensors(child, fake_mode)
    return converted
