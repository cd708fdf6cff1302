"""The per case x backend result record written to ``results.jsonl``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from conformance.api.verdict import FAILURES, STATUSES, Check, Contract, Status
from conformance.util.writes import append_line

if TYPE_CHECKING:
    from conformance.models.donation import BackwardInputs

__all__ = [
    "FAILURES", "SCHEMA_VERSION", "STATUSES", "DomainFigures", "MemoryFigures", "ModelPoint", "Result", "Status",
    "TimelinePoint", "append_result",
]

#: Version of the ``results.jsonl`` record layout (``conformance/output/schemas/results.schema.json``).
SCHEMA_VERSION = 1


class TimelinePoint(NamedTuple):
    """A measured timeline's point; a record writes it as ``[at_us, live_bytes]``."""

    #: microseconds since the step began
    at_us: float
    live_bytes: int


class ModelPoint(NamedTuple):
    """A model's (or a generated program's) point: the bytes it holds live after ``event`` (an op, a
    statement); a record writes it as ``[event, live_bytes]``."""

    event: str
    live_bytes: int


@dataclass
class DomainFigures:
    """One memory domain's share of a pair that measures several (``MemoryFigures.domains``)."""

    peak_bytes: int | None = None
    residual_bytes: int | None = None
    residual_per_step: list[int] = field(default_factory=list)


@dataclass
class MemoryFigures:
    """What a pair's memory checks compared: the deciding check's figures, one story.

    The headline (``contract``, the measured and modelled peak and residual, ``model_source``,
    the timelines and ``blamed``) is the figures of the check that decided the verdict
    (:func:`conformance.api.verdict.combine`; the peak check for a pair that passed), of the
    probed call that check judged (``call``); every other check's figures stay in
    ``Result.checks``.  The engine fills every field it knows; ``findings`` holds what the backend reported of its
    own (``CompiledStep.memory_findings``: IREE's invocations, the backward-input watch, CUDA
    graph phases).  In ``results.jsonl`` it is one flat object, the findings after the
    engine's figures, as schema version 1 has it; a record read from outside may lack any
    figure (None then)."""

    domain: str | None = None
    #: the check the headline figures are of (the deciding one; the peak check where no memory check
    #: decided), and the quantity it held to a range (``Contract``)
    check: str | None = None
    contract: Contract | None = None
    #: the probed call the headline figures (peaks, timelines) are of
    call: int | None = None
    model_source: str | None = None
    model_peak_bytes: int | None = None
    measured_peak_bytes: int | None = None
    model_residual_bytes: int | None = None
    measured_residual_bytes: int | None = None
    residual_per_step: list[int] = field(default_factory=list)
    peak_per_step: list[int] = field(default_factory=list)
    user_model_peak_bytes: int | None = None
    #: the bytes of every value the user-level model makes in the call, each once (the most a split step's
    #: graphs and eager code can hold of them: conformance.checks.mechanism.split_values_over_model)
    user_model_made_bytes: int | None = None
    peak_contract: str | None = None
    #: the model's event at its peak (None when the model has no events)
    peak_event: str | None = None
    foreign_free_bytes: int | None = None
    #: measured live bytes over the call
    timeline: list[TimelinePoint] = field(default_factory=list)
    #: modelled live bytes after each event
    model_timeline: list[ModelPoint] = field(default_factory=list)
    #: what explains the deciding check's excess (``conformance.checks.blame``)
    blamed: list[dict[str, Any]] = field(default_factory=list)
    #: the deciding check's excess less the bytes its blamed entries explain (``explains_bytes``), and
    #: what makes that remainder up, in words (None where blame explains the excess exactly)
    blame_unexplained_bytes: int | None = None
    blame_note: str | None = None
    program_peak_bytes: int | None = None
    program_timeline: list[ModelPoint] | None = None
    peak_slack_reason: str | None = None
    domains: dict[str, DomainFigures] | None = None
    findings: dict[str, Any] = field(default_factory=dict)

    @property
    def backward_inputs(self) -> BackwardInputs | None:
        """The backward-input watch's verdict and figures, where the backend ran it."""
        from conformance.models.donation import BackwardInputs  # imports torch: only where a watch is read

        return BackwardInputs.from_memory(self.findings)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "findings" or (value is None and f.name != "peak_event"):
                continue
            if f.name == "domains":
                value = {name: asdict(d) for name, d in value.items()}
            elif f.name == "contract":
                value = asdict(value)
            data[f.name] = value
        return {**data, **self.findings}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MemoryFigures | None:
        """The figures of a record's ``memory`` object; None for an empty one (nothing measured)."""
        if not data:
            return None
        names = {f.name for f in fields(cls)} - {"findings"}
        known = {k: v for k, v in data.items() if k in names}
        if isinstance(known.get("domains"), dict):  # a domain's keys this version does not know are ignored
            names_d = {f.name for f in fields(DomainFigures)}
            known["domains"] = {name: DomainFigures(**{k: v for k, v in d.items() if k in names_d})
                                for name, d in known["domains"].items() if isinstance(d, dict)}
        if "contract" in known:
            known["contract"] = Contract.from_json(known["contract"])
        for key, point in (("timeline", TimelinePoint), ("model_timeline", ModelPoint),
                           ("program_timeline", ModelPoint)):
            if isinstance(known.get(key), list):
                known[key] = [point(*p) for p in known[key]]
        return cls(**known, findings={k: v for k, v in data.items() if k not in names})


@dataclass
class Result:
    case: str
    backend: str
    status: Status
    reason: str = ""
    seed: int = 0
    kind: str = ""
    family: str = ""
    raw_status: str = ""  # the backend's own verdict before the manifest was applied
    expected: str | None = None  # the manifest's expectation, if any
    parity: dict[str, Any] = field(default_factory=dict)
    #: the memory checks' figures (None when the pair stopped before its probed steps)
    memory: MemoryFigures | None = None
    timing: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    repro: str = ""
    repro_file: str = ""  # a repro script for a failing pair (a generated case shrunk first)
    notes: list[str] = field(default_factory=list)
    #: the parts of the step the backend handed to another runner (PyTorch, inductor) than its own, as its
    #: ``CompiledStep.fallbacks()`` said after the last call: ``part``, ``ran_in``, ``ops``, ``why``
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    #: the checks the verdict was combined from (conformance.api.verdict.combine), each with its figures
    checks: list[Check] = field(default_factory=list)
    #: how far the deciding memory check is over its contract (what a manifest's ``excess`` compares)
    excess_bytes: int | None = None
    #: a case whose shapes change (``conformance.run.shapes.ShapeFigures``): sizes per call, graphs
    #: compiled per call, recompiles, bytes kept across shapes; empty for any other case
    shapes: dict[str, Any] = field(default_factory=dict)
    #: what the failure is, from the deciding check's findings (conformance.checks.cause): its signature,
    #: and the parts a manifest's ``cause`` entries match ("" and [] for a pass or skip)
    cause: str = ""
    cause_parts: list[str] = field(default_factory=list)
    #: the parts no manifest entry knows (a failure whose cause is partly new)
    new_cause_parts: list[str] = field(default_factory=list)
    #: the run's result cache (conformance.util.result_cache), per kind of entry (``reference``, ``user-model``,
    #: ``received-model``, ``program-model``): how many the pair found (``hit``), made (``miss``) and made again
    #: over an entry it could not trust (``rebuilt``); empty where the cache was off
    cache: dict[str, dict[str, int]] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        self.status = Status.parse(self.status)

    @property
    def ok(self) -> bool:
        return self.status.as_expected

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = Status.parse(self.status).value
        data["checks"] = [c.to_json() for c in self.checks]
        data["memory"] = self.memory.to_json() if self.memory is not None else {}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["checks"] = [Check.from_json(c) for c in known.get("checks") or []]
        known["memory"] = MemoryFigures.from_json(known.get("memory") or {})
        return cls(**known)


def append_result(path: Path, result: Result) -> None:
    """Append one line whole (one ``write``: an interrupted run keeps what it finished), or nothing: a line a
    full disk cuts short is cut off again (:func:`conformance.util.writes.append_line`, ``DiskFull``)."""
    append_line(path, (json.dumps(result.to_json(), default=_json_default) + "\n").encode("utf-8"))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    return str(obj)
