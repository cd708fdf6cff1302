"""Verdicts and the per case x backend result record written to ``results.jsonl``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATUSES = (
    "pass", "fail-compile", "fail-run", "fail-parity", "fail-peak", "fail-residual",
    "crash", "timeout", "skip", "xfail", "xpass",
)
FAILURES = ("fail-compile", "fail-run", "fail-parity", "fail-peak", "fail-residual", "crash", "timeout")
#: Final statuses that make a run "as expected".
EXPECTED_OK = ("pass", "skip", "xfail")
#: Version of the ``results.jsonl`` record layout (``conformance/schemas/results.schema.json``).
SCHEMA_VERSION = 1


@dataclass
class Result:
    case: str
    backend: str
    status: str
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
    repro_file: str = ""  # a standalone script (generated cases that failed: shrunk first)
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def ok(self) -> bool:
        return self.status in EXPECTED_OK

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
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
