"""Mechanisms: what a backend does that makes a failure, recognised from the evidence.

A cause signature (:mod:`conformance.checks.cause`) names mechanisms, never kernel names, op
lists or sizes, so a known behaviour on a program nobody here wrote (a user's own ``Conv2d``)
is the same cause as on the case that first showed it, and a manifest entry can expect it on
every case (``mechanism = "layout-copy"``).

Each recogniser is a small pure function of one finding's :class:`Evidence`: the generated
program (the wrapper's statements as the program model ran them: ``memory.program_timeline``),
the graphs (the model's events), the blamed buffer or program finding (its producing statement,
what held it), or an error's text.  It returns why the finding is its mechanism, or ``None``.
:func:`recognise` asks them in order; the first that answers names the mechanism.  Evidence no
recogniser knows keeps its shape-free words (a new mechanism, with its repro).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from conformance.util.text import clip

# --------------------------------------------------------------------------- the generated program

#: ``fw:line 163 buf3 = ...``, ``fw:while_loop_body_graph_0#1:160 ...``, ``fw:line 210 [trip 0] ...``
_EVENT = re.compile(r"^(?:(\w+):)?(?:line \d+|[\w.]+#\d+:\d+)\s*(?:\[trip \d+\]\s*)?(.*)$")
_ALLOC = re.compile(r"^(\w+) = empty_strided_\w+\(\(([^()]*)\), \(([^()]*)\)(?:, torch\.(\w+))?")
_ASSERT = re.compile(r"^assert_size_stride\((\w+), \(([^()]*)\), \(([^()]*)\)")
_GRAPH_INPUT = re.compile(r"^(?:arg\d+_\d+|primals_\d+)$")  # a graph input's name in inductor's wrapper
_CALL = re.compile(r"^(?:[\w\[\], ()]+ = )?([\w.]+)\((.*)$")
#: a call the program model cut short inside its callee's name (a long fused kernel's: ``cpp_fused_…_view…``)
_CUT_CALL = re.compile(r"^(?:[\w\[\], ()]+ = )?([\w.]+)\u2026$")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_NOT_WORK = ("empty_strided", "reinterpret_tensor", "assert_size_stride", "assert_alignment", "args.clear")


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
            m = _EVENT.match(event)
            if m is None:
                continue
            loop = "[trip " in event or "while_loop_" in event.split(" ", 1)[0]
            out.append(Statement(m.group(1) or "", m.group(2).strip(), loop,
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
            m = _ALLOC.match(s.text) or _ASSERT.match(s.text)
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
            m = _ALLOC.match(s.text)
            if s.phase == phase and m and m.group(1) == name:
                shape, strides = _ints(m.group(2)), _ints(m.group(3))
                if shape is None or strides is None:
                    return 0
                extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides)) if all(shape) else 0
                return extent * _ITEMSIZE.get(m.group(4) or "float32", 4)
        return 0

    def input_numel(self, phase: str) -> int:
        """Elements of the graph inputs ``phase`` asserts (``arg0_1``, ``primals_1``), each counted once."""
        sizes: dict[str, int] = {}
        for s in self.statements:
            m = _ASSERT.match(s.text)
            if s.phase == phase and m and _GRAPH_INPUT.match(m.group(1)):
                shape = _ints(m.group(2))
                if shape is not None:
                    sizes[m.group(1)] = math.prod(shape)
        return sum(sizes.values())

    def channels_last_buffers(self, phase: str) -> set[str]:
        found = set()
        for s in self.statements:
            m = _ALLOC.match(s.text) or _ASSERT.match(s.text)
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
                          and (m := _ALLOC.match(s.text)) is not None and m.group(1) == name), None)
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
        unpacked = next((s.text for s in self.statements if s.phase == "bw" and _UNPACK.match(s.text)), "")
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
            m = _ALLOC.match(s.text)
            if m:
                names.append(m.group(1))
        return names


# --------------------------------------------------------------------------- the evidence


@dataclass(frozen=True)
class Evidence:
    """One finding of a failure, with what the record holds around it."""

    source: str  # the deciding check (``program``, ``peak``, ...) or the error status
    part: str  # the finding in shape-free words (conformance.checks.cause)
    finding: Mapping[str, Any] = field(default_factory=dict)  # the blamed entry behind it ({} when none)
    program: Program = Program()
    graph_events: tuple[str, ...] = ()  # the events of the model the pair is held to
    model_source: str = ""
    error: str = ""  # an error verdict's exception line and traceback
    figures: Mapping[str, Any] = field(default_factory=dict)  # the deciding check's figures
    #: what the backend reported of its own memory (``memory.findings``: the backward-input watch's verdict)
    runtime: Mapping[str, Any] = field(default_factory=dict)
    #: Dynamo's graph breaks in the step (the notes that start with :data:`GRAPH_BREAK_NOTE`)
    graph_breaks: tuple[str, ...] = ()
    #: the program check passed with the measured timeline following the program exactly: every byte the
    #: measurement holds, the program holds by its own schedule (no late release, nothing else allocated)
    program_exact: bool = False
    #: the bytes of every value the user-level model makes in the call, each counted once (0: not recorded)
    model_made_bytes: int = 0

    @property
    def buffer(self) -> tuple[str, str] | None:
        """The blamed buffer as (phase, name) in the generated program, when it is one of its."""
        producer = str(self.finding.get("producer") or "")
        made = re.match(r"^(\w+(?:\[\d+\])?) \(made at (?:(\w+):)?", producer)  # an extern kernel's item too
        if made:
            return made.group(2) or "", made.group(1)
        named = re.match(r"^(?:(\w+):)?(\w+)$", producer)
        if named and self.finding.get("finding"):
            return named.group(1) or "", named.group(2)
        return None

    def statement(self, key: str) -> str:
        """The statement text of one of the finding's event labels (``last_use``, ``freed_after``)."""
        m = _EVENT.match(str(self.finding.get(key) or ""))
        return m.group(2) if m else str(self.finding.get(key) or "")


Recogniser = Callable[[Evidence], "str | None"]

#: a result note that says Dynamo broke the step, followed by the break's reason (one note per reason)
GRAPH_BREAK_NOTE = "Dynamo broke the step into graphs and eager code: "


#: the model a split step is held to where its graphs' runs are known: the graphs Dynamo compiled, composed in the
#: order the call ran them with what crossed between them (:mod:`conformance.models.lifetime.split`)
SPLIT_SOURCE = "split-graphs"


def graph_breaks_of(notes: Sequence[str]) -> tuple[str, ...]:
    return tuple(n[len(GRAPH_BREAK_NOTE):] for n in notes if n.startswith(GRAPH_BREAK_NOTE))


def _squeezed(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape without its size-1 dimensions: an unbatched convolution's result is copied out squeezed."""
    return tuple(n for n in shape if n != 1)


def layout_copy(ev: Evidence) -> str | None:
    """A buffer in another layout than the graphs' (inductor's channels-last convolution inputs,
    weights and results), or the row-major copy of one made for the caller (of the same shape, up to size-1
    dimensions: an unbatched convolution's result is copied out without its batch of one)."""
    where = ev.buffer
    if where is None or ev.source != "peak":  # the program held exactly; a late release is not a layout
        return None
    phase, name = where
    layouts = ev.program.channels_last_buffers(phase)
    if name in layouts:
        return f"{name} is allocated channels-last (a layout the received graphs do not have)"
    mine = ev.program.layout(phase, name)
    if "[" in name and mine is not None and channels_last(*mine):
        return f"{name} is an extern kernel's result item, channels-last (a layout the received graphs do not have)"
    for i in ev.program.writers(phase, name):
        read = [n for n in ev.program.statements[i].names()[1:] if n in layouts and n != name]
        for src in read:
            theirs = ev.program.layout(phase, src)
            if mine is None or theirs is None or _squeezed(mine[0]) == _squeezed(theirs[0]):
                return f"{name} is a row-major copy of the channels-last {src}, both alive"
    return None


def while_loop_backward_eager(ev: Evidence) -> str | None:
    """The loop's autograd running in eager PyTorch (inductor cannot compile a ``while_loop``
    backward): the pair is held to the user-level graph, whose loop is ``while_loop_stack_output``,
    and what is blamed is the eager loop autograd's storage the graph does not have."""
    if ev.source != "peak" or ev.model_source != "user-graph":  # it raises the peak; it keeps nothing
        return None
    if not any("while_loop_stack_output" in e for e in ev.graph_events):
        return None
    if ev.finding and ev.finding.get("model_death") not in (None, "not in model"):
        return None
    return "held to the user-level graph of a while_loop under autograd; blamed storage is not in that graph"


#: a model event or storage made by a ``while_loop``'s condition graph (``fw:while_loop.cond2:lt``)
_LOOP_CONDITION = re.compile(r"(?:^|[:.])while_loop(?:_\d+)?\.cond\d+:")


def while_loop_dense_predicate(ev: Evidence) -> str | None:
    """A ``while_loop`` run by torch's dense kernel (``torch/_higher_order_ops/while_loop.py``, ``while_loop_dense``:
    what an ``aot_autograd`` backend runs when its graphs call the higher-order op, as an fx interpreter does):
    ``should_loop = cond_fn(...)`` keeps each trip's predicate until the next condition has returned, so it is
    alive while the next body runs, where the graph's schedule drops it once read.  Recognised on a peak over a
    model that unrolls such a loop (its condition's events), where blame names a value a condition made (alive at
    the peak past its modelled death, or an allocation whose every candidate is one), or names nothing; bounded by
    the predicates' bytes (the peak check's ``loop_predicate_bytes``: per loop its largest, nested loops' added)."""
    if ev.source != "peak" or not _int(ev.figures.get("loop_predicate_bytes")):
        return None
    if not any(_LOOP_CONDITION.search(e) for e in ev.graph_events):
        return None
    if not ev.finding:
        return "the dense while_loop kernel holds a trip's predicate while the next body runs (nothing else blamed)"
    producer = str(ev.finding.get("producer") or "")
    if _LOOP_CONDITION.search(producer) and ev.finding.get("model_death") != "not in model":
        return f"{producer}, a while_loop condition's value, is held while the next body runs (the dense kernel)"
    candidates = [str(c) for c in ev.finding.get("candidates") or ()]  # the model's storages of its size
    if ev.finding.get("model_death") == "not in model" and candidates and all(
            _LOOP_CONDITION.search(c) for c in candidates):
        return "an allocation the model cannot name, of the size of a while_loop condition's values only"
    return None


def loop_predicate_bytes(ev: Evidence) -> int:
    """The predicates' bytes (the peak check's figure, from the model the pair is held to)."""
    return _int(ev.figures.get("loop_predicate_bytes"))


def graph_break_split(ev: Evidence) -> str | None:
    """A step Dynamo split at an op it cannot trace (a data-dependent scalar, shape or value: ``equal``,
    ``item``, ``nonzero``, ``unique``, an output of data-dependent size): compiled graphs, each with its own
    saved activations, and eager PyTorch between them or for the rest of the frame.  No one graph is the
    step, so the pair is held to the user-level graph, whose schedule of deaths the split does not keep."""
    if ev.source != "peak" or ev.model_source != "user-graph" or not ev.graph_breaks:
        return None
    return f"Dynamo split the step ({clip(ev.graph_breaks[0], 120)}); held to the user-level graph"


#: what crosses a split besides the step's values: the 0-d results Dynamo's eager code makes between
#: the graphs (a ``_local_scalar_dense``, the ``bool`` of an ``equal``), which no graph holds
SPLIT_SCALARS_BYTES = 64


def split_values_over_model(ev: Evidence) -> int | None:
    """The most a split step can put over its user-level model: the graphs and eager code between them
    hold nothing but the step's own values, so at worst every value it makes at once, beside the few
    scalars that cross the split (``None``: the record holds no figure of the values made)."""
    peak = ev.figures.get("model_peak_bytes")
    if not ev.model_made_bytes or not isinstance(peak, int):
        return None
    return max(0, ev.model_made_bytes - peak) + SPLIT_SCALARS_BYTES


_PREDICATE = re.compile(r"\bshould_loop\b|_cond_result\b")
#: ``buf1[0] = buf0``: a name stored as a list item (the host loop's carry list taking an initial carry)
_LIST_ITEM = re.compile(r"^\w+\[\d+\] = \w+$")


def while_loop_host_code(ev: Evidence) -> str | None:
    """The wrapper's host ``while`` loop, as inductor writes it: its carry list holds the previous
    trip's carries across the next body (or, for a loop that runs no trip, a clone of the counter to
    the return); ``should_loop`` holds the predicate across the body and to the return; the initial
    trip counter (and a name referencing it) is deleted only after the loop.  Anything else held
    in a loop program (a name released at the return instead of its ``del``) is not this."""
    if ev.source != "program" or not ev.program.has_host_loop:
        return None
    f = ev.finding
    if f:
        held_in, freed = str(f.get("held_in") or ""), ev.statement("freed_after")
        listed = f.get("holds_kinds")
        kinds = listed if isinstance(listed, list) else []
        scalar = f.get("shape") == [] or any("scalar" in str(k) for k in kinds)
        if held_in == "list":
            return "held by the loop's carry list until its items are replaced"
        if _PREDICATE.search(str(f.get("held_by") or "")) or _PREDICATE.search(freed):
            return "the loop predicate, held by should_loop"
        if scalar and freed.startswith("del ") and (f.get("in_loop") or f.get("finding") == "late-reference"):
            return "the trip counter, deleted only after the loop"
        if held_in == "name" and freed.startswith("del ") and ev.buffer is not None \
                and ev.program.initial_carry(*ev.buffer) and ev.program.after_host_loop(freed):
            return "an initial carry the wrapper put in the carry list, its name deleted only after the loop"
        return None
    part = ev.part
    if "held by the carry list" in part or "held by a list" in part or "reference by the carry list" in part:
        return "held by the loop's carry list"
    if "bool scalar held by a name" in part:
        return "the loop predicate, held by should_loop"
    if "scalar" in part and part.endswith("(del)"):
        return "the trip counter, deleted only after the loop"
    return None


def unused_saved_tensor(ev: Evidence) -> str | None:
    """A saved tensor the backward unpacks from its arguments and never reads, its name kept."""
    f = ev.finding
    if ev.source != "program" or not f or f.get("finding") != "late":
        return None
    last = ev.statement("last_use").rstrip()
    if _UNPACK.match(last) and str(f.get("last_use", "")).startswith("bw:"):
        return "unpacked from the backward's arguments, never read, its name kept to the return"
    return None


#: ``primals_2, mul, avg_pool2d, tangents_1 = args``, also as the program model shortens it (``= ar…``)
_UNPACK = re.compile(r"^\w+(?:, \w+)*,? = (?:args|ar?g?…)$")
#: the same unpack cut short before its ``= args`` (a backward with many saved tensors)
_CUT_UNPACK = re.compile(r"^\w+(?:, \w+)+, \w*…$")


def result_tuple_held(ev: Evidence) -> str | None:
    """An op's result tuple kept after its items were taken: it keeps them alive past their last
    use (the class of pytorch/pytorch#163227)."""
    if ev.source == "program" and ev.finding.get("held_in") == "tuple":
        return "held by an op's result tuple past its last use"
    if ev.source == "program" and not ev.finding and "a result tuple" in ev.part:
        return "held by an op's result tuple past its last use"
    return None


def _statement_index(ev: Evidence, key: str, start: int = 0) -> int | None:
    """The index in the program of the statement a finding's event label names (``last_use``, ``freed_after``)."""
    m = _EVENT.match(str(ev.finding.get(key) or ""))
    if m is None:
        return None
    phase, text = m.group(1) or "", m.group(2).strip()
    return next((i for i in range(start, len(ev.program.statements))
                 if ev.program.statements[i].phase == phase and ev.program.statements[i].text == text), None)


def held_in_program(ev: Evidence) -> int | None:
    """What a buffer held past its last use can put in the program check's excess, read from the generated program:
    its bytes times the statements doing work (a kernel, an op, an allocation) from its last use to the statement
    that releases it (at least one),
    both named in the program (``None``: the finding names no statement the program has; a buffer never freed
    has no bound).  The program check counts a late release the same way, so the instance is held to its own
    buffer and the program's own ``del``: a longer hold, a larger buffer or bytes the measurement adds are beyond."""
    nbytes = ev.finding.get("bytes")
    last = _statement_index(ev, "last_use")
    freed = _statement_index(ev, "freed_after", last) if last is not None else None
    if not isinstance(nbytes, int) or last is None or freed is None:
        return None
    work = sum(1 for s in ev.program.statements[last + 1:freed + 1] if s.work or _ALLOC.match(s.text))
    return nbytes * max(work, 1)


def early_gradient(ev: Evidence) -> str | None:
    """A gradient the backward program computes before the received graph's schedule does, alive
    at the peak."""
    where = ev.buffer
    if where is None or where[0] != "bw" or ev.source != "peak":
        return None
    phase, name = where
    for s in ev.program.statements:
        if s.phase == phase and s.text.startswith("return") and name in s.names():
            return f"{name} is a gradient the backward returns, made before the peak"
    return None


def tangent_held_by_call(ev: Evidence) -> str | None:
    """A gradient the compiled backward receives (``tangents_N``, unpacked from its arguments) alive after the
    program dels it: AOTAutograd's ``CompiledFunction.backward(ctx, *grad_outputs)`` clears the argument list it
    hands the program, and its own ``grad_outputs`` tuple holds the tangents until the call returns."""
    where = ev.buffer
    if where is None or ev.source != "peak" or where[0] != "bw" or not re.fullmatch(r"tangents_\d+", where[1]):
        return None
    made = re.search(r"\(made at (?:\w+:)?line \d+ (.*)\)$", str(ev.finding.get("producer") or ""))
    if made is None or not (_UNPACK.match(made.group(1)) or _CUT_UNPACK.match(made.group(1))):  # a graph input
        return None
    return f"{where[1]}, a gradient the backward receives, is held by the call's grad_outputs until it returns"


def _fused_together(ev: Evidence) -> tuple[str, str, list[str]] | None:
    """The buffer fusion keeps alive, as (phase, name, the buffers allocated together before the fused kernel
    that writes it); ``None``: not one.  The buffer is the blamed one or, where blame could name no single
    buffer (several of one size), the one whose allocation makes the peak of a program the measurement
    follows exactly (:func:`_fused_at_program_peak`)."""
    where = ev.buffer
    if ev.source != "peak":  # the program held exactly; a late release is not fusion
        return None
    if where is None:
        return _fused_at_program_peak(ev)
    phase, name = where
    writer = str(ev.finding.get("op") or "").split(" ", 1)[0]
    for i, s in enumerate(ev.program.statements):
        callee = s.text.split("(", 1)[0].removesuffix("\u2026")
        if s.phase != phase or not s.work or not re.fullmatch(r"\w+", callee):
            continue  # an assignment from a call, an extern kernel, an op: not a fused kernel's own call
        if not (writer and s.calls(writer)) and name not in s.names()[1:]:
            continue  # (a buffer the wrapper renamed for reuse is written under its new name: renames())
        together = _written_together(ev.program, i, name)
        if together is not None:
            return phase, name, together
    return None


def _written_together(program: Program, i: int, name: str) -> list[str] | None:
    """The buffers allocated together before statement ``i``, a fused kernel's call, when ``name`` is one of two
    or more of them and the call writes it (names it, under a reuse name too, or is cut short)."""
    s = program.statements[i]
    callee = s.text.split("(", 1)[0].removesuffix("\u2026")
    if not s.work or not re.fullmatch(r"\w+", callee):
        return None
    together = program.allocated_before(i)
    named = name in s.names() or bool(program.renames(s.phase, name, i) & set(s.names()))
    return together if name in together and len(together) >= 2 and (named or s.text.endswith("\u2026")) else None


def _fused_at_program_peak(ev: Evidence) -> tuple[str, str, list[str]] | None:
    """Fusion at the peak, where blame named nothing: the program the measurement follows exactly reaches its
    peak allocating one of the buffers of the next fused kernel, or running an op (an extern kernel, a fallback)
    while the buffers an earlier fused kernel wrote together are all still alive (the kernel computed values
    the graphs' schedule makes only after that op); and the excess is no more than those buffers less the
    largest (the one any schedule has alive there).  A backend that also kept something past its last use fails
    the program check (not exact), and one that kept more shows an excess beyond that."""
    if ev.finding or not ev.program_exact:
        return None
    program = ev.program
    peak = program.peak_statement()
    if peak is None:
        return None
    phase = program.statements[peak].phase
    if (m := _ALLOC.match(program.statements[peak].text)) is not None:
        name = m.group(1)
        k = next((j for j in range(peak + 1, len(program.statements)) if program.statements[j].phase == phase
                  and program.statements[j].work), None)
        together = _written_together(program, k, name) if k is not None else None
    elif program.statements[peak].work:
        found = _fused_alive_at(program, peak)
        if found is None:
            return None
        name, together = found
    else:
        return None
    if together is None:
        return None
    sizes = [program.allocated_bytes(phase, n) for n in together]
    excess = _int(ev.figures.get("measured_peak_bytes")) - _int(ev.figures.get("model_peak_bytes"))
    return (phase, name, together) if 0 < excess <= sum(sizes) - max(sizes) else None


def _fused_alive_at(program: Program, peak: int) -> tuple[str, list[str]] | None:
    """(a buffer, the buffers allocated together with it) of the last fused kernel before statement ``peak``
    that wrote two or more buffers all still alive at ``peak`` (no ``del`` of them or of a name the wrapper
    gave them since), else ``None``."""
    phase = program.statements[peak].phase
    for k in range(peak - 1, -1, -1):
        s = program.statements[k]
        if s.phase != phase:
            return None
        if not s.work:
            continue
        together = program.allocated_before(k)
        written = [n for n in together if _written_together(program, k, n) is not None]
        if len(written) >= 2 and all(program.alive_between(phase, n, k, peak) for n in written):
            return written[0], written
    return None


#: the parity check's figure saying how the pair compares when the backend rounds as eager does
#: (:meth:`conformance.api.adapter.Backend.eager_rounding`): ``{"outcome": "pass" | "fail" | "error", ...}``
EAGER_ROUNDING = "eager_rounding"


def reduced_precision_rounding(ev: Evidence) -> str | None:
    """A parity failure that goes away when the backend rounds each bfloat16/float16 value after every op, as
    eager does: its fused kernels keep them in float32 between ops, more precise than eager, and a training
    step's state drifts from eager's by an ulp a step.  Proven on the pair itself: the engine ran it again
    under :meth:`~conformance.api.adapter.Backend.eager_rounding` and every call matched."""
    seen = ev.figures.get(EAGER_ROUNDING) if ev.source == "parity" else None
    if not isinstance(seen, Mapping) or seen.get("outcome") != "pass":
        return None
    return "every call matches when the backend rounds each reduced-precision value after every op, as eager does"


#: the parity check's figure saying how the pair compares when the backend runs the ops of a lowering known
#: to be wrong as ATen's kernels (:meth:`conformance.api.adapter.CompiledStep.lowering_fallbacks`):
#: ``{"outcome": "pass" | "fail" | "error", "lowering": the known defect, ...}``
LOWERING_FALLBACK = "lowering_fallback"


def known_lowering_defect(ev: Evidence) -> str | None:
    """A parity failure that goes away when the backend runs the ops of one of its lowerings known to be wrong
    as ATen's own kernels: that lowering computes this pair wrong.  Proven on the pair itself (the engine ran it
    again, compiled afresh with only those ops falling back, and every call matched), so a user's own model
    meeting the same defect is recognised, and a wrong kernel anywhere else is not."""
    seen = ev.figures.get(LOWERING_FALLBACK) if ev.source == "parity" else None
    if not isinstance(seen, Mapping) or seen.get("outcome") != "pass" or not seen.get("lowering"):
        return None
    return f"every call matches when the backend runs these ops as ATen's kernels: {seen['lowering']}"


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def fused_kernel_outputs(ev: Evidence) -> str | None:
    """One fused kernel writing several buffers that are all allocated before it runs, so they are
    alive together where the graphs' op-by-op schedule has fewer.  The kernel is the one the blamed
    buffer's writer names, called right after the run of allocations the buffer is in; its call
    names the buffer (or is cut short where the program model shortened a long statement)."""
    found = _fused_together(ev)
    if found is None:
        return None
    _, name, together = found
    return f"{name} is one of {len(together)} buffers allocated together before the fused kernel writing them"


_RELEASED_AT = re.compile(r"^after (\w+):(?:line \d+|[\w.]+#\d+:\d+) del ([\w, ]+?)(?: \(event \d+\))?$")
#: a release at the program's ``return``: a local inductor never ``del``s because its last reader is the last kernel
_RETURNED_AT = re.compile(r"^after (\w+):(?:line \d+|[\w.]+#\d+:\d+) (return\b.*?)(?: \(event \d+\))?$")


def _release(ev: Evidence) -> tuple[str, list[str], int] | None:
    """Where the program releases the blamed buffer, as (phase, the names released, the releasing statement's
    index): its ``del``, or the ``return`` of a program whose last kernel read it (inductor writes no ``del`` for
    a buffer whose last use is the last kernel: the return drops it), when the return does not hand it out and the
    program has no ``del`` of it (one the model holds to the return past its ``del`` is held by something else)."""
    death = str(ev.finding.get("model_death") or "")
    if (m := _RELEASED_AT.match(death)) is not None:
        phase, names = m.group(1), [n.strip() for n in m.group(2).split(",")]
        at = [i for i, s in enumerate(ev.program.statements) if s.phase == phase and s.text.startswith("del ")
              and [n.strip() for n in s.text.removeprefix("del ").split(",")] == names]
    elif (m := _RETURNED_AT.match(death)) is not None and ev.buffer is not None and ev.buffer[0] == m.group(1):
        phase, names = m.group(1), [ev.buffer[1]]
        at = [i for i, s in enumerate(ev.program.statements) if s.phase == phase and s.text == m.group(2)]
        if not at or names[0] in ev.program.statements[at[0]].names():
            return None  # returned: an output, not a release
        if any(s.phase == phase and s.text.startswith("del ") and names[0] in s.names() for s in ev.program.statements):
            return None  # the program dels it: what holds it to the return is not the program (a tangent's caller)
    else:
        return None
    return (phase, names, at[0]) if at else None


def _fused_reader(ev: Evidence) -> tuple[str, str] | None:
    """The blamed buffer's name where the program releases it, and the fused kernel that reads it last, when
    the program's release of it (its ``del``, or the ``return``) comes right after that kernel (no work between)
    and the kernel's buffers are allocated before it runs: fusion moved the buffer's last use to a kernel that
    writes later values."""
    if ev.buffer is None or ev.source != "peak":
        return None
    released = _release(ev)
    if released is None:
        return None
    phase, names, i = released
    statements = ev.program.statements
    k = next((j for j in range(i - 1, -1, -1) if statements[j].phase == phase and statements[j].work), None)
    if k is None:
        return None
    kernel = statements[k]
    callee = kernel.text.split("(", 1)[0].removesuffix("\u2026")
    if not re.fullmatch(r"\w+", callee) or not ev.program.allocated_before(k):
        return None  # not a fused kernel's own call, or one that writes no buffer of its own
    read = [n for n in names if n in kernel.names()[1:]]
    if not read and kernel.text.endswith("\u2026"):  # the program model cut the call's arguments short
        read = names
    return (read[0], callee) if read else None


def fused_input_read_late(ev: Evidence) -> str | None:
    """A buffer the graph's schedule frees after an early op, which inductor fused into a later kernel: the
    program frees it right after that kernel, whose buffers are allocated before it runs, so it is alive beside
    them.  The program releases it at its (moved) last use; a backend that kept it longer would not."""
    found = _fused_reader(ev)
    if found is None:
        return None
    return (f"{found[0]} is read last by the fused kernel {found[1]} and freed right after it, beside that kernel's "
            "buffers")


def fused_buffers_bytes(ev: Evidence) -> int:
    """The bytes of the buffers allocated together for the fused kernel: what fusion keeps alive at once grows
    with how many values one kernel writes (bicubic's backward: 17 taps), not with the model's peak.  It bounds
    the excess too: at worst the graphs' schedule held none of those buffers at its peak."""
    found = _fused_together(ev)
    if found is None:
        return 0
    phase, _, together = found
    return sum(ev.program.allocated_bytes(phase, n) for n in together)


#: an extern kernel's or fallback op's call: ``extern_kernels.bmm(...)``, ``buf2 = torch.ops.aten.X.default(...)``
_EXTERN_CALL = re.compile(r"^(?:[\w\[\], ()]+ = )?(?:extern_kernels\.(\w+)|(?:torch\.ops\.)?aten\.(\w+)(?:\.\w+)?)\(")
_OUT_ARG = re.compile(r"\bout=(\w+)")


def _materialised_input(ev: Evidence) -> tuple[str, str, str] | None:
    """(input, kernel, op): an extern kernel or fallback op ``op`` that writes or reads the blamed buffer and
    reads a buffer a fused ``kernel`` named after ``op`` wrote just for it: the copy inductor makes of an
    operand the graph passes as a view (a broadcast ``self``, ``unfold``'s windows) in the layout the kernel
    takes.  Its origin is the extern op's node, so inductor names the copying kernel after it."""
    where = ev.buffer
    if where is None or ev.source != "peak":
        return None
    phase, blamed = where
    statements = ev.program.statements
    for i, s in enumerate(statements):
        m = _EXTERN_CALL.match(s.text)
        if s.phase != phase or not s.work or m is None:
            continue
        op = m.group(1) or m.group(2)
        out = _OUT_ARG.search(s.text)
        written = out.group(1) if out else s.text.split(" = ", 1)[0] if " = " in s.text.split("(", 1)[0] else ""
        read = [n for n in s.names()[1:] if n != written]
        cut_write = _cut_out_arg(s.text, blamed, ev.program.allocated_before(i))
        if blamed != written and blamed not in read and not cut_write:
            continue
        for name in read:
            writer = ev.program.writer_before(phase, name, i) if ev.program.allocated_bytes(phase, name) else None
            kernel = statements[writer].text.split("(", 1)[0].removesuffix("\u2026") if writer is not None else ""
            if re.fullmatch(r"\w+", kernel) and f"_{op}_" in f"{kernel}_":
                return name, kernel, op
    return None


def _cut_out_arg(text: str, name: str, allocated: list[str]) -> bool:
    """Whether a call the program model cut short (``extern_kernels.baddbmm(buf0, ..., out=b…``) writes ``name``:
    its ``out=`` argument is cut inside ``name`` (or cut off), and ``name`` was allocated right before the call."""
    if not text.endswith("\u2026") or name not in allocated:
        return False
    cut = re.search(r"\bout=(\w*)\u2026$", text)
    return name.startswith(cut.group(1)) if cut else "out=" not in text


def extern_input_copy(ev: Evidence) -> str | None:
    """An extern kernel's operand copied into a buffer of its own for it, alive beside the kernel's result where
    the graph hands the kernel a view of a value it already holds."""
    found = _materialised_input(ev)
    if found is None:
        return None
    name, kernel, op = found
    return f"{name} is {kernel}'s copy of an operand of {op}, which the graph passes as a view"


def materialised_input_bytes(ev: Evidence) -> int:
    """The copied operand's bytes: all an extern kernel's input copy can put over the model."""
    found = _materialised_input(ev)
    return ev.program.allocated_bytes(ev.buffer[0], found[0]) if found is not None and ev.buffer else 0


def extern_kernel_workspace(ev: Evidence) -> str | None:
    """Storage an extern kernel allocates inside its own call (per-thread blocks, reorders), which
    no graph model counts."""
    f = ev.finding
    op = str(f.get("measured_op") or "")
    if ev.source != "peak" or f.get("model_death") != "not in model" or not op.startswith("aten::"):
        return None
    kernel = op.removeprefix("aten::")
    for s in ev.program.statements:
        if s.work and (f"aten.{kernel}" in s.text or f"extern_kernels.{kernel}(" in s.text):
            return f"allocated inside the extern kernel {kernel}'s own call"
    return None


def _watch(ev: Evidence, verdict: str) -> bool:
    """The backward-input watch gave ``verdict``: as the deciding check, or beside a peak over the
    model that blame could not pin on any storage (the held inputs are the runtime's own buffers)."""
    if ev.source == "backward-inputs":
        return ev.figures.get("verdict") == verdict
    return ev.source == "peak" and not ev.finding and ev.runtime.get("backward_inputs") == verdict


def backward_inputs_held(ev: Evidence) -> str | None:
    """The compiled backward keeps its saved inputs for its whole call (its argument list never cleared)."""
    return "saved activations outlive the backward call" if _watch(ev, "held-for-call") else None


def result_buffer_packing(ev: Evidence) -> str | None:
    """A call's results packed into one runtime buffer, which live results keep allocated after the
    saved inputs among them were dropped (IREE's HAL result buffer)."""
    return "saved activations dropped but still allocated" if _watch(ev, "released-late") else None


def saved_still_allocated(ev: Evidence) -> int:
    """The bytes of saved activations the watch saw dropped but still allocated: all this mechanism can keep."""
    if ev.source == "backward-inputs":
        return int(ev.figures.get("still_allocated_bytes") or 0)
    staging = ev.runtime.get("backward_inputs_staging")
    return int(staging.get("still_allocated_bytes") or 0) if isinstance(staging, Mapping) else 0


_RETAINED_PACK = re.compile(r"result buffer(?: \d+ of \d+)? \(\d+ B allocated, \d+ B of it the retained results'; "
                            r"(?:the model has freed |the rest is its slots' alignment)")


def retained_result_pack(ev: Evidence) -> str | None:
    """A residual whose blamed bytes are in the runtime buffer of the results the caller keeps, beyond their own bytes:
    results the model frees (IREE packs a call's results into one allocation: a loss beside the gradients stays
    with them) or the padding of each retained result's slot to the pack's 64-byte alignment."""
    producer = str(ev.finding.get("producer") or "")
    if ev.source != "residual" or not _RETAINED_PACK.search(producer):
        return None
    if "the model has freed " in producer:
        return "a freed result shares the retained results' buffer"
    return "the retained results' buffer keeps their slots' 64-byte alignment"


def pack_beyond_retained(ev: Evidence) -> int:
    """The most a retained result pack can keep beyond the retained results: its results' slots as the runtime packs
    them (each rounded up to the 64-byte alignment; blame's ``slot_bytes``) less the retained results' own bytes.
    Computed from the results' sizes, not from the allocation measured: a buffer larger than its slots, or a
    result packed farther apart, is more than this."""
    slots, retained = ev.finding.get("slot_bytes"), ev.finding.get("retained_bytes")
    if slots is None or retained is None:
        return 0
    return max(0, int(slots) - int(retained))


_SHARED_RESULT_BUFFER = re.compile(r"result buffer(?: \d+ of \d+)? \((\d+) B allocated; alive in it when call "
                                  r"\d+/\d+ started: [^;]*; the model has freed (?!none of it)")


def shared_result_buffer(ev: Evidence) -> str | None:
    """A peak over the model made by an earlier call's result buffer: the results the model frees stay allocated
    while another result in the same buffer is alive (IREE packs a call's results into one HAL allocation; the
    loss beside the saved activations keeps them all through the backward)."""
    m = _SHARED_RESULT_BUFFER.search(str(ev.finding.get("producer") or ""))
    if ev.source != "peak" or m is None:
        return None
    return f"freed results stay allocated in their call's {m[1]} B result buffer beside a live one"


def blamed_bytes(ev: Evidence) -> int:
    """The bytes blame put on the part's buffer: the instance may show no more than that buffer accounts for."""
    return int(ev.finding.get("bytes") or 0)


_HAL_TRANSIENTS = re.compile(r"iree-hal call \d+/\d+'s transients: (\d+) B allocated inside the call, (\d+) B of "
                             r"intermediates in the model's schedule of it; its compiled program allocates (\d+) B "
                             r"of its own")


def lowering_transients(ev: Evidence) -> str | None:
    """A peak over the model made by a compiled call's own buffers beyond the intermediates the graph has,
    at or under what its compiled program declares: IREE lowers an op the graph holds as one into several
    dispatches (addbmm: a transpose into a transient, then a matmul; a constant: a copy of it), whose
    intermediates the program allocates and frees itself (``stream.resource.alloca``/``dealloca`` in its
    stream IR, :mod:`conformance.backends.iree_stream`).  More than the program declares is not this."""
    m = _HAL_TRANSIENTS.search(str(ev.finding.get("producer") or ""))
    if ev.source != "peak" or m is None or int(m[1]) <= int(m[2]) or int(m[1]) > int(m[3]):
        return None
    return (f"the call's own buffers ({m[1]} B) are its compiled program's (it allocates {m[3]} B of them), "
            f"beyond the graph's intermediates ({m[2]} B)")


def program_transients_over_model(ev: Evidence) -> int:
    """The most a call's own buffers can put over the model: what its compiled program allocates of its own
    beyond the intermediates the model's schedule of the call has."""
    m = _HAL_TRANSIENTS.search(str(ev.finding.get("producer") or ""))
    return max(0, int(m[3]) - int(m[2])) if m else 0


def _error(pattern: str, why: str) -> Recogniser:
    compiled = re.compile(pattern)

    def recognise(ev: Evidence) -> str | None:
        return why if ev.error and compiled.search(ev.error) else None

    return recognise


#: an aten op the compiler could not legalize: one torch-mlir defines (``'torch.aten.X'``) or one it
#: does not, which the importer emits as an opaque ``torch.operator`` named ``torch.aten.X``
_ATEN_ILLEGAL = re.compile(r"failed to legalize operation '(?:torch\.aten\.([\w.]+)'|torch\.operator'"
                           r"[^\n]*?name = \"torch\.aten\.([\w.]+)\")")


def aten_op_no_lowering(ev: Evidence) -> str | None:
    """An aten op (not a custom one) that reaches the compiler and has no lowering there: the graph
    imported, the op did not legalize."""
    m = _ATEN_ILLEGAL.search(ev.error) if ev.error else None
    return f"no lowering for aten.{m[1] or m[2]}" if m else None


def _unknown_dtype(ev: Evidence) -> str | None:
    m = re.search(r"KeyError: (torch\.(?:complex|float|int|uint|bfloat|bool)\w*)", ev.error) if ev.error else None
    return f"the importer's dtype table has no {m[1]}" if m else None


#: bytes per element of the dtypes a blamed entry names (``float32`` or ``torch.float32``)
_ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


def graph_input_bytes(ev: Evidence) -> int:
    """The bytes of the forward graph's inputs (the step's inputs and parameters, as the generated
    program asserts them), in the blamed buffer's dtype: what a layout copy copies.  A convolution
    whose output is small beside its input and weight copies more than the model's peak holds."""
    itemsize = _ITEMSIZE.get(str(ev.finding.get("dtype") or "").removeprefix("torch."), 4)
    return ev.program.input_numel("fw") * itemsize


#: a lowering's assertion, with the target inductor prints after it and the window arguments (kernel, stride,
#: padding) of an avg_pool2d backward
_POOL_BACKWARD = re.compile(r"LoweringException: AssertionError:.*?target: aten\.avg_pool2d_backward\.default", re.S)
_WINDOW_ARG = re.compile(r"args\[([234])\]: \[([^\]\n]*)\]")


def pool_backward_short_list(ev: Evidence) -> str | None:
    """Inductor's avg_pool2d backward lowering asserts two entries in each window argument, where eager (and
    the forward lowering, which pads the list) takes one for both dimensions: ``padding=[1]``."""
    m = _POOL_BACKWARD.search(ev.error) if ev.error else None
    if m is None:
        return None
    names = {"2": "kernel_size", "3": "stride", "4": "padding"}
    short = dict.fromkeys(f"{names[i]}=[{v.strip()}]" for i, v in _WINDOW_ARG.findall(ev.error[m.end():])
                          if len([x for x in v.split(",") if x.strip()]) == 1)  # the message is printed twice
    return f"avg_pool2d's backward lowering refuses a one-entry {', '.join(short)}" if short else None


@dataclass(frozen=True)
class Mechanism:
    name: str
    summary: str
    recognise: Recogniser
    #: bytes a manifest bound's percentage covers beside the model peak, for a mechanism whose storage
    #: scales with something the model's peak does not hold (``None``: the model peak alone)
    scale: Callable[[Evidence], int] | None = None
    #: the most bytes over the contract one instance can show, read from the evidence where the backend's own
    #: program declares it (``None``: the manifest entry gives the bound); such an entry needs no bound of its own
    bound: Callable[[Evidence], int | None] | None = None
    #: its recogniser can name, from the program alone, an excess blame left unnamed beside named storages
    #: (``finding`` empty): fusion's buffers made before the graphs' schedule makes them, which are never alive
    #: past a modelled death; a runtime's own verdict (the backward-input watch) is not evidence for such a rest
    names_rest: bool = False
    #: its bound is the whole pair's (the step's values), not each finding's: taken once, however many findings
    bound_per_pair: bool = False


#: every mechanism, asked in this order (the more specific first)
MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism("layout-copy", "a copy of a buffer in another layout (channels-last) alive beside it", layout_copy,
              scale=graph_input_bytes),
    Mechanism("while-loop-backward-eager", "a while_loop's autograd runs in eager PyTorch (its backward is not "
              "compiled), keeping its stacked carries", while_loop_backward_eager),
    Mechanism("while-loop-host-code", "the wrapper's host while loop holds its carry list, predicate or counter "
              "past their last use", while_loop_host_code),
    Mechanism("while-loop-dense-predicate", "torch's dense while_loop kernel holds a trip's predicate until the "
              "next condition returns, while the next body runs", while_loop_dense_predicate,
              bound=loop_predicate_bytes, bound_per_pair=True),
    Mechanism("graph-break-split", "Dynamo split the step at an op it cannot trace: compiled graphs and eager "
              "code between them keep values the one user-level graph frees", graph_break_split,
              bound=split_values_over_model, bound_per_pair=True),
    Mechanism("unused-saved-tensor", "the backward unpacks a saved tensor it never reads and keeps its name",
              unused_saved_tensor, bound=held_in_program),
    Mechanism("result-tuple-held", "an op's result tuple keeps its items alive past their last use",
              result_tuple_held, bound=held_in_program),
    Mechanism("extern-input-copy", "an extern kernel's operand, which the graph passes as a view (a broadcast, "
              "unfold's windows), copied into a buffer of its own for the kernel and alive beside its result",
              extern_input_copy, bound=materialised_input_bytes),
    Mechanism("fused-kernel-outputs", "a fused kernel's buffers are allocated together before it runs",
              fused_kernel_outputs, scale=fused_buffers_bytes, bound=fused_buffers_bytes, names_rest=True,
              bound_per_pair=True),
    Mechanism("early-gradient", "the backward computes a gradient before the graph's schedule does",
              early_gradient),
    Mechanism("fused-input-read-late", "a buffer an early op reads is read last by the later kernel that op was "
              "fused into, and stays alive beside that kernel's buffers", fused_input_read_late,
              bound=blamed_bytes),
    Mechanism("tangent-held-by-call", "a gradient the compiled backward receives stays alive to the end of the "
              "call: the runtime's grad_outputs hold it after the program dels it", tangent_held_by_call,
              bound=blamed_bytes),
    Mechanism("extern-kernel-workspace", "an extern kernel's own workspace, which no graph counts",
              extern_kernel_workspace),
    Mechanism("backward-inputs-held", "the compiled backward holds its saved inputs for the whole call",
              backward_inputs_held),
    Mechanism("result-buffer-packing", "a call's results share one runtime buffer that keeps dropped ones "
              "allocated", result_buffer_packing, bound=saved_still_allocated),
    Mechanism("retained-result-pack", "a result the caller drops shares one runtime buffer with the results it "
              "keeps (a loss packed with the gradients) or pads them to its slots' alignment, so it stays allocated "
              "with them", retained_result_pack, bound=pack_beyond_retained),
    Mechanism("aten-op-no-lowering", "an aten op the graph holds has no lowering in the compiler (it does not "
              "legalize, or reaches it as an opaque torch.operator)", aten_op_no_lowering),
    Mechanism("effects-op-import", "an op with side effects (linalg's error checks) reaches the importer "
              "wrapped in the with_effects higher-order op, which it does not implement",
              _error(r"Higher-order operation 'with_effects' not implemented",
                     "the importer does not implement with_effects")),
    Mechanism("none-in-list-import", "an optional-tensor list holding None (a backward's unused input grads) "
              "reaches the importer, which takes lists of one type only",
              _error(r"Heterogeneous lists are not supported: expected vtensor, got <class 'NoneType'>",
                     "the importer rejects a tensor list holding None")),
    Mechanism("dtype-import", "a dtype the importer's table lacks (complex128)", _unknown_dtype),
    Mechanism("mutating-custom-op-import", "a mutating custom op reaches the importer as "
              "auto_functionalized_v2, which it does not implement",
              _error(r"auto_functionalized_v2", "the importer rejects auto_functionalized_v2")),
    Mechanism("none-result-import", "a None gradient reaches the importer as a result",
              _error(r"!torch\.none", "the importer rejects a '!torch.none' result")),
    Mechanism("dynamo-eager-fallback", "Dynamo ran the whole step in eager PyTorch: an op it cannot trace (a "
              "data-dependent value or shape, an in-place resize) left no graph for the backend to compile",
              _error(r"compiled no graph with \w+: Dynamo ran the case in eager",
                     "Dynamo ran the step in eager: no graph reached the backend")),
    Mechanism("opaque-custom-op", "an op registered only through torch.library has no lowering",
              _error(r"legalize operation '?torch\.operator\b", "an opaque torch.operator could not be legalized")),
    Mechanism("float-constant-import", "a float scalar argument imported as torch.constant.float fails to "
              "legalize", _error(r"legalize operation '?torch\.constant\.float", "torch.constant.float not legalized")),
    Mechanism("scalar-constant-import", "an int or bool argument imported as torch.constant.int/bool stays "
              "unlegalized: the op that takes it (diag's offset, a 0-d reduction's dim, copysign's scalar) has no "
              "lowering for that form", _error(r"legalize operation '?torch\.constant\.(?:int|bool)'",
                                               "torch.constant.int/bool not legalized")),
    Mechanism("fake-retrace-constant", "turbine re-traces a graph that holds a real tensor constant (a backward's "
              "0-d zero) under FakeTensorMode, which refuses it",
              _error(r"Please convert all Tensors to FakeTensors first",
                     "turbine's passes re-trace a real tensor constant under FakeTensorMode")),
    Mechanism("generic-shape-mismatch", "IREE's lowering of a pooling window that overhangs the input (ceil_mode, "
              "padding) builds a linalg.generic whose operand shapes disagree",
              _error(r"'linalg\.generic' op inferred input/output operand #\d+ has shape's dimension",
                     "a linalg.generic with disagreeing operand shapes")),
    Mechanism("libm-symbol-link", "a dispatch lowered to a libm call the llvm-cpu target's embedded ELF does not "
              "define (log10 -> log10f), so the executable does not link",
              _error(r"undefined symbol: \w+", "a libm symbol the executable cannot link")),
    Mechanism("static-shape-refused", "torch-mlir's lowering emits a static shape op the verifier refuses: a "
              "tensor.cast between incompatible shapes where the op should broadcast or take a data-sized operand, or "
              "a tensor.expand_shape to a static dimension its operand does not have",
              _error(r"'tensor\.cast' op operand type 'tensor<[^']*>' and result type 'tensor<[^']*>' are cast "
                     r"incompatible|'tensor\.expand_shape' op expected dimension \d+ of collapsed type to be static",
                     "a static shape op the verifier refuses")),
    Mechanism("unbroadcast-operand", "torch-mlir's lowering of an elementwise op leaves a lower-rank operand "
              "unbroadcast: the linalg.generic it builds maps the operand at the result's rank (polar's angle)",
              _error(r"'linalg\.generic' op expected operand #\d+ rank \(\d+\) to match the result rank of "
                     r"indexing_map \(\d+\)", "a lower-rank operand not broadcast to the result")),
    Mechanism("slice-out-of-bounds", "a crop (a constant pad's backward, a padded unpooling) lowered to a slice "
              "whose offsets are negative or whose extent runs past its tensor, which IREE refuses",
              _error(r"expected offsets to be non-negative, but got -\d+|slice along dimension \d+ runs "
                     r"out-of-bounds: \d+ >= \d+", "a slice outside its tensor")),
    Mechanism("complex-scalar-import", "a graph holding a Python complex scalar (polar's backward: its `* 1j`), "
              "which turbine's importer does not take",
              _error(r"Unsupported argument type <class 'complex'>", "the importer refuses a complex scalar")),
    Mechanism("topk-region-yield", "torch-mlir's tm_tensor.topk (kthvalue's lowering) has a comparator region the "
              "IREE verifier refuses", _error(r"'tm_tensor\.topk' op region block must end with a linalg_ext\.yield",
                                             "tm_tensor.topk's region refused")),
    Mechanism("float64-result-buffer", "a float64 result over a buffer of float32's byte length (the input pipeline "
              "demotes float64), failing the call or its fence",
              _error(r"buffer view byte length \d+ exceeds backing buffer byte length|semaphore already signaled",
                     "a float64 result's buffer has float32's length")),
    Mechanism("returned-input-view", "turbine's call path asserts on the output count of a graph that returns only a "
              "view of its input, regenerated outside it", _error(r"AssertionError: expected \d+ outputs, got \d+",
                                                                  "a returned view of the input, no graph result")),
    Mechanism("semi-affine-tiling", "a linalg.generic with a semi-affine indexing map (max_unpool's scatter) that "
              "IREE's tiling does not support",
              _error(r"tiling is not supported for the semi-affine indexing map", "semi-affine map not tiled")),
    Mechanism("shared-result-buffer", "results the model frees stay allocated in their call's one result buffer "
              "while another result in it is alive", shared_result_buffer, bound=blamed_bytes),
    Mechanism("lowering-transients", "a compiled call's own buffers (its lowering's intermediates) beyond the "
              "intermediates the graph has, within what its compiled program declares", lowering_transients,
              bound=program_transients_over_model),
    Mechanism("while-loop-import", "the importer's while_loop lowering (torch.prim.Loop, "
              "while_loop_stack_output) fails", _error(r"while_loop_stack_output|prim\.Loop|region branch point",
                                                       "the importer's while_loop lowering failed")),
    Mechanism("known-lowering-defect", "a lowering known to be wrong in some form (the backend names it and its "
              "issue): the pair matches when only its ops run as ATen's kernels", known_lowering_defect),
    Mechanism("reduced-precision-rounding", "fused kernels keep bfloat16/float16 values in float32 between ops "
              "where eager rounds after every op; the pair matches when the backend rounds as eager does",
              reduced_precision_rounding),
    Mechanism("pool-backward-short-list", "inductor's avg_pool2d backward lowering asserts two entries in a "
              "window argument eager gives one (padding=[1])", pool_backward_short_list),
    Mechanism("while-loop-no-autograd", "torch.while_loop has no autograd in this torch",
              _error(r"Autograd not implemented for while_loop", "while_loop has no autograd")),
)

NAMES = frozenset(m.name for m in MECHANISMS)
#: the mechanisms whose evidence bounds each instance (Mechanism.bound): an entry expecting one needs no bound
SELF_BOUNDED = frozenset(m.name for m in MECHANISMS if m.bound is not None)


def summary(name: str) -> str:
    return next((m.summary for m in MECHANISMS if m.name == name), "")


@dataclass(frozen=True)
class Recognised:
    mechanism: str
    why: str
    scale: int = 0  # bytes its manifest bound's percentage covers beside the model peak (Mechanism.scale)
    bound: int | None = None  # the most bytes over the contract it can show, from the evidence (Mechanism.bound)
    bound_per_pair: bool = False  # that bound is the pair's, not the finding's (Mechanism.bound_per_pair)


def recognise(ev: Evidence) -> Recognised | None:
    """The first mechanism whose recogniser answers for ``ev`` (``None``: no known mechanism)."""
    for m in MECHANISMS:
        why = m.recognise(ev)
        if why:
            return Recognised(m.name, why, m.scale(ev) if m.scale is not None else 0,
                              m.bound(ev) if m.bound is not None else None, m.bound_per_pair)
    return None


def recognise_rest(ev: Evidence) -> Recognised | None:
    """The first mechanism that names an excess blame left unnamed (:attr:`Mechanism.names_rest`), else ``None``."""
    for m in MECHANISMS:
        why = m.recognise(ev) if m.names_rest else None
        if why:
            return Recognised(m.name, why, m.scale(ev) if m.scale is not None else 0,
                              m.bound(ev) if m.bound is not None else None, m.bound_per_pair)
    return None


def mechanism_of(part: str) -> str | None:
    """The mechanism a cause part names (``peak: layout-copy`` -> ``layout-copy``), else ``None``."""
    name = part.split(": ", 1)[-1]
    return name if name in NAMES else None
