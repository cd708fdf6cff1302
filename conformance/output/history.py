"""Run history: every run's verdicts and memory figures in one SQLite file, for trends and regressions.

A run is inserted in a single transaction, so a run interrupted halfway (a crash,
Ctrl-C, a full disk) leaves the database exactly as it was: earlier runs intact and
no half run to be mistaken for a real one.  A run is keyed by a fingerprint of its
results, so building the report twice from the same results does not count it twice.

The history lives next to the results (``DIR/history.sqlite``) unless the user names one
file for every run (a nightly dashboard).  Runs are ordered by when they ran, not by
when they were recorded: a report rebuilt for an older results directory must not
become "the latest run".
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from conformance.api.result import STATUSES, MemoryFigures, Result, Status
from conformance.api.verdict import rates
from conformance.util.paths import symlink_loop

T = TypeVar("T")

#: The history's file name inside a results directory (its default place).
HISTORY_NAME = "history.sqlite"
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
CREATE TABLE IF NOT EXISTS causes (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    backend TEXT NOT NULL,
    case_id TEXT NOT NULL,
    signature TEXT NOT NULL,
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
    #: backends this run has and the previous one had not (a plugin installed since), and the reverse
    new_backends: list[str] = field(default_factory=list)
    gone_backends: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.new_failures or self.fixes or self.memory_regressions or self.new_backends
                    or self.gone_backends)


def is_failure(status: str) -> bool:
    """Unexpected outcomes: a failure verdict, or an unexpected pass of a manifest xfail."""
    return Status.parse(status).is_unexpected


#: Columns each table must have for this code to read and write it.
_COLUMNS = {
    "runs": {"id", "started_at", "label", "fingerprint"},
    "results": {"run_id", "backend", "case_id", "family", "status", "reason", "model_peak_bytes",
                "measured_peak_bytes", "model_residual_bytes", "measured_residual_bytes"},
    "causes": {"run_id", "backend", "case_id", "signature"},
}


class HistoryError(ValueError):
    """A history file that cannot be used; the message is one line naming it."""


def default_for(results: Path) -> Path:
    """The history that belongs to a results directory (or to the directory of a results file)."""
    return (results if results.is_dir() else results.parent) / HISTORY_NAME


def check(path: Path, what: str = "--history") -> None:
    """Fail with one line if ``path`` cannot hold the run history; reads, never creates or writes."""
    loop = symlink_loop(path)
    if loop is not None:
        raise HistoryError(f"{what} {path}: {loop} is a symlink loop")
    if path.is_dir():
        raise HistoryError(f"{what} {path}: is a directory, not an SQLite file")
    if not path.exists():
        _check_creatable(path, what)
        return
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            _check_tables(db)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{what} {path}: not a run history database ({exc})") from None


def _check_creatable(path: Path, what: str) -> None:
    existing = next((p for p in path.parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise HistoryError(f"{what} {path}: {existing} is a file, not a directory")


def _check_tables(db: sqlite3.Connection) -> None:
    """The tables hold the columns this code reads and writes, and no column it could not fill.

    A newer harness's history may carry more columns: a nullable one or one with a default is
    left alone (rows are written by column name), but one that is NOT NULL without a default
    would fail every insert, after the run, when its report records it; so it is refused up front."""
    for table, needed in _COLUMNS.items():
        info = list(db.execute(f"PRAGMA table_info({table})"))  # cid, name, type, notnull, default, pk
        have = {row[1] for row in info}
        if have and not needed <= have:
            missing = ", ".join(sorted(needed - have))
            raise sqlite3.DatabaseError(f"its table {table!r} lacks {missing}: another program's database?")
        unfillable = sorted(row[1] for row in info if row[1] not in needed and row[3] and row[4] is None and not row[5])
        if unfillable:
            raise sqlite3.DatabaseError(
                f"its table {table!r} requires {', '.join(map(repr, unfillable))} (NOT NULL, no default), which this "
                f"version does not write: a newer conformance's history? Use that version, or another --history")


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if need be) the history; :class:`HistoryError` names the file when it is not one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path)
    except (OSError, sqlite3.Error) as exc:
        raise HistoryError(f"history {path}: cannot open: {exc}") from None
    try:
        db.execute("PRAGMA foreign_keys = ON")
        db.executescript(_SCHEMA)
        _check_tables(db)
    except sqlite3.DatabaseError as exc:
        db.close()
        raise HistoryError(f"history {path}: not a run history database ({exc})") from None
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
                db.execute(f"INSERT OR REPLACE INTO results ({', '.join(_RESULT_COLUMNS)}) "
                           f"VALUES ({', '.join('?' * len(_RESULT_COLUMNS))})", _row(run_id, r))
                if r.cause:
                    db.execute("INSERT OR REPLACE INTO causes (run_id, backend, case_id, signature) "
                               "VALUES (?, ?, ?, ?)", (run_id, r.backend, r.case, r.cause))
        return Run(run_id, when, label)


def recorded_run(path: Path, results: Sequence[Result]) -> Run | None:
    """The run these results were recorded as, if they were (the report records a run's results)."""
    if not path.exists():
        return None
    with closing(connect(path)) as db:
        found = db.execute("SELECT id, started_at, label FROM runs WHERE fingerprint = ?",
                           (fingerprint(results),)).fetchone()
    return Run(*found) if found and _is(found[0], int) and _is(found[1], str) and _is(found[2], str) else None


def cause_sightings(path: Path) -> dict[tuple[str, str], list[Run]]:
    """(backend, cause signature) -> the runs it was seen in, oldest first by when they ran."""
    if not path.exists():
        return {}
    by_id = {r.id: r for r in runs(path)}
    seen: dict[tuple[str, str], set[int]] = {}
    with closing(connect(path)) as db:
        rows = _typed(db.execute("SELECT run_id, backend, signature FROM causes"), int, str, str)
        for run_id, backend, signature in rows:
            seen.setdefault((backend, signature), set()).add(run_id)
    order = {r.id: i for i, r in enumerate(by_id.values())}
    return {key: [by_id[i] for i in sorted((i for i in ids if i in by_id), key=order.__getitem__)]
            for key, ids in seen.items()}


#: the ``results`` columns a run writes, in :func:`_row`'s order (named: a newer history may have more)
_RESULT_COLUMNS = ("run_id", "backend", "case_id", "family", "status", "reason", "model_peak_bytes",
                   "measured_peak_bytes", "model_residual_bytes", "measured_residual_bytes")


def _row(run_id: int, r: Result) -> tuple[object, ...]:
    m = r.memory or MemoryFigures()
    return (
        run_id, r.backend, r.case, r.family, r.status, r.reason,
        m.model_peak_bytes, m.measured_peak_bytes, m.model_residual_bytes, m.measured_residual_bytes,
    )


def runs(path: Path) -> list[Run]:
    """All runs, oldest first by when they ran (recording order breaks ties)."""
    if not path.exists():
        return []
    with closing(connect(path)) as db:
        found = [Run(*row) for row in _typed(db.execute("SELECT id, started_at, label FROM runs"), int, str, str)]
    return sorted(found, key=lambda r: (_when(r.started_at), r.id))


def _when(started_at: str) -> datetime:
    """A run's time, comparable across time zones; an unreadable one sorts first."""
    try:
        when = datetime.fromisoformat(started_at)
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _by_run_time(path: Path, points: list[tuple[int, T]]) -> list[tuple[int, T]]:
    order = {r.id: i for i, r in enumerate(runs(path))}
    return sorted(points, key=lambda p: order.get(p[0], -1))


def backend_trends(path: Path) -> dict[str, list[tuple[int, float]]]:
    """backend -> [(run id, pass rate)], oldest run first; :func:`conformance.api.verdict.rates`' pass rate."""
    if not path.exists():
        return {}
    counts: dict[str, dict[int, dict[str, int]]] = {}
    with closing(connect(path)) as db:
        rows = db.execute(
            "SELECT backend, run_id, status, COUNT(*) FROM results "
            "GROUP BY backend, run_id, status ORDER BY backend, run_id"
        )
        for backend, run_id, status, n in _typed(rows, str, int, str, int):
            if status not in STATUSES:
                continue
            counts.setdefault(backend, {}).setdefault(run_id, {})[status] = n
    trends: dict[str, list[tuple[int, float]]] = {}
    for backend, by_run in counts.items():
        judged = [(run_id, rates(c)) for run_id, c in by_run.items()]
        points = [(run_id, r.pass_rate) for run_id, r in judged if r.judged]  # a run of skips only has no rate
        if points:
            trends[backend] = points
    return {b: _by_run_time(path, points) for b, points in trends.items()}


def case_trends(path: Path) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """(case, backend) -> [(run id, measured peak bytes)], oldest run first, runs with a measured peak only."""
    if not path.exists():
        return {}
    trends: dict[tuple[str, str], list[tuple[int, int]]] = {}
    with closing(connect(path)) as db:
        rows = db.execute(
            "SELECT case_id, backend, run_id, measured_peak_bytes FROM results "
            "WHERE measured_peak_bytes IS NOT NULL ORDER BY case_id, backend, run_id"
        )
        for case, backend, run_id, peak in _typed(rows, str, str, int, int):
            trends.setdefault((case, backend), []).append((run_id, peak))
    return {key: _by_run_time(path, points) for key, points in trends.items()}


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
    backends_before, backends_after = {b for _, b in before}, {b for _, b in after}
    out.new_backends = sorted(backends_after - backends_before)
    out.gone_backends = sorted(backends_before - backends_after)
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
    return {(case, backend): (status, peak) for case, backend, status, peak in _typed(rows, str, str, str, (int, None))
            if status in STATUSES}


def _typed(rows: Iterable[tuple[Any, ...]], *types: type | tuple[type | None, ...]) -> Iterator[tuple[Any, ...]]:
    """The rows whose values have the types the harness writes; a row another program or a hand edit left
    in another shape (SQLite keeps any value in any column) is skipped, not a traceback."""
    for row in rows:
        if len(row) == len(types) and all(_is(value, t) for value, t in zip(row, types)):
            yield row


def _is(value: object, expected: type | tuple[type | None, ...]) -> bool:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return any(value is None if k is None else isinstance(value, k) and not isinstance(value, bool) for k in kinds)


@dataclass(frozen=True)
class PairPoint:
    """One pair's verdict and measured memory in one run (a point of its trend)."""

    run_id: int
    status: str
    peak: int | None
    residual: int | None


def pair_series(path: Path) -> dict[tuple[str, str], list[PairPoint]]:
    """(case, backend) -> its verdict, measured peak and residual in each run that had it, oldest run first."""
    if not path.exists():
        return {}
    series: dict[tuple[str, str], list[PairPoint]] = {}
    with closing(connect(path)) as db:
        rows = db.execute("SELECT case_id, backend, run_id, status, measured_peak_bytes, measured_residual_bytes "
                          "FROM results")
        for case, backend, run_id, status, peak, residual in _typed(rows, str, str, int, str, (int, None),
                                                                     (int, None)):
            if status in STATUSES:
                series.setdefault((case, backend), []).append(PairPoint(run_id, status, peak, residual))
    order = {r.id: i for i, r in enumerate(runs(path))}
    return {key: sorted(points, key=lambda p: order.get(p.run_id, -1)) for key, points in series.items()}


def flip(before: str, after: str) -> str:
    """"regression" (as expected -> unexpected), "fix" (unexpected -> as expected) or "" between two verdicts."""
    if is_failure(after) and not is_failure(before):
        return "regression"
    if is_failure(before) and not is_failure(after):
        return "fix"
    return ""
