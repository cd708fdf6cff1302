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
database they let Hypothesis shrink exactly that program (:mod:`conformance.repro`).
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

from conformance.case import Case, CaseKind, Tolerance, Workload, add_resolver, register

FAMILIES = ("dag", "loop", "early")
DTYPES = ("float32", "bfloat16", "float16")
#: Per-dtype parity tolerance: about 4 ulps of the dtype at 1.0 for these shallow
#: graphs (float32 keeps the harness default).
TOLERANCES = {
    "float32": Tolerance(),
    "bfloat16": Tolerance(rtol=3e-2, atol=3e-2),
    "float16": Tolerance(rtol=4e-3, atol=4e-3),
}
SCALARS = (2.0, 0.5, -1.5)
#: Op vocabulary, simplest first (Hypothesis shrinks choices towards 0).
UNARY = ("relu", "tanh", "sigmoid", "neg")
DAG_VOCAB = (
    *UNARY, "scale", "add", "mul", "sub", "matmul", "sum", "mean", "amax", "sum_all",
    "transpose", "reshape", "slice", "expand", "cat", "split", "chunk",
    "add_inplace", "relu_inplace", "slice_inplace", "twin", "accum",
)
LOOP_VOCAB = (
    *UNARY, "scale", "add", "mul", "sub", "matmul", "sum", "mean", "amax", "sum_all",
    "transpose", "reshape", "slice", "expand", "cat", "split", "chunk",
)
CUSTOM_OPS = ("twin", "accum")
#: Values each op produces (default 1).
ARITY = {"split": 2, "chunk": 2, "twin": 2, "accum": 3}

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

    @property
    def uses_custom_ops(self) -> bool:
        return any(op.kind in CUSTOM_OPS for op in (*self.ops, *self.body))

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


# -- generation ---------------------------------------------------------------------------

def _bcast(a: Shape, b: Shape) -> Shape | None:
    try:
        return tuple(torch.broadcast_shapes(a, b))
    except RuntimeError:
        return None


@dataclass
class _Values:
    shapes: list[Shape]
    ops: list[Op] = field(default_factory=list)

    def add(self, op: Op, *shapes: Shape) -> None:
        self.ops.append(op)
        self.shapes.extend(shapes)


class _NoOperand(Exception):
    """No value has a shape the drawn op can take."""


def _gen_op(ch: _Choose, vals: _Values, vocab: Sequence[str], dims: tuple[int, int]) -> None:
    """Append one op of a kind from ``vocab``; falls back to ``relu`` when no operand fits."""
    try:
        _gen_kind(ch, vals, ch.pick(vocab), dims)
    except _NoOperand:
        a = len(vals.shapes) - 1 - ch.between(0, len(vals.shapes) - 1)
        vals.add(Op("relu", (a,)), vals.shapes[a])


def _gen_kind(ch: _Choose, vals: _Values, kind: str, dims: tuple[int, int]) -> None:
    shapes = vals.shapes

    def arg(pred: Callable[[Shape], bool] = lambda s: True) -> int:
        cands = [i for i, s in enumerate(shapes) if pred(s)]
        if not cands:
            raise _NoOperand
        # Index 0 is the most recent value; larger indices reach far back (fan-out).
        return cands[len(cands) - 1 - ch.between(0, len(cands) - 1)]

    two_d = lambda s: len(s) == 2  # noqa: E731
    if kind in UNARY:
        a = arg()
        vals.add(Op(kind, (a,)), shapes[a])
        return
    if kind == "scale":
        a = arg()
        vals.add(Op(kind, (a,), (ch.between(0, len(SCALARS) - 1),)), shapes[a])
        return
    if kind in ("add", "mul", "sub", "add_inplace", "relu_inplace", "slice_inplace"):
        a = arg()
        assert a is not None
        b = arg(lambda s: _bcast(shapes[a], s) is not None)
        assert b is not None  # a itself always fits
        joined = _bcast(shapes[a], shapes[b])
        assert joined is not None
        if kind == "slice_inplace":
            if len(joined) != 2:
                kind = "add_inplace"
            else:
                vals.add(Op(kind, (a, b), (ch.between(1, joined[1]),)), joined)
                return
        vals.add(Op(kind, (a, b)), joined)
        return
    if kind == "matmul":
        a = arg(lambda s: two_d(s) and any(len(t) == 2 and t[0] == s[1] for t in shapes))
        if a is not None:
            b = arg(lambda s: two_d(s) and s[0] == shapes[a][1])
            assert b is not None
            vals.add(Op(kind, (a, b)), (shapes[a][0], shapes[b][1]))
            return
    elif kind in ("sum", "mean", "amax"):
        a = arg(lambda s: len(s) >= 1)
        if a is not None:
            dim = ch.between(0, len(shapes[a]) - 1)
            out = list(shapes[a])
            out[dim] = 1
            vals.add(Op(kind, (a,), (dim,)), tuple(out))
            return
    elif kind == "sum_all":
        a = arg(lambda s: len(s) >= 1)
        if a is not None:
            vals.add(Op(kind, (a,)), ())
            return
    elif kind in ("transpose", "reshape"):
        a = arg(two_d)
        if a is not None:
            vals.add(Op(kind, (a,)), (shapes[a][1], shapes[a][0]))
            return
    elif kind == "slice":
        a = arg(lambda s: two_d(s) and max(s) >= 2)
        if a is not None:
            s = shapes[a]
            dim = ch.pick([d for d in (0, 1) if s[d] >= 2])
            start = ch.between(0, s[dim] - 1)
            length = ch.between(1, s[dim] - start)
            out = list(s)
            out[dim] = length
            vals.add(Op(kind, (a,), (dim, start, length)), tuple(out))
            return
    elif kind == "expand":
        a = arg(lambda s: len(s) == 0 or (two_d(s) and 1 in s))
        if a is not None:
            s = shapes[a]
            grown = tuple(dims) if not s else tuple(dims[d] if s[d] == 1 else s[d] for d in (0, 1))
            vals.add(Op(kind, (a,), grown), grown)
            return
    elif kind == "cat":
        a = arg(two_d)
        if a is not None:
            dim = ch.between(0, 1)
            b = arg(lambda s: two_d(s) and s[1 - dim] == shapes[a][1 - dim])
            assert b is not None
            out = list(shapes[a])
            out[dim] += shapes[b][dim]
            vals.add(Op(kind, (a, b), (dim,)), tuple(out))
            return
    elif kind in ("split", "chunk"):
        a = arg(lambda s: two_d(s) and max(s) >= 2)
        if a is not None:
            s = shapes[a]
            dim = ch.pick([d for d in (0, 1) if s[d] >= 2])
            first = ch.between(1, s[dim] - 1) if kind == "split" else (s[dim] + 1) // 2
            o1, o2 = list(s), list(s)
            o1[dim], o2[dim] = first, s[dim] - first
            vals.add(Op(kind, (a,), (dim, first)), tuple(o1), tuple(o2))
            return
    elif kind in ("twin", "accum"):
        a = arg()
        assert a is not None
        s = shapes[a]
        vals.add(Op(kind, (a,)), *([s] * ARITY[kind]))
        return
    raise _NoOperand


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
        cands = [i for i, s in enumerate(body.shapes) if _bcast(s, (batch, width)) == (batch, width)]
        other = cands[len(cands) - 1 - ch.between(0, len(cands) - 1)]
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

def _emit(op: Op, a: list[str], outs: list[str], train: bool) -> list[str]:
    """Plain torch for one op record."""
    o = outs[0]
    k = op.kind
    if k in UNARY:
        return [f"{o} = torch.{k}({a[0]})"]
    if k == "scale":
        return [f"{o} = {a[0]} * {SCALARS[op.attrs[0]]}"]
    if k in ("add", "mul", "sub"):
        return [f"{o} = {a[0]} {dict(add='+', mul='*', sub='-')[k]} {a[1]}"]
    if k == "matmul":
        return [f"{o} = {a[0]} @ {a[1]}"]
    if k in ("sum", "mean", "amax"):
        return [f"{o} = {a[0]}.{k}({op.attrs[0]}, keepdim=True)"]
    if k == "sum_all":
        return [f"{o} = {a[0]}.sum()"]
    if k == "transpose":
        return [f"{o} = {a[0]}.t()"]
    if k == "reshape":
        return [f"{o} = {a[0]}.reshape({a[0]}.shape[1], {a[0]}.shape[0])"]
    if k == "slice":
        return [f"{o} = {a[0]}.narrow({op.attrs[0]}, {op.attrs[1]}, {op.attrs[2]})"]
    if k == "expand":
        return [f"{o} = {a[0]}.expand({op.attrs[0]}, {op.attrs[1]})"]
    if k == "cat":
        return [f"{o} = torch.cat([{a[0]}, {a[1]}], {op.attrs[0]})"]
    if k == "split":
        dim, first = op.attrs
        return [f"{outs[0]}, {outs[1]} = torch.split({a[0]}, [{first}, {a[0]}.shape[{dim}] - {first}], {dim})"]
    if k == "chunk":
        return [f"{outs[0]}, {outs[1]} = torch.chunk({a[0]}, 2, {op.attrs[0]})"]
    if k == "add_inplace":
        return [f"{o} = {a[0]} + {a[1]}", f"{o}.mul_(0.5)"]
    if k == "relu_inplace":
        return [f"{o} = {a[0]} + {a[1]}", f"{o}.relu_()"]
    if k == "slice_inplace":
        return [f"{o} = {a[0]} + {a[1]}", f"{o}[:, :{op.attrs[0]}].mul_(2.0)"]
    if k == "twin":
        return [f"{outs[0]}, {outs[1]} = torch.ops.conformance_gen.twin({a[0]})"]
    if k == "accum":
        x = f"{a[0]}.detach()" if train else a[0]  # a mutating custom op has no autograd formula
        return [f"{outs[2]} = torch.zeros_like({a[0]})",
                f"{outs[0]}, {outs[1]} = torch.ops.conformance_gen.accum({x}, {outs[2]})"]
    if k == "blend":
        return [f"{o} = torch.tanh({a[0]} + {a[1]})"]
    raise ValueError(f"unknown op kind {k!r}")


def _emit_ops(ops: Sequence[Op], names: list[str], prefix: str, train: bool) -> list[str]:
    lines: list[str] = []
    for op in ops:
        outs = [f"{prefix}{len(names) + i}" for i in range(ARITY.get(op.kind, 1))]
        lines.extend(_emit(op, [names[i] for i in op.args], outs, train))
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
    if p.family in ("dag", "early"):
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
    lines += ["", "", "def make_model():", "    return Generated().to(DTYPE)", "", "", "def make_inputs():"]
    shape_src = _shape_src((p.batch, n))
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

ID_RE = re.compile(r"^gen-(dag|loop|early)-(\d+)(-train)?$")


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
    case = Case(case_id_, kind, f"gen-{program.family}", seed,
                lambda s: build_workload(program, s, f"<{case_id_}>"),
                trains=program.train, requires=frozenset(requires),
                tolerance=TOLERANCES[program.dtype], description=desc,
                make_inputs=lambda call: load_source(program_source(program), f"<{case_id_}>")["make_inputs"](),
                program=program)
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


def register_generated(count: int = DEFAULT_COUNT, hypothesis_seed: int = DEFAULT_SEED) -> list[Case]:
    """Register a generated set (for ``--generated N --hypothesis-seed S``); ids already known are kept."""
    from conformance.case import _REGISTRY

    cases = generated_cases(count, hypothesis_seed) + early_cases(DEFAULT_EARLY, hypothesis_seed)
    for case in cases:
        if case.id not in _REGISTRY:
            register(case)
    return cases


add_resolver(case_from_id)
register_generated(DEFAULT_COUNT, DEFAULT_SEED)
