"""The generated program as the mechanisms read it: inductor's wrapper statements, in the order the program
model ran them (``memory.program_timeline``).

The patterns here read the generated program's own text (inductor's wrapper code: ``empty_strided_cpu``,
``assert_size_stride``, a kernel's call), never a sentence the harness wrote; each is tested on real wrapper
lines (``tests/test_mechanism_registry.py``).  The program model's event label around a statement
(``fw:line 163 [trip 0] ...``) is read by :func:`conformance.checks.facts.parse_event`, its one grammar.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from conformance.checks.facts import parse_event

ALLOC = re.compile(r"^(\w+) = empty_strided_\w+\(\(([^()]*)\), \(([^()]*)\)(?:, torch\.(\w+))?")
_ASSERT = re.compile(r"^assert_size_stride\((\w+), \(([^()]*)\), \(([^()]*)\)")
GRAPH_INPUT = re.compile(r"^(?:arg\d+_\d+|primals_\d+)$")  # a graph input's name in inductor's wrapper
_CALL = re.compile(r"^(?:[\w\[\], ()]+ = )?([\w.]+)\((.*)$")
#: a call the program model cut short inside its callee's name (a long fused kernel's: ``cpp_fused_…_view…``)
_CUT_CALL = re.compile(r"^(?:[\w\[\], ()]+ = )?([\w.]+)\u2026$")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_NOT_WORK = ("empty_strided", "reinterpret_tensor", "assert_size_stride", "assert_alignment", "args.clear")
#: ``buf1[0] = buf0``: a name stored as a list item (the host loop's carry list taking an initial carry)
_LIST_ITEM = re.compile(r"^\w+\[\d+\] = \w+$")
#: ``primals_2, mul, avg_pool2d, tangents_1 = args``, also as the program model shortens it (``= ar…``)
UNPACK = re.compile(r"^\w+(?:, \w+)*,? = (?:args|ar?g?…)$")
#: the same unpack cut short before its ``= args`` (a backward with many saved tensors)
CUT_UNPACK = re.compile(r"^\w+(?:, \w+)+, \w*…$")
#: bytes per element of the dtypes a program or a blamed entry names (``float32`` or ``torch.float32``)
ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "int16": 2,
            "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


def _ints(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:  # a symbolic size (``s75``): not comparable here
        return None


def channels_last(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Dense strides with the channel dimension (1) innermost, as convolution layouts have them (NHWC
    of an NCHW shape); a column-major matrix or a strided view is not one."""
    if len(shape) != len(strides) or len(shape) < 3 or shape[1] == 1 or strides[1] != 1:
        return False
    dims = [(st, sz) for sz, st in zip(shape, strides) if sz != 1]
    if [st for st, _ in dims] == sorted((st for st, _ in dims), reverse=True):
        return False  # row-major order (size-1 dimensions carry no order)
    expected = 1
    for st, sz in sorted(dims):
        if st != expected:
            return False  # not dense: a view, not a layout
        expected *= sz
    return True


@dataclass(frozen=True)
class Statement:
    phase: str  # ``fw``, ``bw`` (``""`` for a program modelled alone)
    text: str  # the statement as the program model labelled it (long ones end in ``…``)
    host_loop: bool  # inside a host ``while`` loop (a trip) or a while_loop subgraph
    #: the bytes the program holds once the statement has run (``None``: the timeline gave no figure)
    live: int | None = None

    @property
    def work(self) -> bool:
        """A statement that computes: a kernel, extern kernel or fallback op call."""
        m = _CALL.match(self.text) or _CUT_CALL.match(self.text)
        return bool(m) and not any(self.text.startswith(w) or f"= {w}" in self.text for w in _NOT_WORK) \
            and not self.text.startswith(("del ", "return"))

    def names(self) -> list[str]:
        return _NAME.findall(self.text)

    def calls(self, callee: str) -> bool:
        """Whether this statement is a call of ``callee``, also where the model cut it short in the name."""
        if (m := _CALL.match(self.text)) is not None:
            return m.group(1) == callee
        return (m := _CUT_CALL.match(self.text)) is not None and callee.startswith(m.group(1))


@dataclass(frozen=True)
class Program:
    """The generated program's statements, in the order the program model ran them."""

    statements: tuple[Statement, ...] = ()

    @classmethod
    def from_events(cls, events: Sequence[str | tuple[str, int | None]]) -> Program:
        """The statements of event labels, or of ``(label, live bytes)`` pairs (``memory.program_timeline``)."""
        out: list[Statement] = []
        for item in events:
            event, live = (str(item[0]), item[1]) if isinstance(item, tuple) else (str(item), None)
            parsed = parse_event(event)
            if parsed is None:
                continue
            out.append(Statement(parsed.phase, parsed.statement, parsed.in_loop,
                                 live if isinstance(live, int) and not isinstance(live, bool) else None))
        return cls(tuple(out))

    def peak_statement(self) -> int | None:
        """The index of the first statement at which the program holds its most bytes (``None``: no figures)."""
        held = [(s.live, i) for i, s in enumerate(self.statements) if s.live is not None]
        if not held:
            return None
        top = max(b for b, _ in held)
        return next(i for b, i in held if b == top)

    @cached_property
    def has_host_loop(self) -> bool:
        return any(s.host_loop or s.text.startswith("should_loop") for s in self.statements)

    def initial_carry(self, phase: str, name: str) -> bool:
        """Whether ``name`` is put in a list before any host loop statement (``buf1[0] = buf0``): the
        wrapper's carry list taking a loop's initial carry, which the name itself keeps alive."""
        for s in self.statements:
            if s.host_loop or s.text.startswith("should_loop"):
                return False
            if s.phase == phase and _LIST_ITEM.match(s.text) and s.text.rsplit(" = ", 1)[1] == name:
                return True
        return False

    def after_host_loop(self, text: str) -> bool:
        """Whether the statement ``text`` runs after the last statement of a host loop."""
        loop = [i for i, s in enumerate(self.statements) if s.host_loop or s.text.startswith("should_loop")]
        at = [i for i, s in enumerate(self.statements) if s.text == text]
        return bool(loop) and bool(at) and at[-1] > loop[-1]

    def layout(self, phase: str, name: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """A buffer's shape and strides, from its allocation or the assert that follows an extern kernel;
        an item of an extern kernel's result tuple (``buf2[1]``) by the name that takes it (``buf3 = buf2[1]``)."""
        for s in self.statements:
            if s.phase != phase:
                continue
            m = ALLOC.match(s.text) or _ASSERT.match(s.text)
            if m and m.group(1) == name:
                shape, strides = _ints(m.group(2)), _ints(m.group(3))
                if shape is not None and strides is not None:
                    return shape, strides
        if "[" in name:
            for s in self.statements:
                taken = re.match(rf"^(\w+) = {re.escape(name)}$", s.text)
                if s.phase == phase and taken:
                    return self.layout(phase, taken.group(1))
        return None

    def allocated_bytes(self, phase: str, name: str) -> int:
        """The bytes the program allocates for ``name`` (its ``empty_strided`` call's extent; 0 when not one)."""
        for s in self.statements:
            m = ALLOC.match(s.text)
            if s.phase == phase and m and m.group(1) == name:
                shape, strides = _ints(m.group(2)), _ints(m.group(3))
                if shape is None or strides is None:
                    return 0
                extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides)) if all(shape) else 0
                return extent * ITEMSIZE.get(m.group(4) or "float32", 4)
        return 0

    def layouts(self, phase: str) -> list[tuple[str, tuple[int, ...], tuple[int, ...], str | None]]:
        """(name, shape, strides, dtype) of each buffer ``phase`` allocates or asserts (an extern kernel's result), its
        first statement only (graph inputs too; ``dtype`` ``None`` where an assert does not say), static sizes only."""
        found: dict[str, tuple[str, tuple[int, ...], tuple[int, ...], str | None]] = {}
        for s in self.statements:
            m = ALLOC.match(s.text) or _ASSERT.match(s.text)
            if s.phase != phase or m is None or m.group(1) in found:
                continue
            shape, strides = _ints(m.group(2)), _ints(m.group(3))
            if shape is not None and strides is not None:
                dtype = (m.group(4) or "float32") if m.re is ALLOC else None
                found[m.group(1)] = (m.group(1), shape, strides, dtype)
        return list(found.values())

    def channels_last_buffers(self, phase: str) -> set[str]:
        found = set()
        for s in self.statements:
            m = ALLOC.match(s.text) or _ASSERT.match(s.text)
            if s.phase == phase and m:
                shape, strides = _ints(m.group(2)), _ints(m.group(3))
                if shape is not None and strides is not None and channels_last(shape, strides):
                    found.add(m.group(1))
        return found

    def writers(self, phase: str, name: str) -> list[int]:
        """Indexes of the work statements of ``phase`` that name ``name`` (its writer among them)."""
        return [i for i, s in enumerate(self.statements)
                if s.phase == phase and s.work and name in s.names()[1:]]

    def writer_before(self, phase: str, name: str, i: int) -> int | None:
        """The work statement before statement ``i`` that wrote ``name``: the last one naming it, else (its
        arguments cut short by the program model) the first call after its allocation whose text was cut."""
        named = [j for j in self.writers(phase, name) if j < i]
        if named:
            return named[-1]
        allocated = next((j for j, s in enumerate(self.statements[:i]) if s.phase == phase
                          and (m := ALLOC.match(s.text)) is not None and m.group(1) == name), None)
        if allocated is None:
            return None
        return next((j for j in range(allocated + 1, i) if self.statements[j].phase == phase
                     and self.statements[j].work and self.statements[j].text.endswith("\u2026")), None)

    def renames(self, phase: str, name: str, before: int) -> set[str]:
        """The names the wrapper gives ``name``'s buffer before statement ``before`` (``buf5 = buf3; del buf3``:
        inductor's reuse of a buffer under the name of the value it will hold), followed to the last."""
        found: set[str] = set()
        current = {name}
        for s in self.statements[:before]:
            m = re.match(r"^(\w+) = (\w+)(?:; del \2)?$", s.text)
            if s.phase == phase and m and m.group(2) in current:
                found.add(m.group(1))
                current.add(m.group(1))
        return found

    def backward_name(self, name: str) -> str | None:
        """The name the backward gives a forward buffer it receives as saved (AOTAutograd's convention: the
        forward returns its outputs then what it saves, the backward unpacks the saved values then the
        tangents), following an extern result's item (``buf3 = buf1[1]``); ``None``: not saved, or cut short."""
        taken = {name} | {m.group(1) for s in self.statements if s.phase == "fw"
                          and (m := re.match(rf"^(\w+) = {re.escape(name)}$", s.text))}
        returned = next((s.text for s in reversed(self.statements)
                         if s.phase == "fw" and s.text.startswith("return (")), "")
        unpacked = next((s.text for s in self.statements if s.phase == "bw" and UNPACK.match(s.text)), "")
        if not returned.endswith(")") or not unpacked.endswith("= args"):
            return None
        outs = [x.strip() for x in returned[len("return ("):-1].split(",") if x.strip()]
        saved_in = [n.strip() for n in unpacked.removesuffix("= args").split(",")
                    if n.strip() and not re.fullmatch(r"tangents_\d+", n.strip())]
        if len(saved_in) > len(outs):
            return None
        saved_out = outs[len(outs) - len(saved_in):]
        return next((saved_in[i] for i, n in enumerate(saved_out) if n in taken), None)

    def alive_between(self, phase: str, name: str, start: int, end: int) -> bool:
        """Whether ``name``'s buffer is still held at statement ``end`` by some name (its own, one the wrapper
        renamed it to, or a view of it) after statement ``start``: no ``del`` dropped the last of them."""
        held = {name}
        for s in self.statements[start:end]:
            if s.phase != phase:
                continue
            for part in s.text.split("; "):
                if (m := re.match(r"^(\w+) = (?:reinterpret_tensor\()?(\w+)\b", part)) and m.group(2) in held:
                    held.add(m.group(1))
                elif part.startswith("del "):
                    held -= {n.strip() for n in part[4:].split(",")}
        return bool(held)

    def allocated_before(self, i: int) -> list[str]:
        """The buffers allocated since the work statement before statement ``i`` (allocated together)."""
        names = []
        for s in reversed(self.statements[:i]):
            if s.phase != self.statements[i].phase or s.work:
                break
            m = ALLOC.match(s.text)
            if m:
                names.append(m.group(1))
        return names


# --------------------------------------------------------------------------- the evidence
