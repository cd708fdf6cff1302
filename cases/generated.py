"""Generated cases: random tiny programs that stress tensor lifetimes, drawn with Hypothesis.

A program is a small serialisable description (:class:`Program`, a list of
:class:`Op` records over numbered values), turned into plain PyTorch source by
:func:`program_source` and built from that source, so a repro script and the
harness run literally the same code.

One generator, two sources of choices: :func:`gen_program` asks a
:class:`Chooser` for bounded integers.  Hypothesis drives it through
:func:`programs` (``draw(st.integers(lo, hi))`` per choice, so it can shrink the
program), and a case id drives it through ``random.Random(seed)``, so
``gen-dag-1234`` is the same program in every process and every Hypothesis
version.  The seeded draw records its choices; replayed into Hypothesis's
database they let Hypothesis shrink exactly that program (:mod:`conformance.run.repro`).

The op vocabulary is one table, :data:`OPS`: each :class:`OpKind` says how the
generator draws the kind (operands, attributes, result shapes) and the torch
source it becomes, side by side.  A new op kind is one entry there; its place in
the table is its place in the vocabularies (Hypothesis shrinks towards the
first), and ``in_loops`` says whether loop bodies draw it too.  Any change to
the drawn kinds changes the program each seeded id names.
"""

from __future__ import annotations

import hashlib
import linecache
import random
import re
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
from hypothesis import strategies as st

from conformance.api.case import Case, CaseKind, ShapeSchedule, Tolerance, Workload, add_resolver, register

FAMILIES = ("dag", "loop", "early", "dyn")
DTYPES = ("float32", "bfloat16", "float16")
#: Per-dtype parity tolerance: about 4 ulps of the dtype at 1.0 for these shallow
#: graphs (float32 keeps the harness default).
TOLERANCES = {
    "float32": Tolerance(),
    "bfloat16": Tolerance(rtol=3e-2, atol=3e-2),
    "float16": Tolerance(rtol=4e-3, atol=4e-3),
}
SCALARS = (2.0, 0.5, -1.5)
#: Unary kinds, simplest first (an ``early`` program draws from them too).
UNARY = ("relu", "tanh", "sigmoid", "neg")

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Op:
    """One step of a program: ``kind`` applied to earlier values ``args``; ``attrs`` are small ints."""

    kind: str
    args: tuple[int, ...]
    attrs: tuple[int, ...] = ()


@dataclass(frozen=True)
class Program:
    """A whole workload.  Values are numbered: inputs, then parameters, then op results.

    For ``loop`` programs, ``body`` runs inside ``while_loop`` over its own values:
    the carried tensors, then the parameters, then the captured input ``ctx``
    (the last input), then the body's op results; ``body_out`` are the new
    carried values.  ``data_cond`` adds a data-dependent term to the condition.
    """

    family: str
    train: bool
    dtype: str
    batch: int
    width: int
    n_inputs: int
    param_shapes: tuple[Shape, ...]
    ops: tuple[Op, ...]
    outputs: tuple[int, ...]
    carried: int = 0
    trips: int = 0
    body: tuple[Op, ...] = ()
    body_out: tuple[int, ...] = ()
    data_cond: bool = False
    #: a ``dyn`` program's batch at call 0, 1, ... (cycled): its inputs change shape on every call
    batches: tuple[int, ...] = ()

    @property
    def uses_custom_ops(self) -> bool:
        return any(op_kind(op.kind).custom for op in (*self.ops, *self.body))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Program:
        def ops(raw: Sequence[Any]) -> tuple[Op, ...]:
            return tuple(Op(o["kind"], tuple(o["args"]), tuple(o["attrs"])) for o in raw)

        return Program(
            data["family"], data["train"], data["dtype"], data["batch"], data["width"], data["n_inputs"],
            tuple(tuple(s) for s in data["param_shapes"]), ops(data["ops"]), tuple(data["outputs"]),
            data["carried"], data["trips"], ops(data["body"]), tuple(data["body_out"]), data["data_cond"],
            tuple(data.get("batches", ())),
        )


# -- choices ------------------------------------------------------------------------------

class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int:
        """An int in ``[lo, hi]``; ``lo`` is the simplest.  Never called with ``lo == hi``."""


class RandomChooser:
    """Choices from ``random.Random(seed)``: deterministic everywhere; records what it chose."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.choices: list[int] = []

    def integer(self, lo: int, hi: int) -> int:
        value = self.rng.randint(lo, hi)
        self.choices.append(value)
        return value


class DrawChooser:
    """Choices drawn by Hypothesis: one ``st.integers(lo, hi)`` each, so the choice
    sequence Hypothesis stores is exactly the list of ints a :class:`RandomChooser` records."""

    def __init__(self, draw: Callable[[st.SearchStrategy[int]], int]) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))


class _Choose:
    """Helpers over a chooser; skips choices that have a single outcome."""

    def __init__(self, chooser: Chooser) -> None:
        self.c = chooser

    def between(self, lo: int, hi: int) -> int:
        return lo if hi <= lo else self.c.integer(lo, hi)

    def pick(self, items: Sequence[Any]) -> Any:
        return items[self.between(0, len(items) - 1)]

    def flag(self, one_in: int) -> bool:
        """True about once in ``one_in``; shrinks to False."""
        return self.between(0, one_in - 1) == one_in - 1


# -- the op table: how each kind is drawn and how it is written -----------------------------

def _bcast(a: Shape, b: Shape) -> Shape | None:
    """The shape ``a`` and ``b`` broadcast to (``None``: they do not).  torch.broadcast_shapes says the same, but
    its first call imports sympy (half a second in every process that registers the cases, the CLI's included)."""
    width = max(len(a), len(b))
    out = []
    for x, y in zip((1,) * (width - len(a)) + tuple(a), (1,) * (width - len(b)) + tuple(b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


class _NoOperand(Exception):
    """No value has a shape the drawn op can take."""


@dataclass(frozen=True)
class _Operands:
    """What a generator draws from: the choices, the shapes of the values so far, ``(batch, width)``."""

    ch: _Choose
    shapes: Sequence[Shape]
    dims: tuple[int, int]

    def arg(self, fits: Callable[[Shape], bool] = lambda s: True) -> int:
        """An earlier value whose shape ``fits``; raises :class:`_NoOperand` when there is none."""
        cands = [i for i, s in enumerate(self.shapes) if fits(s)]
        if not cands:
            raise _NoOperand
        # Choice 0 is the most recent value; larger choices reach far back (fan-out).
        return cands[len(cands) - 1 - self.ch.between(0, len(cands) - 1)]


#: A drawn op and the shapes of the values it produces.
_Drawn = tuple[Op, tuple[Shape, ...]]
#: Draws one op of a kind (raising :class:`_NoOperand` when no value fits it).
_Generator = Callable[[_Operands, "OpKind"], _Drawn]
#: Plain torch lines for one op: ``(op, argument names, result names, train)``.
_Emitter = Callable[[Op, Sequence[str], Sequence[str], bool], list[str]]


def _two_d(s: Shape) -> bool:
    return len(s) == 2


def _gen_same_shape(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg()
    return Op(kind.name, (a,)), (o.shapes[a],)


def _gen_scale(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg()
    return Op(kind.name, (a,), (o.ch.between(0, len(SCALARS) - 1),)), (o.shapes[a],)


def _broadcast_pair(o: _Operands) -> tuple[int, int, Shape]:
    a = o.arg()
    b = o.arg(lambda s: _bcast(o.shapes[a], s) is not None)  # a itself always fits
    joined = _bcast(o.shapes[a], o.shapes[b])
    assert joined is not None
    return a, b, joined


def _gen_broadcast(o: _Operands, kind: OpKind) -> _Drawn:
    a, b, joined = _broadcast_pair(o)
    return Op(kind.name, (a, b)), (joined,)


def _gen_slice_inplace(o: _Operands, kind: OpKind) -> _Drawn:
    a, b, joined = _broadcast_pair(o)
    if len(joined) != 2:  # no columns to slice: the in-place add instead
        return Op("add_inplace", (a, b)), (joined,)
    return Op(kind.name, (a, b), (o.ch.between(1, joined[1]),)), (joined,)


def _gen_matmul(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg(lambda s: _two_d(s) and any(len(t) == 2 and t[0] == s[1] for t in o.shapes))
    b = o.arg(lambda s: _two_d(s) and s[0] == o.shapes[a][1])
    return Op(kind.name, (a, b)), ((o.shapes[a][0], o.shapes[b][1]),)


def _gen_reduce(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg(lambda s: len(s) >= 1)
    dim = o.ch.between(0, len(o.shapes[a]) - 1)
    out = list(o.shapes[a])
    out[dim] = 1
    return Op(kind.name, (a,), (dim,)), (tuple(out),)


def _gen_reduce_all(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg(lambda s: len(s) >= 1)
    return Op(kind.name, (a,)), ((),)


def _gen_swap(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg(_two_d)
    return Op(kind.name, (a,)), ((o.shapes[a][1], o.shapes[a][0]),)


def _gen_slice(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg(lambda s: _two_d(s) and max(s) >= 2)
    s = o.shapes[a]
    dim = o.ch.pick([d for d in (0, 1) if s[d] >= 2])
    start = o.ch.between(0, s[dim] - 1)
    length = o.ch.between(1, s[dim] - start)
    out = list(s)
    out[dim] = length
    return Op(kind.name, (a,), (dim, start, length)), (tuple(out),)


def _gen_expand(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg(lambda s: len(s) == 0 or (_two_d(s) and 1 in s))
    s = o.shapes[a]
    grown = tuple(o.dims) if not s else tuple(o.dims[d] if s[d] == 1 else s[d] for d in (0, 1))
    return Op(kind.name, (a,), grown), (grown,)


def _gen_cat(o: _Operands, kind: OpKind) -> _Drawn:
    a = o.arg(_two_d)
    dim = o.ch.between(0, 1)
    b = o.arg(lambda s: _two_d(s) and s[1 - dim] == o.shapes[a][1 - dim])
    out = list(o.shapes[a])
    out[dim] += o.shapes[b][dim]
    return Op(kind.name, (a, b), (dim,)), (tuple(out),)


def _two_pieces(o: _Operands, kind: OpKind, first_size: Callable[[int], int]) -> _Drawn:
    """Cut a 2-D value in two along a dim of size >= 2; ``first_size(size)`` is the first piece's."""
    a = o.arg(lambda s: _two_d(s) and max(s) >= 2)
    s = o.shapes[a]
    dim = o.ch.pick([d for d in (0, 1) if s[d] >= 2])
    first = first_size(s[dim])
    o1, o2 = list(s), list(s)
    o1[dim], o2[dim] = first, s[dim] - first
    return Op(kind.name, (a,), (dim, first)), (tuple(o1), tuple(o2))


def _gen_split(o: _Operands, kind: OpKind) -> _Drawn:
    return _two_pieces(o, kind, lambda size: o.ch.between(1, size - 1))


def _gen_chunk(o: _Operands, kind: OpKind) -> _Drawn:
    return _two_pieces(o, kind, lambda size: (size + 1) // 2)


def _gen_copies(o: _Operands, kind: OpKind) -> _Drawn:
    """One operand, ``kind.arity`` results of its shape (the custom ops)."""
    a = o.arg()
    return Op(kind.name, (a,)), (o.shapes[a],) * kind.arity


def _lines(*templates: str) -> _Emitter:
    """An emitter filling ``str.format`` templates: ``o`` (the first result), ``outs``, ``a``
    (the argument names), ``attrs`` and ``kind``."""

    def emit(op: Op, a: Sequence[str], outs: Sequence[str], train: bool) -> list[str]:
        return [t.format(o=outs[0], outs=outs, a=a, attrs=op.attrs, kind=op.kind) for t in templates]

    return emit


def _emit_scale(op: Op, a: Sequence[str], outs: Sequence[str], train: bool) -> list[str]:
    return [f"{outs[0]} = {a[0]} * {SCALARS[op.attrs[0]]}"]


def _emit_accum(op: Op, a: Sequence[str], outs: Sequence[str], train: bool) -> list[str]:
    x = f"{a[0]}.detach()" if train else a[0]  # a mutating custom op has no autograd formula
    return [f"{outs[2]} = torch.zeros_like({a[0]})",
            f"{outs[0]}, {outs[1]} = torch.ops.conformance_gen.accum({x}, {outs[2]})"]


@dataclass(frozen=True)
class OpKind:
    """One op kind: how the generator draws it and the plain torch it becomes, side by side,
    so the shapes the generator records are the shapes the emitted source makes."""

    name: str
    #: ``None``: never drawn from a vocabulary, only placed by a family's own generator.
    generate: _Generator | None
    emit: _Emitter
    #: How many values the op produces.
    arity: int = 1
    #: Drawn in ``while_loop`` bodies too (the loop vocabulary leaves out in-place and custom ops).
    in_loops: bool = True
    #: Calls a ``conformance_gen`` custom op: the case requires ``custom_ops``.
    custom: bool = False


_INPLACE_ADD = "{o} = {a[0]} + {a[1]}"
#: Every op kind, in vocabulary order: Hypothesis shrinks a drawn kind towards the first.
OPS: dict[str, OpKind] = {kind.name: kind for kind in (
    *(OpKind(name, _gen_same_shape, _lines("{o} = torch.{kind}({a[0]})")) for name in UNARY),
    OpKind("scale", _gen_scale, _emit_scale),
    OpKind("add", _gen_broadcast, _lines("{o} = {a[0]} + {a[1]}")),
    OpKind("mul", _gen_broadcast, _lines("{o} = {a[0]} * {a[1]}")),
    OpKind("sub", _gen_broadcast, _lines("{o} = {a[0]} - {a[1]}")),
    OpKind("matmul", _gen_matmul, _lines("{o} = {a[0]} @ {a[1]}")),
    *(OpKind(name, _gen_reduce, _lines("{o} = {a[0]}.{kind}({attrs[0]}, keepdim=True)"))
      for name in ("sum", "mean", "amax")),
    OpKind("sum_all", _gen_reduce_all, _lines("{o} = {a[0]}.sum()")),
    OpKind("transpose", _gen_swap, _lines("{o} = {a[0]}.t()")),
    OpKind("reshape", _gen_swap, _lines("{o} = {a[0]}.reshape({a[0]}.shape[1], {a[0]}.shape[0])")),
    OpKind("slice", _gen_slice, _lines("{o} = {a[0]}.narrow({attrs[0]}, {attrs[1]}, {attrs[2]})")),
    OpKind("expand", _gen_expand, _lines("{o} = {a[0]}.expand({attrs[0]}, {attrs[1]})")),
    OpKind("cat", _gen_cat, _lines("{o} = torch.cat([{a[0]}, {a[1]}], {attrs[0]})")),
    OpKind("split", _gen_split, _lines(
        "{outs[0]}, {outs[1]} = torch.split({a[0]}, [{attrs[1]}, {a[0]}.shape[{attrs[0]}] - {attrs[1]}], {attrs[0]})"
    ), arity=2),
    OpKind("chunk", _gen_chunk, _lines("{outs[0]}, {outs[1]} = torch.chunk({a[0]}, 2, {attrs[0]})"), arity=2),
    OpKind("add_inplace", _gen_broadcast, _lines(_INPLACE_ADD, "{o}.mul_(0.5)"), in_loops=False),
    OpKind("relu_inplace", _gen_broadcast, _lines(_INPLACE_ADD, "{o}.relu_()"), in_loops=False),
    OpKind("slice_inplace", _gen_slice_inplace, _lines(_INPLACE_ADD, "{o}[:, :{attrs[0]}].mul_(2.0)"),
           in_loops=False),
    OpKind("twin", _gen_copies, _lines("{outs[0]}, {outs[1]} = torch.ops.conformance_gen.twin({a[0]})"),
           arity=2, in_loops=False, custom=True),
    OpKind("accum", _gen_copies, _emit_accum, arity=3, in_loops=False, custom=True),
    # the loop family's carry update: new carry j = tanh(carry j + a value that broadcasts to it)
    OpKind("blend", None, _lines("{o} = torch.tanh({a[0]} + {a[1]})")),
)}
#: Kinds a ``dag`` program draws from, and a ``loop`` body: table order.
DAG_VOCAB = tuple(name for name, kind in OPS.items() if kind.generate is not None)
LOOP_VOCAB = tuple(name for name in DAG_VOCAB if OPS[name].in_loops)


def op_kind(name: str) -> OpKind:
    """The table entry of a recorded op (a program read from JSON may name any kind)."""
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"unknown op kind {name!r}") from None


# -- generation ---------------------------------------------------------------------------

@dataclass
class _Values:
    shapes: list[Shape]
    ops: list[Op] = field(default_factory=list)

    def add(self, op: Op, *shapes: Shape) -> None:
        self.ops.append(op)
        self.shapes.extend(shapes)


def _gen_op(ch: _Choose, vals: _Values, vocab: Sequence[str], dims: tuple[int, int]) -> None:
    """Append one op of a kind from ``vocab``; falls back to ``relu`` when no operand fits."""
    kind = OPS[ch.pick(vocab)]
    assert kind.generate is not None  # a vocabulary holds only drawn kinds
    operands = _Operands(ch, vals.shapes, dims)
    try:
        op, shapes = kind.generate(operands, kind)
    except _NoOperand:
        op, shapes = _gen_same_shape(operands, OPS["relu"])
    vals.add(op, *shapes)


def _sinks(n_values: int, ops: Sequence[Op], first: int) -> tuple[int, ...]:
    """Op results nobody uses: every value then reaches an output (or the loss)."""
    used = {a for op in ops for a in op.args}
    return tuple(i for i in range(first, n_values) if i not in used)


def gen_program(chooser: Chooser, family: str, train: bool, max_ops: int = 8) -> Program:
    """The one generator behind both seeded ids and Hypothesis strategies."""
    ch = _Choose(chooser)
    batch, width = ch.pick((2, 3, 4)), ch.pick((4, 6, 8))
    if family == "dag":
        dtype = ("float32", "float32", "bfloat16", "float16")[ch.between(0, 3)]
        n_inputs = ch.between(1, 2)
        param_shapes = tuple(ch.pick(((width, width), (width,))) for _ in range(ch.between(1 if train else 0, 2)))
        vals = _Values([(batch, width)] * n_inputs + list(param_shapes))
        first = len(vals.shapes)
        for _ in range(ch.between(1, max_ops)):
            _gen_op(ch, vals, DAG_VOCAB, (batch, width))
        return Program(family, train, dtype, batch, width, n_inputs, param_shapes, tuple(vals.ops),
                       _sinks(len(vals.shapes), vals.ops, first))
    if family == "early":
        return _gen_early(ch)
    if family == "dyn":
        return _gen_dyn(ch, train, max_ops)
    if family != "loop":
        raise ValueError(f"unknown generated family {family!r}")
    carried = ch.between(1, 3)
    trips = ch.between(0, 4)
    param_shapes = ((width, width),) + (((width,),) if ch.flag(2) else ())
    body = _Values([(batch, width)] * carried + list(param_shapes) + [(batch, width)])
    for _ in range(ch.between(1, max_ops // 2)):
        _gen_op(ch, body, LOOP_VOCAB, (batch, width))
    outs = []
    for j in range(carried):  # new carry j = tanh(carry j + something that broadcasts to it)
        other = _Operands(ch, body.shapes, (batch, width)).arg(lambda s: _bcast(s, (batch, width)) == (batch, width))
        body.add(Op("blend", (j, other)), (batch, width))
        outs.append(len(body.shapes) - 1)
    return Program(family, train, "float32", batch, width, carried + 1, param_shapes, (), (),
                   carried=carried, trips=trips, body=tuple(body.ops), body_out=tuple(outs),
                   data_cond=ch.flag(2))


def _gen_early(ch: _Choose) -> Program:
    """A mutating two-output custom op whose first item is last used by an extern kernel (a matmul),
    then a larger buffer is made: an item (or its result tuple) kept past its last use raises the
    peak, as with pytorch/pytorch#163227, even under fusion (a matmul is never fused)."""
    batch, width = ch.pick((4, 8, 16)), ch.pick((32, 48, 64))
    vals = _Values([(batch, width)])
    for _ in range(ch.between(0, 2)):
        kind = ch.pick((*UNARY, "scale"))
        last = len(vals.shapes) - 1
        vals.add(Op(kind, (last,), (ch.between(0, len(SCALARS) - 1),) if kind == "scale" else ()), (batch, width))
    vals.add(Op("accum", (len(vals.shapes) - 1,)), *([(batch, width)] * 3))
    early, late = len(vals.shapes) - 3, len(vals.shapes) - 2
    vals.add(Op("transpose", (early,)), (width, batch))
    vals.add(Op("matmul", (early, len(vals.shapes) - 1)), (batch, batch))  # the early item's last use
    vals.add(Op("sum", (len(vals.shapes) - 1,), (1,)), (batch, 1))
    vals.add(Op("add", (late, len(vals.shapes) - 1)), (batch, width))  # needs the matmul: it comes after
    mixed = len(vals.shapes) - 1
    vals.add(Op("transpose", (mixed,)), (width, batch))
    vals.add(Op("matmul", (len(vals.shapes) - 1, mixed)), (width, width))  # the larger buffer
    for _ in range(ch.between(0, 2)):
        vals.add(Op(ch.pick(UNARY), (len(vals.shapes) - 1,)), (width, width))
    return Program("early", False, "float32", batch, width, 1, (), tuple(vals.ops),
                   _sinks(len(vals.shapes), vals.ops, 1))


#: Kinds a ``dyn`` program draws from: the dag vocabulary without ``expand``, whose sizes are literals.
DYN_VOCAB = tuple(name for name in DAG_VOCAB if name != "expand")
#: A ``dyn`` program's batch grows by this much per call, five sizes, then cycles.
DYN_STEP, DYN_SIZES = 3, 5


def _gen_dyn(ch: _Choose, train: bool, max_ops: int) -> Program:
    """A dag program whose batch (dim 0 of every input) changes on every call: 3 or 5 at call 0,
    then 3 more per call.  Drawn again until it runs at every batch of its schedule (an op that
    matched the batch to another size by value at call 0 would not: that draw is discarded)."""
    for _ in range(32):
        batch, width = ch.pick((3, 5)), ch.pick((4, 6, 8))
        n_inputs = ch.between(1, 2)
        param_shapes = tuple(ch.pick(((width, width), (width,))) for _ in range(ch.between(1 if train else 0, 2)))
        vals = _Values([(batch, width)] * n_inputs + list(param_shapes))
        first = len(vals.shapes)
        for _ in range(ch.between(1, max_ops)):
            _gen_op(ch, vals, DYN_VOCAB, (batch, width))
        program = Program("dyn", train, "float32", batch, width, n_inputs, param_shapes, tuple(vals.ops),
                          _sinks(len(vals.shapes), vals.ops, first),
                          batches=tuple(batch + DYN_STEP * k for k in range(DYN_SIZES)))
        if _runs_at_every_batch(program):
            return program
    raise ValueError("no dyn program runs at every batch of its schedule in 32 draws")


def _runs_at_every_batch(program: Program) -> bool:
    """Does the program run at each batch of its schedule?  Run on the CPU without autograd, its custom ops
    as the plain functions they wrap: the programs are tiny, and both the meta device's reference kernels
    and a custom op's first call import ``torch._dynamo`` (0.7 s in every process that registers the
    cases); the draws are the same as on the meta device (checked on 800 seeds of each kind)."""
    source = program_source(program).replace("torch.ops.conformance_gen.", "_plain_ops.")
    ns = load_source("from conformance.cases.gen_ops import plain as _plain_ops\n" + source, "<dyn check>")
    with torch.no_grad():
        model = ns["make_model"]()
        for batch in program.batches:
            try:
                model(*ns["make_inputs"](batch))
            except (RuntimeError, IndexError, ValueError):
                return False
    return True


@st.composite
def programs(draw: Callable[[st.SearchStrategy[Any]], Any], family: str = "dag", train: bool = False) -> Program:
    """Hypothesis strategy of programs of one family and kind (shrinks towards fewer, simpler ops)."""
    return gen_program(DrawChooser(draw), family, train)


def workloads(family: str = "dag", train: bool = False) -> st.SearchStrategy[Workload]:
    """Composable strategy of built workloads (seeded with ``torch.manual_seed(0)``)."""
    return programs(family, train).map(lambda p: build_workload(p, 0))


def program_for_seed(family: str, train: bool, seed: int) -> tuple[Program, list[int]]:
    """The program a case id names, and the choice sequence that draws it."""
    chooser = RandomChooser(seed)
    return gen_program(chooser, family, train), chooser.choices


# -- source ---------------------------------------------------------------------------------

def _emit_ops(ops: Sequence[Op], names: list[str], prefix: str, train: bool) -> list[str]:
    lines: list[str] = []
    for op in ops:
        kind = op_kind(op.kind)
        outs = [f"{prefix}{len(names) + i}" for i in range(kind.arity)]
        lines.extend(kind.emit(op, [names[i] for i in op.args], outs, train))
        names.extend(outs)
    return lines


def _shape_src(shape: Shape) -> str:
    return ", ".join(map(str, shape))


def program_source(program: Program) -> str:
    """The program as a self-contained module defining ``Generated``, ``make_model()`` and ``make_inputs()``.

    Needs ``torch`` (and the ``conformance_gen`` custom ops registered when it uses them).
    """
    p = program
    n = p.width
    lines = [
        "import torch",
        *(["from torch._higher_order_ops.while_loop import while_loop"] if p.family == "loop" else []),
        "",
        f"DTYPE = torch.{p.dtype}",
        "",
        "",
        "class Generated(torch.nn.Module):",
        "    def __init__(self) -> None:",
        "        super().__init__()",
    ]
    for i, shape in enumerate(p.param_shapes):
        scale = f" / {n} ** 0.5" if len(shape) == 2 else " * 0.1"
        lines.append(f"        self.p{i} = torch.nn.Parameter(torch.randn({_shape_src(shape)}){scale})")
    lines.append("")
    inputs = [f"x{i}" for i in range(p.n_inputs)]
    params = [f"self.p{i}" for i in range(len(p.param_shapes))]
    if p.family in ("dag", "early", "dyn"):
        lines.append(f"    def forward(self, {', '.join(inputs)}):")
        names = inputs + params
        lines.extend("        " + s for s in _emit_ops(p.ops, names, "v", p.train))
        results = [names[i] for i in p.outputs]
    else:
        carried = [f"c{j}" for j in range(p.carried)]
        lines.append(f"    def forward(self, {', '.join(inputs)}, steps):")
        cond = "i < steps"
        if p.data_cond:
            cond = f"(i < steps) & ({carried[0]}.abs().amax() < 1e4)"
        lines += [
            f"        def cond(i, {', '.join(carried)}):",
            f"            return {cond}",
            "",
            f"        def body(i, {', '.join(carried)}):",
        ]
        names = carried + params + [inputs[-1]]
        lines.extend("            " + s for s in _emit_ops(p.body, names, "b", p.train))
        lines.append(f"            return i + 1, {', '.join(names[i] for i in p.body_out)}")
        init = ", ".join(inputs[: p.carried])
        lines.append(f"        _, *out = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), {init}))")
        results = [f"out[{j}]" for j in range(p.carried)]
    if p.train:
        terms = [f"{r}.square().mean()" for r in results] + [f"{q}.square().mean()" for q in params]
        lines.append(f"        return {' + '.join(terms)}")
    else:
        lines.append(f"        return ({', '.join(results)},)")
    make_inputs = f"def make_inputs(batch={p.batch}):" if p.batches else "def make_inputs():"
    lines += ["", "", "def make_model():", "    return Generated().to(DTYPE)", "", "", make_inputs]
    shape_src = _shape_src((p.batch, n)) if not p.batches else f"batch, {n}"
    args = [f"torch.randn({shape_src}).to(DTYPE)" for _ in inputs]
    if p.family == "loop":
        args.append(f"torch.tensor({p.trips})")
    lines.append(f"    return ({', '.join(args)},)")
    return "\n".join(lines) + "\n"


def load_source(source: str, filename: str) -> dict[str, Any]:
    """Import generated source as a real module (Dynamo resolves a function's globals by module name)."""
    import conformance.cases.gen_ops  # noqa: F401  (registers the custom ops)

    name = "conformance_generated_" + hashlib.sha1(source.encode()).hexdigest()[:16]
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        module.__file__ = filename
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), module.__dict__)
        sys.modules[name] = module
    return module.__dict__


def build_workload(program: Program, seed: int, name: str = "<generated>") -> Workload:
    torch.manual_seed(seed)
    ns = load_source(program_source(program), name)
    model = ns["make_model"]()
    return Workload(model, ns["make_inputs"]())


# -- cases and ids --------------------------------------------------------------------------

ID_RE = re.compile(r"^gen-(dag|loop|early|dyn)-(\d+)(-train)?$")


def case_id(family: str, seed: int, train: bool) -> str:
    return f"gen-{family}-{seed}{'-train' if train else ''}"


def case_from_program(program: Program, case_id_: str, seed: int, description: str = "") -> Case:
    """A case running ``program`` (also used for shrunk programs that have no seed of their own)."""
    requires = set()
    if program.train:
        requires.add("training")
    if program.family == "loop":
        requires.add("while_loop")
    if program.uses_custom_ops:
        requires.add("custom_ops")
    kind: CaseKind = "loop" if program.family == "loop" else ("train_step" if program.train else "inference")
    n_ops = len(program.ops) + len(program.body)
    ops = sorted({op.kind for op in (*program.ops, *program.body)})
    desc = description or (
        f"generated {program.family}, {n_ops} ops ({', '.join(ops)}), {program.dtype}"
        + (f", {program.carried} carried, {program.trips} trips" if program.family == "loop" else "")
    )
    if program.batches:
        requires.add("dynamic_shapes")
        desc = description or f"{desc}, batch {'/'.join(map(str, program.batches))} call by call"
    schedule = ShapeSchedule("batch", program.batches, tuple((i, 0) for i in range(program.n_inputs))) \
        if program.batches else None

    def make_inputs(call: int) -> tuple[torch.Tensor, ...]:
        inputs = load_source(program_source(program), f"<{case_id_}>")["make_inputs"]
        return inputs(schedule.size(call)) if schedule is not None else inputs()

    case = Case(case_id_, kind, f"gen-{program.family}", seed,
                lambda s: build_workload(program, s, f"<{case_id_}>"),
                trains=program.train, requires=frozenset(requires),
                # a generated program's result is an arbitrary function, not a loss: stepping an optimizer
                # on it diverges within a few calls (gen-dag-8376-train's loss grows 1e4-fold by call 4)
                optimizer="none" if program.train else None,
                tolerance=TOLERANCES[program.dtype], description=desc,
                make_inputs=make_inputs, program=program, shapes=schedule)
    return case


def case_from_id(id_: str) -> Case | None:
    """Rebuild a generated case from its id (``gen-dag-1234``, ``gen-loop-7-train``); None if not one."""
    m = ID_RE.match(id_)
    if m is None:
        return None
    family, seed, train = m.group(1), int(m.group(2)), m.group(3) is not None
    program, _ = program_for_seed(family, train, seed)
    return case_from_program(program, id_, seed)


def choices_of(case: Case) -> list[int] | None:
    """The choice sequence that draws a seeded generated case's program."""
    m = ID_RE.match(case.id)
    if m is None:
        return None
    return program_for_seed(m.group(1), m.group(3) is not None, int(m.group(2)))[1]


#: The families of a default run, in order (cycled).
DEFAULT_MIX = (("dag", False), ("dag", True), ("loop", False), ("dag", False), ("dag", True), ("loop", True))


def generated_cases(count: int = 12, hypothesis_seed: int = 0) -> list[Case]:
    """A fixed, reproducible set: ``count`` cases whose seeds follow from ``hypothesis_seed``."""
    rng = random.Random(hypothesis_seed)
    cases = []
    for i in range(count):
        family, train = DEFAULT_MIX[i % len(DEFAULT_MIX)]
        cases.append(case_from_id(case_id(family, rng.randrange(10_000), train)))
    return [c for c in cases if c is not None]


DEFAULT_COUNT = 12
DEFAULT_SEED = 0
#: Seeded ``early`` programs in a default run, besides the mixed set (their own draw, so the mixed ids stay).
DEFAULT_EARLY = 3


def early_cases(count: int = DEFAULT_EARLY, hypothesis_seed: int = DEFAULT_SEED) -> list[Case]:
    rng = random.Random(f"early-{hypothesis_seed}")
    cases = [case_from_id(case_id("early", rng.randrange(10_000), False)) for _ in range(count)]
    return [c for c in cases if c is not None]


#: Seeded ``dyn`` programs (a batch that changes on every call) in a default run, drawn on their own too.
DEFAULT_DYN = 2


def dyn_cases(count: int = DEFAULT_DYN, hypothesis_seed: int = DEFAULT_SEED) -> list[Case]:
    rng = random.Random(f"dyn-{hypothesis_seed}")
    cases = [case_from_id(case_id("dyn", rng.randrange(10_000), i % 2 == 1)) for i in range(count)]
    return [c for c in cases if c is not None]


def register_generated(count: int = DEFAULT_COUNT, hypothesis_seed: int = DEFAULT_SEED) -> list[Case]:
    """Register a generated set (for ``--generated N --hypothesis-seed S``); ids already known are kept."""
    from conformance.api.case import _REGISTRY

    cases = (generated_cases(count, hypothesis_seed) + early_cases(DEFAULT_EARLY, hypothesis_seed)
             + dyn_cases(DEFAULT_DYN, hypothesis_seed))
    for case in cases:
        if case.id not in _REGISTRY:
            register(case)
    return cases


add_resolver(case_from_id, ids=ID_RE.pattern)
register_generated(DEFAULT_COUNT, DEFAULT_SEED)
