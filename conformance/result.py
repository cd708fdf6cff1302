"""The per case x backend result record written to ``results.jsonl``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.verdict import FAILURES, STATUSES, Check, Status

__all__ = ["FAILURES", "SCHEMA_VERSION", "STATUSES", "Result", "Status", "append_result", "read_results"]

#: Version of the ``results.jsonl`` record layout (``conformance/schemas/results.schema.json``).
SCHEMA_VERSION = 1


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
    memory: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    repro: str = ""
    repro_file: str = ""  # a repro script for a failing pair (a generated case shrunk first)
    notes: list[str] = field(default_factory=list)
    #: the checks the verdict was combined from (conformance.verdict.combine), each with its figures
    checks: list[Check] = field(default_factory=list)
    #: how far the deciding memory check is over its contract (what a manifest's ``excess`` compares)
    excess_bytes: int | None = None
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
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["checks"] = [Check.from_json(c) for c in known.get("checks") or []]
        return cls(**known)


def append_result(path: Path, result: Result) -> None:
    """Append one line and flush it, so an interrupted run keeps what it finished."""
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(result.to_json(), default=_json_default) + "\n")
        fh.flush()


def read_results(path: Path) -> list[Result]:
    """Every record of a results file; raises ValueError naming the first bad line.

    Input from outside the run (``report``, ``merge``) goes through
    :func:`conformance.records.read_records` instead, which keeps the good lines.
    """
    from conformance.records import read_records

    loaded = read_records(path)
    if loaded.problems:
        raise ValueError(loaded.problems[0].describe(path))
    return loaded.results


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    return str(obj)
