"""Run history: every run's verdicts and memory figures in one SQLite file, for trends and regressions.

A run is inserted in a single transaction, so a run interrupted halfway (a crash,
Ctrl-C, a full disk) leaves the database exactly as it was: earlier runs intact and
no half run to be mistaken for a real one.  A run is keyed by a fingerprint of its
results, so building the report twice from the same results does not count it twice.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from conformance.result import Result, Status

DEFAULT_HISTORY = Path("conformance-history.sqlite")
#: Peak growth beyond this fraction of the previous run's peak is a memory regression.
PEAK_REGRESSION = 0.05

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    fingerprint TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS results (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    backend TEXT NOT NULL,
    case_id TEXT NOT NULL,
    family TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    model_peak_bytes INTEGER,
    measured_peak_bytes INTEGER,
    model_residual_bytes INTEGER,
    measured_residual_bytes INTEGER,
    PRIMARY KEY (run_id, backend, case_id)
);
"""


@dataclass(frozen=True)
class Run:
    id: int
    started_at: str
    label: str


@dataclass(frozen=True)
class Change:
    """One case x backend whose verdict or peak moved between two runs."""

    case: str
    backend: str
    before: str
    after: str
    peak_before: int | None = None
    peak_after: int | None = None

    @property
    def growth(self) -> float | None:
        if not self.peak_before or self.peak_after is None:
            return None
        return (self.peak_after - self.peak_before) / self.peak_before


@dataclass
class Changes:
    """What changed in ``run`` since ``previous`` (None when it is the first run)."""

    run: Run | None
    previous: Run | None
    new_failures: list[Change] = field(default_factory=list)
    fixes: list[Change] = field(default_factory=list)
    memory_regressions: list[Change] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.new_failures or self.fixes or self.memory_regressions)


def is_failure(status: str) -> bool:
    """Unexpected outcomes: a failure verdict, or an unexpected pass of a manifest xfail."""
    return Status.parse(status).is_unexpected


def connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA foreign_keys = ON")
    db.executescript(_SCHEMA)
    return db


def fingerprint(results: Sequence[Result]) -> str:
    rows = sorted(json.dumps(r.to_json(), sort_keys=True, default=str) for r in results)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def record_run(
    path: Path,
    results: Iterable[Result],
    label: str = "",
    started_at: str | None = None,
) -> Run:
    """Insert one run atomically and return it; the same results recorded again return the existing run."""
    results = list(results)
    fp = fingerprint(results)
    when = started_at or datetime.now(timezone.utc).isoformat(timespec="seconds")
    with closing(connect(path)) as db:
        found = db.execute("SELECT id, started_at, label FROM runs WHERE fingerprint = ?", (fp,)).fetchone()
        if found:
            return Run(*found)
        with db:  # one transaction: commit on success, roll back on any exception
            cur = db.execute(
                "INSERT INTO runs (started_at, label, fingerprint) VALUES (?, ?, ?)", (when, label, fp)
            )
            run_id = cur.lastrowid
            assert run_id is not None
            for r in results:
                db.execute(
                    "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _row(run_id, r)
                )
        return Run(run_id, when, label)


def _row(run_id: int, r: Result) -> tuple[object, ...]:
    m = r.memory or {}
    return (
        run_id, r.backend, r.case, r.family, r.status, r.reason,
        m.get("model_peak_bytes"), m.get("measured_peak_bytes"),
        m.get("model_residual_bytes"), m.get("measured_residual_bytes"),
    )


def runs(path: Path) -> list[Run]:
    """All runs, oldest first."""
    if not path.exists():
        return []
    with closing(connect(path)) as db:
        return [Run(*row) for row in db.execute("SELECT id, started_at, label FROM runs ORDER BY id")]


def backend_trends(path: Path) -> dict[str, list[tuple[int, float]]]:
    """backend -> [(run id, pass rate)], oldest first; pass rate over the run's non-skipped verdicts."""
    if not path.exists():
        return {}
    trends: dict[str, list[tuple[int, float]]] = {}
    with closing(connect(path)) as db:
        rows = db.execute(
            "SELECT backend, run_id, SUM(status = 'pass'), COUNT(*) FROM results "
            "WHERE status != 'skip' GROUP BY backend, run_id ORDER BY backend, run_id"
        )
        for backend, run_id, ok, total in rows:
            trends.setdefault(backend, []).append((run_id, ok / total if total else 0.0))
    return trends


def case_trends(path: Path) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """(case, backend) -> [(run id, measured peak bytes)], oldest first, runs with a measured peak only."""
    if not path.exists():
        return {}
    trends: dict[tuple[str, str], list[tuple[int, int]]] = {}
    with closing(connect(path)) as db:
        rows = db.execute(
            "SELECT case_id, backend, run_id, measured_peak_bytes FROM results "
            "WHERE measured_peak_bytes IS NOT NULL ORDER BY case_id, backend, run_id"
        )
        for case, backend, run_id, peak in rows:
            trends.setdefault((case, backend), []).append((run_id, peak))
    return trends


def changes(path: Path, run_id: int | None = None, threshold: float = PEAK_REGRESSION) -> Changes:
    """New failures, fixes and peak regressions (> ``threshold`` growth) of a run against the one before it."""
    all_runs = runs(path)
    if run_id is None and all_runs:
        run_id = all_runs[-1].id
    index = next((i for i, r in enumerate(all_runs) if r.id == run_id), None)
    if index is None:
        return Changes(None, None)
    run = all_runs[index]
    previous = all_runs[index - 1] if index > 0 else None
    out = Changes(run, previous)
    if previous is None:
        return out
    with closing(connect(path)) as db:
        before = _statuses(db, previous.id)
        after = _statuses(db, run.id)
    for key, (status, peak) in sorted(after.items()):
        if key not in before:
            if is_failure(status):
                out.new_failures.append(Change(*key, "absent", status, None, peak))
            continue
        old_status, old_peak = before[key]
        change = Change(*key, old_status, status, old_peak, peak)
        if is_failure(status) and not is_failure(old_status):
            out.new_failures.append(change)
        elif is_failure(old_status) and not is_failure(status):
            out.fixes.append(change)
        growth = change.growth
        if growth is not None and growth > threshold:
            out.memory_regressions.append(change)
    return out


def _statuses(db: sqlite3.Connection, run_id: int) -> dict[tuple[str, str], tuple[str, int | None]]:
    rows = db.execute(
        "SELECT case_id, backend, status, measured_peak_bytes FROM results WHERE run_id = ?", (run_id,)
    )
    return {(case, backend): (status, peak) for case, backend, status, peak in rows}
