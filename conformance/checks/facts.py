"""Typed evidence: the facts blame and the program check find, with named fields.

Blame writes each fact into its blamed entry under the fact's own key (:meth:`to_json`), beside the sentence a
reader sees (the entry's ``producer``, written from the same fact by this module's ``*_sentence`` functions);
the mechanisms and causes read the fact back by its key (:meth:`from_entry`), never the sentence.  Rewording
a sentence changes what a reader sees and nothing else (``tests/test_reworded_blame.py``).

The program model's event labels are read here too, by one grammar (:func:`parse_event`): the program model
(:mod:`conformance.models.program`) labels each statement it runs ``<phase>:<place> [trip <n>] <statement>``
(``fw:line 163 buf3 = ...``, ``bw:while_loop_body_graph_0#1:160 ...``, ``fw:line 210 [trip 0] ...``).  A label
is a location, not a sentence; ``tests/test_mechanism_registry.py`` holds the grammar to the labels the real
program model writes.  The statement after the place is the generated program's own text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, TypeVar

_EVENT = re.compile(r"^(?:(\w+):)?(line \d+|[\w.]+#\d+:\d+)\s*(?:\[trip (\d+)\]\s*)?(.*)$")


@dataclass(frozen=True)
class ProgramEvent:
    """One statement the program model ran: its phase (``fw``, ``bw``; ``""`` for a program modelled alone),
    where in the wrapper (``line 163``, or a subgraph's ``name#call:line``), the host loop's trip, and the text."""

    phase: str
    place: str
    trip: int | None
    statement: str

    @property
    def in_loop(self) -> bool:
        """Inside a host ``while`` loop's trip or a ``while_loop`` subgraph."""
        return self.trip is not None or "while_loop_" in self.place


def parse_event(label: object) -> ProgramEvent | None:
    """The statement an event label names (``None``: not a program statement's label: a graph event, ``never``)."""
    m = _EVENT.match(str(label or ""))
    if m is None:
        return None
    return ProgramEvent(m.group(1) or "", m.group(2), int(m.group(3)) if m.group(3) else None, m.group(4).strip())


#: a blamed entry's ``model_death`` for an allocation no model storage is (blame writes it, the mechanisms compare it)
NOT_IN_MODEL = "not in model"


_F = TypeVar("_F")


def _fact(cls: type[_F], entry: Mapping[str, Any], key: str) -> _F | None:
    """The fact ``key`` of a blamed entry as ``cls`` (``None``: the entry has none, or a record from outside holds
    something else there)."""
    value = entry.get(key)
    if not isinstance(value, Mapping):
        return None
    try:
        return cls(**{k: tuple(tuple(x) for x in v) if isinstance(v, list) else v for k, v in value.items()})
    except TypeError:
        return None


@dataclass(frozen=True)
class ResultPack:
    """A call's result buffer still allocated after the step with the results the caller keeps in it (a runtime
    that packs a call's results into one allocation: IREE's HAL), beyond their own bytes."""

    KEY: ClassVar[str] = "result_pack"
    buffer: str  # how blame names the buffer (``iree-hal call 1/2's result buffer``)
    allocated_bytes: int
    retained_bytes: int  # the bytes of it the model retains (the results the caller keeps)
    slot_bytes: int  # the call's results, each in a slot rounded up to the pack's alignment
    results: int  # how many results the buffer holds
    alignment: int
    freed: tuple[tuple[str, int], ...]  # (label, bytes) of the results in it the model has freed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ResultPack | None:
        return _fact(cls, entry, cls.KEY)


@dataclass(frozen=True)
class SharedResultBuffer:
    """An earlier call's result buffer alive when the call that reached the peak started: the results the model
    has freed stay allocated in it beside one still alive."""

    KEY: ClassVar[str] = "shared_result_buffer"
    buffer: str
    allocated_bytes: int
    started: str  # the call that reached the peak (``2/2``)
    alive: tuple[tuple[str, int], ...]  # (label, bytes) of its results still alive then
    freed: tuple[tuple[str, int], ...]  # (label, bytes) of its results the model has freed by then

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> SharedResultBuffer | None:
        return _fact(cls, entry, cls.KEY)


@dataclass(frozen=True)
class CallTransients:
    """What one compiled call allocated inside itself and freed by its end, against the model's intermediates of
    it and what its compiled program declares it allocates of its own (``None``: not read)."""

    KEY: ClassVar[str] = "call_transients"
    call: str  # ``iree-hal call 1/2``
    allocated_bytes: int
    model_bytes: int
    program_bytes: int | None
    program_unreadable: bool = False  # the program was asked and could not be read

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> CallTransients | None:
        return _fact(cls, entry, cls.KEY)


@dataclass(frozen=True)
class ProgramBuffer:
    """A blamed buffer named by the generated program's own statements: its phase, its name, and the statement
    that made it (the generated program's text; ``""`` where the program model gave none)."""

    KEY: ClassVar[str] = "program_buffer"
    phase: str
    name: str
    made_by: str
    made_in_loop: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ProgramBuffer | None:
        return _fact(cls, entry, cls.KEY)

    @classmethod
    def made_at(cls, name: str, label: str) -> ProgramBuffer:
        """The buffer ``name`` made by the statement of event label ``label``."""
        event = parse_event(label)
        return cls(event.phase if event else "", name, event.statement if event else "",
                   event is not None and event.in_loop)


@dataclass(frozen=True)
class Release:
    """The generated program's statement after which the model frees a blamed buffer (its ``del``, or the
    ``return``), with its phase and, inside a host loop, its trip."""

    KEY: ClassVar[str] = "released_by"
    phase: str
    statement: str
    trip: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Release | None:
        return _fact(cls, entry, cls.KEY)

    @classmethod
    def at(cls, label: str) -> Release | None:
        """The release after the statement of event label ``label`` (``None``: not a program statement's label)."""
        event = parse_event(label)
        return cls(event.phase, event.statement, event.trip) if event is not None else None


@dataclass(frozen=True)
class ProgramPart:
    """One program-check finding in shape-free facts (a cause part's words are :meth:`words`): what was held
    (``bool scalar``, ``buffer``), by what (``a name``, ``a result tuple``, ``the carry list``), whether inside a
    ``while_loop``, for how long and the kind of statement that let it go."""

    KEY: ClassVar[str] = "cause_part_facts"
    kind: str  # ``held``, ``reference`` (a name kept past its last read), ``never-used``, ``timeline``
    what: str = ""
    container: str = ""
    in_loop: bool = False
    span: str = ""
    statement: str = ""
    timeline_finding: str = ""  # a measured-timeline finding's kind and maker (``kind == "timeline"``)
    #: what the part's findings hold, as the program check counts it over the generated program: each held item's
    #: bytes x the work statements from its last use to its release (``None``: not counted, a part read from words)
    held_statement_bytes: int | None = None

    def words(self) -> str:
        return part_words(self)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: object) -> ProgramPart | None:
        if not isinstance(value, Mapping):
            return None
        try:
            return cls(**value)
        except TypeError:
            return None


# --------------------------------------------------------------------------- the sentences (the edge: for readers)


def _listed(held: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{label} {nbytes} B" for label, nbytes in held)


def result_pack_sentence(p: ResultPack) -> str:
    rest = f"the model has freed {_listed(p.freed)} in it" if p.freed else "the rest is its slots' alignment"
    return (f"{p.buffer} ({p.allocated_bytes} B allocated, {p.retained_bytes} B of it the retained results'; {rest}; "
            f"its {p.results} results' {p.alignment}-byte slots take {p.slot_bytes} B)")


def shared_buffer_sentence(b: SharedResultBuffer) -> str:
    return (f"{b.buffer} ({b.allocated_bytes} B allocated; alive in it when call {b.started} started: "
            f"{_listed(b.alive)}; the model has freed {_listed(b.freed) or 'none of it'})")


def transients_sentence(t: CallTransients) -> str:
    program = (f"; its compiled program allocates {t.program_bytes} B of its own (stream IR)"
               if t.program_bytes is not None else
               "; its compiled program's own could not be read" if t.program_unreadable else "")
    return (f"{t.call}'s transients: {t.allocated_bytes} B allocated inside the call, {t.model_bytes} B of "
            f"intermediates in the model's schedule of it{program}")


def made_at_sentence(name: str, made_at: str) -> str:
    """A program buffer's name with the event label of the statement that made it."""
    return f"{name} (made at {made_at})"


def death_sentence(event: str, index: int) -> str:
    """Where the model frees a storage: after its event (label and index)."""
    return f"after {event} (event {index})"


_RELEASED = {"across the loop body": "on the next trip", "until after the loop": "after the loop",
             "past the step": "never", "past its last use": "later"}


def part_words(p: ProgramPart) -> str:
    """A program finding's cause part in words (``while_loop bool scalar held by a name across the loop body
    (del)``): the part a manifest's ``cause`` entry names."""
    if p.kind == "never-used":
        return "buffer allocated and never used"
    if p.kind == "timeline":
        return f"measured timeline: {p.timeline_finding}"
    where = "while_loop " if p.in_loop else ""
    if p.kind == "reference":
        return (f"{where}reference by {p.container} to {p.what} kept past its last use, released "
                f"{_RELEASED.get(p.span, p.span)} ({p.statement})")
    return f"{where}{p.what} held by {p.container} {p.span} ({p.statement})"


# ---------------------------------------------------------------- a blamed entry's fields, as blame writes them


def program_buffer_fields(name: str, made_at: str) -> dict[str, Any]:
    """A program buffer's fields in a blamed entry: the sentence a reader sees and the typed fact, from its name and
    the event label of the statement that made it."""
    fact = ProgramBuffer.made_at(name, made_at)
    return {"producer": made_at_sentence(name, made_at), ProgramBuffer.KEY: fact.to_json()}


def release_fields(event_label: str, index: int) -> dict[str, Any]:
    """Where the model frees a storage, in a blamed entry: the sentence and, for a program statement, the fact."""
    release = Release.at(event_label)
    fact = {Release.KEY: release.to_json()} if release is not None else {}
    return {"model_death": death_sentence(event_label, index), **fact}


def runtime_fields(fact: ResultPack | SharedResultBuffer | CallTransients) -> dict[str, Any]:
    """A runtime buffer's fields in a blamed entry: the sentence a reader sees and the typed fact."""
    sentence = result_pack_sentence(fact) if isinstance(fact, ResultPack) else \
        shared_buffer_sentence(fact) if isinstance(fact, SharedResultBuffer) else transients_sentence(fact)
    return {"producer": sentence, fact.KEY: fact.to_json()}


def share(entry: dict[str, Any]) -> int:
    """The bytes of a check's excess a blamed entry accounts for (``explains_bytes`` where the check's
    excess is not counted in plain bytes: the program check's bytes x statements)."""
    value = entry.get("explains_bytes", entry.get("bytes"))
    return int(value) if isinstance(value, int) else 0
