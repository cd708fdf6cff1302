"""The nightly dashboard: a static HTML site built from results directories and the run history.

Everything the page needs is inlined (CSS, a small script, the charts as SVG), so it
works from a ``file://`` URL with no server and fetches nothing at view time.  Charts
are pure functions of the numbers in ``results.jsonl`` and the history database, so
every mark on them can be checked against those numbers.

Results files come from anywhere (a backend names itself), so nothing here builds
markup from data: Python computes chart geometry as numbers, and the templates render
every string through Jinja2's autoescaping.  The only ``Markup`` is the static CSS and
script shipped with the package.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import re
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from conformance.api.result import STATUSES, MemoryFigures, Result
from conformance.api.verdict import Rates, Status, combine, rates
from conformance.output import history as hist
from conformance.output.coverage import (
    STEPS,
    Coverage,
    OpCoverage,
    coverage,
    op_cell,
    op_coverage,
    place_rows,
    sweep_left_out,
)
from conformance.output.outdir import OutDirError, check_target, locked
from conformance.output.records import RecordFile, RecordsError, read_usable
from conformance.output.triage import Triage, triage
from conformance.output.version_matrix import VersionMatrix, version_matrix
from conformance.util.glossary import explain
from conformance.util.paths import path_arg
from conformance.util.text import clip, printable
from conformance.util.writes import write_whole

#: Short cell labels; the full status is in the cell's data-status and tooltip.
SHORT: dict[str, str] = {
    Status.PASS: "pass", Status.FAIL_COMPILE: "compile", Status.FAIL_RUN: "run", Status.FAIL_PARITY: "parity",
    Status.FAIL_PEAK: "peak", Status.FAIL_RESIDUAL: "residual", Status.CRASH: "crash", Status.TIMEOUT: "timeout",
    Status.SKIP: "skip", Status.XFAIL: "xfail", Status.XPASS: "XPASS",
}
MODEL_COLOUR = "#2f6fdf"
MEASURED_COLOUR = "#e0561b"
PROGRAM_COLOUR = "#2a9d4b"


# --------------------------------------------------------------------------- loading


def results_file(source: Path) -> Path:
    """A results directory's ``results.jsonl``, or the file itself."""
    return source / "results.jsonl" if source.is_dir() else source


def expand_sources(sources: Sequence[Path]) -> list[Path]:
    """Each results directory or file as given; a directory holding no ``results.jsonl`` but results
    directories one level down (a tox matrix's ``.tox/conformance/<env>``, nightly shards) stands for
    those, in name order, so one report covers whatever the matrix wrote."""
    expanded: list[Path] = []
    for source in sources:
        if source.is_dir() and not results_file(source).exists():
            found = sorted(d for d in source.iterdir() if d.is_dir() and results_file(d).is_file())
            if not found:
                raise RecordsError(f"{results_file(source)}: not found (nor in a directory one level down)")
            expanded.extend(found)
        else:
            expanded.append(source)
    return expanded


def load_results(results_dirs: Sequence[Path], warn: Callable[[str], None] | None = None) -> list[Result]:
    """Results of all directories (or results.jsonl files); a later one wins for the same case x backend.

    Each line is checked against the results schema: bad lines are skipped and named
    through ``warn``; a file with no valid record at all raises :class:`RecordsError`.
    """
    return merged_results(read_results_dirs(results_dirs, warn))


def read_results_dirs(results_dirs: Sequence[Path], warn: Callable[[str], None] | None = None) -> list[RecordFile]:
    """Each directory's (or file's) records, read and checked once; bad lines named through ``warn``."""
    files = []
    for d in results_dirs:
        loaded = read_usable(results_file(d))
        for line in loaded.warnings():
            (warn or _warn)(line)
        files.append(loaded)
    return files


def merged_results(files: Sequence[RecordFile]) -> list[Result]:
    """The results of ``files``, a later one winning for the same case x backend."""
    merged: dict[tuple[str, str], Result] = {}
    for loaded in files:
        for r in loaded.results:
            merged[(r.case, r.backend)] = r
    return list(merged.values())


def _warn(line: str) -> None:
    print(f"conformance report: warning: {printable(line)}", file=sys.stderr)


def results_time(results_dirs: Sequence[Path]) -> str:
    """When the run finished: the newest results file's modification time (what the history records)."""
    paths = [results_file(d) for d in results_dirs]
    newest = max(p.stat().st_mtime for p in paths)
    return datetime.fromtimestamp(newest, timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- charts


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    try:
        n = float(n)
    except OverflowError:  # an int beyond any float (the reader bounds byte figures; others may not be)
        digits = str(abs(int(n)))
        return f"{'-' if n < 0 else ''}{digits[0]}.{digits[1:3]}e{len(digits) - 1} B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def model_points(model_timeline: Sequence[Sequence[Any]], residual: int | None) -> list[tuple[float, int]]:
    """The model's live bytes after each event at step progress i/(n-1); the residual closes the step.

    The model's last event still holds the step's outputs; they are dropped when the
    step ends, which is what the residual is, so it is drawn as the value at progress 1.
    """
    values = [int(b) for _, b in model_timeline]
    if not values:
        return []
    n = len(values)
    pts = [(i / (n - 1) if n > 1 else 0.0, v) for i, v in enumerate(values)]
    if residual is not None and residual != values[-1]:
        pts.append((1.0, int(residual)))
    return pts


def measured_points(timeline: Sequence[Sequence[Any]]) -> list[tuple[float, int]]:
    """The probe's (microseconds, live bytes) rescaled so the step spans progress 0..1."""
    if not timeline:
        return []
    t0, t1 = float(timeline[0][0]), float(timeline[-1][0])
    span = t1 - t0
    return [((float(t) - t0) / span if span > 0 else 0.0, int(b)) for t, b in timeline]


@dataclass
class Series:
    key: str  # "model" | "measured"
    label: str
    colour: str
    points: list[tuple[float, int]]
    peak: int | None  # the verdict's figure from results.jsonl
    residual: int | None


# --------------------------------------------------------------------------- uPlot data
# The interactive charts (memory timeline, history) are drawn in the browser by uPlot, vendored under
# templates/vendor/ and inlined.  Python hands them numbers only, as JSON in <script type="application/json">
# (Jinja's ``tojson`` escapes <, >, & and '), so nothing from the data becomes markup or code.


def _hold_aligned(series: Sequence[Sequence[tuple[float, int]]]) -> tuple[list[float], list[list[int]]]:
    """The series on one x axis (the union of their x), each holding its value until its next point.

    Live bytes change in steps; a series with two points at one x (the model's last event and the
    residual at progress 1) keeps both, the earlier nudged left by a hair, so its line reaches its peak."""
    nudged: list[list[tuple[float, int]]] = []
    for pts in series:
        out: list[tuple[float, int]] = []
        for i, (x, b) in enumerate(pts):
            later = sum(1 for x2, _ in pts[i + 1:] if x2 == x)
            out.append((round(x - later * 1e-6, 9), b))
        nudged.append(out)
    xs = sorted({x for pts in nudged for x, _ in pts})
    ys: list[list[int]] = []
    for pts in nudged:
        held, j, col = pts[0][1], 0, []
        for x in xs:
            while j < len(pts) and pts[j][0] <= x:
                held, j = pts[j][1], j + 1
            col.append(held)
        ys.append(col)
    return xs, ys


def timeline_data(memory: MemoryFigures | None) -> dict[str, Any] | None:
    """The memory timeline for uPlot: step progress, one column of live bytes per series, peaks and residuals."""
    if memory is None:
        return None
    series = [
        Series("model", f"model ({memory.model_source or 'lifetime model'})", MODEL_COLOUR,
               model_points(memory.model_timeline, memory.model_residual_bytes),
               memory.model_peak_bytes, memory.model_residual_bytes),
        Series("program", "generated program", PROGRAM_COLOUR,
               model_points(memory.program_timeline or [], memory.measured_residual_bytes),
               memory.program_peak_bytes, None),
        Series("measured", f"measured ({memory.domain or 'probe'})", MEASURED_COLOUR,
               measured_points(memory.timeline), memory.measured_peak_bytes, memory.measured_residual_bytes),
    ]
    series = [s for s in series if s.points]
    if not series:
        return None
    xs, ys = _hold_aligned([s.points for s in series])
    return {
        "x": xs,
        "series": [{"key": s.key, "label": s.label, "colour": s.colour, "y": y, "points": len(s.points),
                    "peak": s.peak if s.peak is not None else max(b for _, b in s.points),
                    "residual": s.residual if s.residual is not None else s.points[-1][1]}
                   for s, y in zip(series, ys)],
    }


def run_label(run: hist.Run, previous: hist.Run | None) -> str:
    """A run's x-axis label: its number and date (and time, after a run of the same day), and its torch version
    where it differs from the run before."""
    label = f"#{run.id} {run.started_at[:10]}"
    if previous is not None and previous.started_at[:10] == run.started_at[:10]:
        label += f" {run.started_at[11:16]}"  # runs of one day apart by their time
    if run.label and (previous is None or previous.label != run.label):
        label += f" {run.label}"
    return label


def history_data(history: Path, until: hist.Run | None = None) -> dict[str, Any]:
    """The history plots' numbers: runs, pass rate per backend, regressions and fixes per run, pairs whose
    peak or residual moved (the largest moves, relative to their first run); up to the run ``until`` (a report
    rebuilt for an older run does not plot the nights after it)."""
    all_runs = runs_until(history, until)
    index = {r.id: i for i, r in enumerate(all_runs)}
    labels = [run_label(r, all_runs[i - 1] if i else None) for i, r in enumerate(all_runs)]
    trends = hist.backend_trends(history)
    rate_cols: dict[str, list[float | None]] = {backend: [None] * len(all_runs) for backend in trends}
    for backend, rate_points in trends.items():
        for run_id, rate in rate_points:
            if run_id in index:
                rate_cols[backend][index[run_id]] = round(rate, 4)
    regressions = [0] * len(all_runs)
    fixes = [0] * len(all_runs)
    flips: list[dict[str, Any]] = []
    moved: list[tuple[float, str, str, list[int | None], list[int | None]]] = []
    for (case, backend), every in hist.pair_series(history).items():
        points = [p for p in every if p.run_id in index]
        for before, after in itertools.pairwise(points):
            kind = hist.flip(before.status, after.status)
            if kind:
                (regressions if kind == "regression" else fixes)[index[after.run_id]] += 1
                flips.append({"run": index[after.run_id], "case": case, "backend": backend, "kind": kind,
                              "before": before.status, "after": after.status})
        peaks = [p.peak for p in points if p.peak is not None]
        residuals = [p.residual for p in points if p.residual is not None]
        change = max(_rel_change(peaks), _rel_change(residuals))
        if change > 0:
            peak_col: list[int | None] = [None] * len(all_runs)
            res_col: list[int | None] = [None] * len(all_runs)
            for p in points:
                peak_col[index[p.run_id]], res_col[index[p.run_id]] = p.peak, p.residual
            moved.append((change, case, backend, peak_col, res_col))
    moved.sort(key=lambda m: (-m[0], m[1], m[2]))
    return {
        "runs": labels,
        "run_ids": [r.id for r in all_runs],
        "rates": rate_cols,
        "regressions": regressions,
        "fixes": fixes,
        "flips": sorted(flips, key=lambda f: (f["run"], f["kind"], f["backend"], f["case"])),
        "moved": [{"pair": f"{c}@{b}", "change": round(ch, 4), "peak": pk, "residual": rs}
                  for ch, c, b, pk, rs in moved[:MOVED_PAIRS]],
        "moved_total": len(moved),
    }


def runs_until(history: Path, until: hist.Run | None) -> list[hist.Run]:
    """The history's runs in the order they ran, up to and including ``until`` (all of them for None)."""
    all_runs = hist.runs(history)
    ids = [r.id for r in all_runs]
    return all_runs[:ids.index(until.id) + 1] if until is not None and until.id in ids else all_runs


#: how many of the pairs whose memory moved the history's peak plot draws (the largest moves)
MOVED_PAIRS = 8


def _rel_change(values: Sequence[int]) -> float:
    """The largest departure from the first value, as a fraction of it (0 for no change)."""
    if len(values) < 2:
        return 0.0
    first = values[0]
    return max(abs(v - first) for v in values) / max(abs(first), 1)


def pair_trend(points: Sequence[hist.PairPoint], all_runs: Sequence[hist.Run]) -> dict[str, Any] | None:
    """One pair's measured peak and residual over the runs that had it, its verdict flips marked."""
    if len(points) < 2:
        return None
    index = {r.id: i for i, r in enumerate(all_runs)}
    labels = [run_label(r, all_runs[i - 1] if i else None) for i, r in enumerate(all_runs)]
    kept = [p for p in points if p.run_id in index]
    return {
        "runs": [labels[index[p.run_id]] for p in kept],
        "peak": [p.peak for p in kept],
        "residual": [p.residual for p in kept],
        "status": [p.status for p in kept],
        "flips": [hist.flip(a.status, b.status) for a, b in zip([kept[0], *kept], kept)],
    }


# --------------------------------------------------------------------------- page model


#: a statement of a traceback: the error lines after the last frame (a frame line and its indented code lines)
_FRAME = re.compile(r'^\s+File "')
#: lines of a traceback's tail that are advice, not the error
_NOT_THE_ERROR = ("Set TORCHDYNAMO_VERBOSE", "For even more developer context", "Traceback (most recent call last)",
                  "The above exception was the direct cause", "During handling of the above exception")


def error_excerpt(notes: Sequence[str], limit: int = 8) -> str:
    """The error a failed compile or call raised, from the record's notes: the lines after the traceback's
    last frame (exception, message, compiler diagnostics), else the note's last lines."""
    for note in reversed(notes):
        lines = note.splitlines()
        frames = [i for i, line in enumerate(lines) if _FRAME.match(line)]
        if not frames:
            continue
        tail = [line for line in lines[frames[-1] + 1:]
                if line.strip() and not line.startswith((" ", "\t")) and not line.startswith(_NOT_THE_ERROR)]
        if tail:
            return "\n".join(tail[-limit:])
    text = [line for note in notes for line in note.splitlines() if line.strip()]
    return "\n".join(text[-limit:])


def parity_why(parity: dict[str, Any]) -> str:
    """Why a parity that passed is within contract although eager float32 was much closer to float64:
    the allowance is the tolerance or the rounding-noise floor at the tensor's scale, not the RMSE ratio."""
    ratio = parity.get("rmse_ratio")
    if not parity.get("ok") or not isinstance(ratio, (int, float)) or ratio <= RMSE_RATIO_WORTH_A_WORD:
        return ""
    closest = parity.get("closest") if isinstance(parity.get("closest"), dict) else None
    head = (f"The RMSE ratio ({ratio:.3g}x eager float32's) is large because eager float32 is itself almost exact "
            "here, not because this backend is far off: a tensor is within contract when its largest error is within "
            "rtol x its scale or the rounding-noise floor of the case's dtype at that scale (the RMSE ratio is only "
            "an alternative way to pass).")
    if not closest:
        return head
    try:
        name, err, allowed = str(closest["name"]), float(closest["max_abs_err"]), float(closest["allowed"])
        floor = float(closest.get("noise_floor") or 0.0)
    except (KeyError, TypeError, ValueError):
        return head
    if closest.get("update") is True:  # a carried state tensor's change on the call (parity.update_parity)
        name = f"the change of {name} on its call"
    share = f"{100 * err / allowed:.3g}%" if allowed > 0 else "n/a"
    return (f"{head} The tensor nearest its allowance, {name}, has max abs error {err:.3g}: {share} of the "
            f"{allowed:.3g} allowed (noise floor {floor:.3g}).")


#: a passing parity's RMSE ratio above this gets a sentence on why it is still within contract
RMSE_RATIO_WORTH_A_WORD = 10.0

#: statuses whose evidence is an error the backend raised (shown at the top of the panel, not in Notes)
ERROR_STATUSES = (Status.FAIL_COMPILE, Status.FAIL_RUN, Status.CRASH, Status.TIMEOUT)


@dataclass(frozen=True)
class Decision:
    """What decided a pair's verdict, for the top of its panel: the deciding check and its figures, what is
    blamed, or the error the backend raised."""

    check: str  # the deciding check's name ("" when no check ran: a compile or run error, a skip)
    status: str  # that check's own status (the backend's verdict before the manifest)
    reason: str
    figures: list[tuple[str, str, str, str]]  # (data-field, label, text, raw value)
    blamed: list[dict[str, Any]]
    error: str  # what the backend raised, for a compile / run failure, crash or timeout
    passed: bool  # every check within its contract


def decision(r: Result) -> Decision:
    raw = _raw(r)
    deciding = combine(r.checks)
    m = r.memory
    figures: list[tuple[str, str, str, str]] = []
    if deciding is not None:
        contract = deciding.contract or (m.contract if m is not None and m.check == deciding.name.value else None)
        if contract is not None:
            figures.append(("contract", "contract", contract.text, ""))
            figures.append(("measured", "measured", f"{_b(contract.measured_bytes)}: {contract.quantity}",
                            str(contract.measured_bytes)))
            figures.append(("allowed", "allowed", _range(contract.low_bytes, contract.high_bytes), ""))
        excess = deciding.excess_bytes if deciding.excess_bytes is not None else r.excess_bytes
        if excess is not None:
            figures.append(("excess", "excess over the contract", _b(excess), str(excess)))
        if m is not None and deciding.name.value in ("peak", "program", "backward-inputs", "pool", "baseline"):
            figures.append(("peaks", "peak: measured vs model",
                            f"{_b(m.measured_peak_bytes)} vs {_b(m.model_peak_bytes)}", ""))
        if m is not None and deciding.name.value == "residual":
            figures.append(("residuals", "residual: measured vs model",
                            f"{_b(m.measured_residual_bytes)} vs {_b(m.model_residual_bytes)}", ""))
        if deciding.name.value == "parity" and r.parity:
            worst = next(iter(r.parity.get("failures") or []), None)
            if isinstance(worst, dict):
                figures.append(("parity_worst", f"worst tensor {worst.get('name', '')}",
                                f"max abs error {_g(worst.get('max_abs_err'))}, allowed {_g(worst.get('allowed'))}",
                                ""))
        blamed = list(deciding.blamed or (m.blamed if m is not None and m.check == deciding.name.value else []))
        return Decision(deciding.name.value, deciding.status.value, deciding.reason, figures, blamed, "", False)
    error = error_excerpt(r.notes) if raw in ERROR_STATUSES else ""
    if raw.is_failure:
        return Decision("", raw.value, r.reason, figures, [], error, False)
    if m is not None and m.contract is not None:  # a pass: the headline check's contract, met
        figures.append(("contract", f"{m.check or 'peak'} contract", m.contract.text, ""))
    return Decision("", raw.value, "", figures, [], "", raw is not Status.SKIP)


def _raw(r: Result) -> Status:
    try:
        return Status.parse(r.raw_status or r.status)
    except ValueError:
        return Status.parse(r.status)


def _b(n: int | None) -> str:
    return "n/a" if n is None else f"{n} B ({fmt_bytes(n)})" if abs(n) >= 1024 else f"{n} B"


def _g(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, (int, float)) else str(v)


def _range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return _b(low) if low == high else f"{_b(low)} .. {_b(high)}"
    if high is not None:
        return f"at most {_b(high)}"
    if low is not None:
        return f"at least {_b(low)}"
    return "any"


@dataclass
class Cell:
    index: int
    result: Result
    trend: dict[str, Any] | None = None  # peak and residual over runs (pair_trend), for its panel's plot
    new: bool = False  # unexpected, and in a cause group no earlier run and no manifest knew

    @property
    def decision(self) -> Decision:
        return decision(self.result)

    @property
    def check_sentence(self) -> str:
        """The deciding check's own sentence, where the panel shows it beside the record's reason: only where
        the manifest replaced the reason (an xfail or xpass says the manifest's words).  Anywhere else the
        record's reason is that sentence, or restates it after the manifest's verdict on it, so showing both
        printed it twice in a row."""
        restated = self.result.status not in (Status.XFAIL, Status.XPASS)
        return "" if restated else self.decision.reason

    @property
    def timeline(self) -> dict[str, Any] | None:
        return timeline_data(self.result.memory)

    @property
    def short(self) -> str:
        return SHORT.get(self.result.status, self.result.status)

    @property
    def repro_file(self) -> str:
        """A generated case's standalone repro script, where the run wrote one."""
        if self.result.repro_file:
            return self.result.repro_file
        for note in self.result.notes:
            m = re.match(r"repro (?:file|script): (.+)", note)
            if m:
                return m.group(1).strip()
        return ""


@dataclass(frozen=True)
class OpStep:
    """One step of an op on a backend, as the op table's cell shows it: the verdict of its samples, the first
    non-pass's short reason (:func:`conformance.output.coverage.op_cell`), and each sample's pair."""

    verdict: str
    reason: str
    pairs: list[tuple[str, str, str]]  # (case, status, full reason) per sample, in sample order


@dataclass(frozen=True)
class OpLine:
    """A line of the op table: one op on one backend, inference and training."""

    op: str
    backend: str
    steps: dict[str, OpStep]
    statuses: list[str]  # the verdicts of every sample, once each (what the verdict filter matches)

    @property
    def passes(self) -> bool:
        return self.statuses == ["pass"]


def op_lines(table: OpCoverage) -> list[OpLine]:
    """The op table's lines, in its order: an op, then its backends (a backend that did not run it: no line)."""
    lines = []
    for row in table.rows:
        for backend in table.backends:
            cells = row.cells.get(backend)
            if cells is None:
                continue
            steps = {s: OpStep(*op_cell(cells[s]), [(r.case, str(r.status), r.reason) for r in cells[s]])
                     for s in STEPS if s in cells}
            statuses = list(dict.fromkeys(str(r.status) for rs in cells.values() for r in rs))
            lines.append(OpLine(row.op, backend, steps, statuses))
    return lines


#: the most ops a report screens for what the sweep leaves out of them, where no run here cached the screening
SCREEN_AT_MOST = 40


def op_left_out(table: OpCoverage) -> str:
    """Fills in what this torch release's sweep leaves out of the table's ops: from the screening a run here
    cached, else by screening those ops (a few: the whole sweep takes minutes); returns why it cannot, else ``""``."""
    from conformance.cases import ops as op_sweep  # torch's op_db, only for a run that holds op cases

    if not op_sweep.available():
        return "expecttest, which torch's op_db imports, is not installed where this report was built"
    import torch

    made_with = sorted({str(r.versions.get("torch", "")) for row in table.rows for steps in row.cells.values()
                        for rs in steps.values() for r in rs} - {""})
    if made_with and made_with != [torch.__version__]:
        return f"the results are from torch {', '.join(made_with)}, this report was built with {torch.__version__}"
    if op_sweep.cache_path().is_file():
        table.left_out = sweep_left_out(table)
    elif len(table.rows) <= SCREEN_AT_MOST:
        placed = place_rows(table)  # another release's op, an unknown dtype: listed as not placed
        table.left_out = [lo for dtype in dict.fromkeys(row.dtype for row in placed) for lo in
                          op_sweep.left_out([row.key for row in placed if row.dtype == dtype], dtype)]
    else:
        return (f"screening {len(table.rows)} ops takes minutes and no run here cached it "
                "(`conformance coverage DIR` screens them)")
    return ""


@dataclass
class Page:
    title: str
    generated_at: str
    sources: list[str]
    backends: list[str]
    families: list[str]
    rows: list[tuple[str, str, dict[str, Cell]]]  # (case, family, backend -> cell)
    cells: list[Cell]
    counts: dict[str, Counter[str]]
    rates: dict[str, Rates]  # pass rate and xfail rate per backend (conformance.api.verdict.rates)
    statuses: list[str]
    versions: dict[str, dict[str, str]]
    changes: hist.Changes | None
    runs: list[hist.Run]
    run: hist.Run | None
    note: str = ""  # e.g. "interrupted after 8 of 33 pairs": shown under the title
    no_history_why: str = "--no-history"
    by_version: VersionMatrix | None = None  # verdicts side by side per torch version, when runs differ in it
    coverage: Coverage | None = None  # the module sweep's table, when the run holds it
    ops: OpCoverage | None = None  # the op sweep's table, when the run holds op pairs
    op_lines: list[OpLine] = field(default_factory=list)  # its lines, op x backend
    op_left_out_why: str = ""  # why its left-out lines are not listed, where they are not
    triage: Triage | None = None  # failures grouped by cause, new ones first (conformance.output.triage)
    history_plots: dict[str, Any] | None = None  # history_data: the history section's uPlot numbers

    @property
    def unexpected(self) -> list[Cell]:
        """The pairs not as expected (a failure no manifest expected, or an xpass): what the top line names."""
        return [c for c in self.cells if hist.is_failure(c.result.status)]

    @property
    def expected_failures(self) -> list[Cell]:
        """Manifest-expected failures (xfail): non-passes the run is as expected with."""
        return [c for c in self.cells if c.result.status == Status.XFAIL]

    @property
    def as_expected(self) -> bool:
        return not self.unexpected and not self.note


def build_page(results: list[Result], sources: list[str], history: Path | None,
               title: str = "torch-conformance", run_time: str | None = None, note: str = "") -> Page:
    backends = list(dict.fromkeys(r.backend for r in results))
    cases: dict[str, str] = {}
    for r in sorted(results, key=lambda r: (r.family, r.case)):
        cases.setdefault(r.case, r.family)
    run = hist.record_run(history, results, label=torch_label(results), started_at=run_time) if history else None
    series = hist.pair_series(history) if history else {}
    all_runs = runs_until(history, run) if history else []
    found = triage(results, history if run else None)
    new_pairs = {(r.case, r.backend) for g in found.groups if g.new_this_run for r in g.results}
    cells: list[Cell] = []
    by_key: dict[tuple[str, str], Cell] = {}
    for r in sorted(results, key=lambda r: (list(cases).index(r.case), backends.index(r.backend))):
        key = (r.case, r.backend)
        cell = Cell(len(cells), r, pair_trend(series.get(key, []), all_runs),
                    new=key in new_pairs and hist.is_failure(r.status))
        cells.append(cell)
        by_key[key] = cell
    rows = [(c, fam, {b: by_key[(c, b)] for b in backends if (c, b) in by_key}) for c, fam in cases.items()]
    counts = {b: Counter(str(r.status) for r in results if r.backend == b) for b in backends}
    present = {r.status for r in results}
    versions: dict[str, dict[str, str]] = {}
    for r in results:
        versions.setdefault(r.backend, {}).update(r.versions)
    ops = op_coverage(results)
    return Page(
        title=title,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        sources=sources,
        backends=backends,
        families=sorted({fam for fam in cases.values()}),
        rows=rows,
        cells=cells,
        counts=counts,
        rates={b: rates(c) for b, c in counts.items()},
        statuses=[s for s in STATUSES if s in present],
        versions=versions,
        changes=hist.changes(history, run.id) if history and run else None,
        runs=all_runs,
        run=run,
        note=note,
        no_history_why="an interrupted run is not recorded" if note else "--no-history",
        coverage=coverage(results),
        ops=ops,
        op_lines=op_lines(ops) if ops else [],
        op_left_out_why=op_left_out(ops) if ops else "",
        triage=found,
        history_plots=history_data(history, run) if history else None,
    )


def torch_label(results: Sequence[Result]) -> str:
    """The torch version(s) a run's results were made with: the history's run label, shown on its plots."""
    found = sorted({str(r.versions.get("torch", "")) for r in results} - {""})  # a reader takes any JSON value
    return f"torch {', '.join(found)}" if found else ""


def word_breaks(identifier: object) -> Markup:
    """An identifier (a case id) escaped, with a line-break opportunity between its CamelCase words
    (``mod-Triplet<wbr>Margin<wbr>With...``): a long one gives way there and at its hyphens, never inside a word."""
    return Markup("<wbr>").join(re.split(r"(?<=[a-z0-9])(?=[A-Z])", str(identifier)))


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("conformance.output", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["bytes"] = fmt_bytes
    env.filters["clip"] = clip
    env.filters["word_breaks"] = word_breaks
    env.filters["explain"] = lambda name: explain(str(name)) if name else ""
    env.globals.update(is_failure=hist.is_failure, parity_why=parity_why, zip=zip)
    env.filters["short"] = lambda status: SHORT.get(str(status), str(status))
    return env


def render(page: Page) -> str:
    env = _env()
    css = env.loader.get_source(env, "report.css")[0]  # type: ignore[union-attr]
    js = env.loader.get_source(env, "report.js")[0]  # type: ignore[union-attr]
    uplot_js = env.loader.get_source(env, "vendor/uPlot.iife.min.js")[0]  # type: ignore[union-attr]
    uplot_css = env.loader.get_source(env, "vendor/uPlot.min.css")[0]  # type: ignore[union-attr]
    # the package's own static files: the only markup not built by autoescaping templates
    return env.get_template("report.html.j2").render(page=page, css=Markup(css), js=Markup(js),
                                                     uplot_js=Markup(uplot_js), uplot_css=Markup(uplot_css))


def build_report(results_dirs: list[Path], out_dir: Path, history: Path | None = None, note: str = "",
                 warn: Callable[[str], None] | None = None) -> Path:
    """Build the site into ``out_dir`` and return its ``index.html``.

    With ``history`` the results are recorded there as a run (once: the same results
    are recognised by their fingerprint) and the page shows trends and what changed
    since the previous run.  ``note`` is shown under the title (an interrupted run).
    The page is written to a fresh file and moved into place: a failure (a full disk) leaves the old one,
    and no partial page beside it.
    """
    check_target(out_dir, "-o")
    files = read_results_dirs(results_dirs, warn)  # each record is read and checked against the schema once
    results = merged_results(files)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    index = out_dir / "index.html"
    try:
        with locked(out_dir, "-o"):  # a run or another report writing there refuses this one
            page = build_page(results, [str(d) for d in results_dirs], history,
                              run_time=results_time(results_dirs), note=note)
            page.by_version = version_matrix([r for loaded in files for r in loaded.results])
            text = render(page)
            write_whole(index, lambda staged: staged.write_text(text, encoding="utf-8"))
    except BaseException:  # nothing built: no empty site directory left behind either
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    return index


# --------------------------------------------------------------------------- CLI


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``conformance report``; the CLI adds them to its ``report`` subparser."""
    parser.add_argument("results", nargs="+", type=path_arg, metavar="RESULTS",
                        help="results directories (each with results.jsonl) or results.jsonl files; a directory "
                             "of results directories (a tox matrix's) stands for each of them")
    parser.add_argument("-o", "--out", "--output", dest="output", type=path_arg, default=Path("conformance-report"),
                        metavar="SITE_DIR",
                        help="directory to write the site to (index.html); default: %(default)s")
    parser.add_argument("--history", type=path_arg, default=None, metavar="PATH",
                        help="SQLite run history to record this run in and draw trends from; "
                             f"default: {hist.HISTORY_NAME} beside the first RESULTS")
    parser.add_argument("--no-history", action="store_true", help="neither record nor show run history")


def main_report(argv: Sequence[str] | argparse.Namespace | None = None) -> int:
    """``conformance report RESULTS... -o SITE_DIR [--history PATH | --no-history]``; exit 2 on bad input.

    Takes argv, or the Namespace of a parser that ``add_report_arguments`` filled in.
    """
    if isinstance(argv, argparse.Namespace):
        args = argv
    else:
        parser = argparse.ArgumentParser(prog="conformance report", description=__doc__)
        add_report_arguments(parser)
        args = parser.parse_args(argv)
    try:
        sources = expand_sources(list(args.results))
        history = None if args.no_history else (args.history or hist.default_for(sources[0]))
        if history is not None:
            hist.check(history)
        index = build_report(sources, args.output, history)
    except (RecordsError, OutDirError, hist.HistoryError) as exc:  # each names its file
        print(f"conformance report: error: {printable(exc)}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as exc:
        print(f"conformance report: error: {printable(_describe_os_error(exc))}", file=sys.stderr)
        return 2
    print(f"report: {index.resolve().as_uri()}")
    return 0


def _describe_os_error(exc: OSError | sqlite3.Error) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    raise SystemExit(main_report())
