"""The evidence a mechanism is recognised from: one finding of a failure, with what the record holds around it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.checks.facts import (
    CallTransients,
    ProgramBuffer,
    ProgramPart,
    Release,
    ResultPack,
    SharedResultBuffer,
    parse_event,
)
from conformance.checks.mechanisms.program import Program

#: a result note that says Dynamo broke the step, followed by the break's reason (one note per reason)
GRAPH_BREAK_NOTE = "Dynamo broke the step into graphs and eager code: "
#: the model a split step is held to where its graphs' runs are known: the graphs Dynamo compiled, composed in the
#: order the call ran them with what crossed between them (:mod:`conformance.models.lifetime.split`)
SPLIT_SOURCE = "split-graphs"
#: the parity check's figure saying how the pair compares when the backend rounds as eager does
#: (:meth:`conformance.api.adapter.Backend.eager_rounding`): ``{"outcome": "pass" | "fail" | "error", ...}``
EAGER_ROUNDING = "eager_rounding"
#: the parity check's figure saying how the pair compares when the backend runs the ops of a lowering known
#: to be wrong as ATen's kernels (:meth:`conformance.api.adapter.CompiledStep.lowering_fallbacks`):
#: ``{"outcome": "pass" | "fail" | "error", "lowering": the known defect, ...}``
LOWERING_FALLBACK = "lowering_fallback"


#: a program model storage's name: its phase and the generated program's name for it (``fw:buf3``, ``buf3``)
_STORAGE_NAME = re.compile(r"^(?:(\w+):)?(\w+)$")


def graph_breaks_of(notes: Sequence[str]) -> tuple[str, ...]:
    return tuple(n[len(GRAPH_BREAK_NOTE):] for n in notes if n.startswith(GRAPH_BREAK_NOTE))


def as_int(value: object) -> int:
    """An int figure, else 0 (a record from outside may hold anything)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class Evidence:
    """One finding of a failure, with what the record holds around it."""

    source: str  # the deciding check (``program``, ``peak``, ...) or the error status
    part: str  # the finding in shape-free words (conformance.checks.cause)
    finding: Mapping[str, Any] = field(default_factory=dict)  # the blamed entry behind it ({} when none)
    program: Program = field(default_factory=Program)
    graph_events: tuple[str, ...] = ()  # the events of the model the pair is held to
    #: the bytes that model holds at each of those events (``None`` where the record gave no figure)
    graph_live: tuple[int | None, ...] = ()
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

    #: the program-check finding's shape-free facts (its cause part's, also where the record kept no entry for it)
    held: ProgramPart | None = None

    @property
    def program_buffer(self) -> ProgramBuffer | None:
        """The blamed buffer as the generated program names it (blame's typed fact)."""
        return ProgramBuffer.from_entry(self.finding)

    @property
    def buffer(self) -> tuple[str, str] | None:
        """The blamed buffer as (phase, name) in the generated program, when it is one of its: blame's typed fact,
        or a program finding's storage, which the program model names ``phase:name`` (``fw:buf3``)."""
        named = self.program_buffer
        if named is not None:
            return named.phase, named.name
        storage = _STORAGE_NAME.match(str(self.finding.get("producer") or ""))
        if storage and self.finding.get("finding"):
            return storage.group(1) or "", storage.group(2)
        return None

    @property
    def release(self) -> Release | None:
        """The program statement after which the model frees the blamed buffer (blame's typed fact)."""
        return Release.from_entry(self.finding)

    @property
    def result_pack(self) -> ResultPack | None:
        return ResultPack.from_entry(self.finding)

    @property
    def shared_buffer(self) -> SharedResultBuffer | None:
        return SharedResultBuffer.from_entry(self.finding)

    @property
    def transients(self) -> CallTransients | None:
        return CallTransients.from_entry(self.finding)

    def statement(self, key: str) -> str:
        """The statement text of one of the finding's event labels (``last_use``, ``freed_after``)."""
        m = parse_event(self.finding.get(key))
        return m.statement if m else str(self.finding.get(key) or "")


Recogniser = Callable[[Evidence], "str | None"]


#: the formula of :func:`blamed_bytes`, the bound of the mechanisms whose instance is one blamed buffer
BLAMED_BYTES = "the blamed buffer's bytes"


def blamed_bytes(ev: Evidence) -> int:
    """The bytes blame put on the part's buffer: the instance may show no more than that buffer accounts for."""
    return int(ev.finding.get("bytes") or 0)
