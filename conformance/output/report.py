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
import json
import math
import os
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
from conformance.api.verdict import Rates, Status, rates
from conformance.output import history as hist
from conformance.output.coverage import Coverage, coverage
from conformance.output.outdir import OutDirError, check_target, locked
from conformance.output.records import RecordsError, read_usable
from conformance.output.triage import Triage, triage
from conformance.output.version_matrix import VersionMatrix, version_matrix
from conformance.util.glossary import explain
from conformance.util.paths import path_arg
from conformance.util.text import clip, printable

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
    merged: dict[tuple[str, str], Result] = {}
    for d in results_dirs:
        loaded = read_usable(results_file(d))
        for line in loaded.warnings():
            (warn or _warn)(line)
        for r in loaded.results:
            merged[(r.case, r.backend)] = r
    return list(merged.values())


def all_results(results_dirs: Sequence[Path]) -> list[Result]:
    """Every usable result of every directory, nothing merged away (the per-version view needs them all)."""
    return [r for d in results_dirs for r in read_usable(results_file(d)).results]


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


@dataclass
class Chart:
    width: int = 700
    height: int = 250
    left: int = 70
    right: int = 180
    top: int = 16
    bottom: int = 36

    def x(self, p: float) -> float:
        return round(self.left + p * (self.width - self.left - self.right), 2)

    def y(self, b: float, top: float) -> float:
        h = self.height - self.top - self.bottom
        return round(self.top + h - (b / top) * h if top else self.top + h, 2)


def nice_ticks(highest: float, target: int = 5) -> list[float]:
    """Round byte ticks (1, 2, 2.5 or 5 x 10^k of B, KiB, MiB...) from 0 to at least ``highest``."""
    if highest <= 0:
        return [0.0, 1.0]
    unit = 1.0
    while highest / unit >= 1024:
        unit *= 1024
    raw = highest / unit / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = max(1.0, next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw) * unit)
    count = math.ceil(highest / step - 1e-9)
    return [i * step for i in range(count + 1)]


def spread(labels: list[tuple[float, str, str, str]], gap: float, lo: float, hi: float
           ) -> list[tuple[float, str, str, str]]:
    """Move labels apart vertically (at least ``gap``) so values close together stay readable."""
    placed: list[tuple[float, str, str, str]] = []
    for y, *rest in sorted(labels, key=lambda lab: lab[0]):
        y = max(y, lo, placed[-1][0] + gap if placed else lo)
        placed.append((y, *rest))  # type: ignore[arg-type]
    overflow = placed[-1][0] - hi if placed else 0
    if overflow > 0:  # pushed off the bottom: shift the stack up
        placed = [(y - overflow, *rest) for y, *rest in placed]  # type: ignore[misc]
    return placed


def step_path(points: Sequence[tuple[float, int]], chart: Chart, top: float) -> str:
    """An SVG path that holds each value until the next point (live bytes change in steps)."""
    if not points:
        return ""
    parts = [f"M{chart.x(points[0][0])},{chart.y(points[0][1], top)}"]
    held = points[0][1]
    for i, (x, b) in enumerate(points[1:], 1):
        if b == held and i < len(points) - 1:
            continue  # same value: the horizontal run continues (keeps long timelines small)
        parts.append(f"H{chart.x(x)}V{chart.y(b, top)}")
        held = b
    return "".join(parts)


@dataclass(frozen=True)
class SeriesMarks:
    """One series of the timeline chart, as numbers and plain strings (the template escapes them)."""

    key: str
    label: str
    colour: str
    path: str  # SVG path data, built from numbers only
    points: int
    peak: int
    residual: int
    peak_y: float
    peak_x: float | None  # where the series reaches its peak, if it does
    residual_y: float


@dataclass(frozen=True)
class TimelineChart:
    """Geometry of the memory timeline: ``charts.html.j2`` draws it, autoescaping every string."""

    chart: Chart
    x_end: float  # x of step progress 1
    ticks: list[tuple[float, str]]  # (y, byte label)
    progress: list[tuple[float, str]]  # (x, progress label)
    series: list[SeriesMarks]
    labels: list[tuple[float, str, str, str]]  # (y, class, colour, text), spread apart


def timeline_chart(memory: MemoryFigures | None) -> TimelineChart | None:
    """Model and measured live bytes over the step on one chart, peaks and residuals marked; None if unmeasured."""
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
    chart = Chart()
    highest = max(max(max(b for _, b in s.points), s.peak or 0) for s in series)
    ticks = nice_ticks(highest)
    top = ticks[-1]
    marks = [_series_marks(s, chart, top) for s in series]
    labels: list[tuple[float, str, str, str]] = []
    for m in marks:
        labels.append((m.peak_y, "peak-label", m.colour, f"{m.key} peak {fmt_bytes(m.peak)}"))
        labels.append((m.residual_y, "residual-label", m.colour, f"{m.key} residual {fmt_bytes(m.residual)}"))
    return TimelineChart(
        chart, chart.x(1),
        [(chart.y(t, top), fmt_bytes(t)) for t in ticks],
        [(chart.x(p), f"{p:g}") for p in (0, 0.25, 0.5, 0.75, 1)],
        marks,
        spread(labels, gap=13, lo=chart.top + 4, hi=chart.height - chart.bottom + 4),
    )


def _series_marks(s: Series, chart: Chart, top: float) -> SeriesMarks:
    peak = s.peak if s.peak is not None else max(b for _, b in s.points)
    residual = s.residual if s.residual is not None else s.points[-1][1]
    px = next((x for x, b in s.points if b == peak), None)
    return SeriesMarks(
        s.key, s.label, s.colour, step_path(s.points, chart, top), len(s.points), peak, residual,
        chart.y(peak, top), chart.x(px) if px is not None else None, chart.y(residual, top),
    )


@dataclass(frozen=True)
class Spark:
    """A tiny trend line over runs (oldest on the left, the last point dotted), for ``charts.html.j2``."""

    width: int
    height: int
    points: str  # polyline points, numbers only
    last: tuple[float, float]
    values: str  # JSON of the values, for data-values


def spark(values: Sequence[float], width: int = 120, height: int = 28, lo: float | None = None,
          hi: float | None = None) -> Spark | None:
    if not values:
        return None
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    span = hi - lo
    n = len(values)
    pts = [
        (round(3 + (i / (n - 1) if n > 1 else 0.5) * (width - 6), 2),
         round(height - 3 - ((v - lo) / span if span else 0.5) * (height - 6), 2))
        for i, v in enumerate(values)
    ]
    return Spark(width, height, " ".join(f"{x},{y}" for x, y in pts), pts[-1],
                 json.dumps([round(float(v), 4) for v in values]))


# --------------------------------------------------------------------------- page model


@dataclass
class Cell:
    index: int
    result: Result
    peak_trend: list[tuple[int, int]] = field(default_factory=list)

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
    backend_trends: dict[str, list[tuple[int, float]]]
    changes: hist.Changes | None
    runs: list[hist.Run]
    run: hist.Run | None
    note: str = ""  # e.g. "interrupted after 8 of 33 pairs": shown under the title
    no_history_why: str = "--no-history"
    by_version: VersionMatrix | None = None  # verdicts side by side per torch version, when runs differ in it
    coverage: Coverage | None = None  # the module sweep's table, when the run holds it
    triage: Triage | None = None  # failures grouped by cause, new ones first (conformance.output.triage)


def build_page(results: list[Result], sources: list[str], history: Path | None,
               title: str = "torch-conformance", run_time: str | None = None, note: str = "") -> Page:
    backends = list(dict.fromkeys(r.backend for r in results))
    cases: dict[str, str] = {}
    for r in sorted(results, key=lambda r: (r.family, r.case)):
        cases.setdefault(r.case, r.family)
    run = hist.record_run(history, results, started_at=run_time) if history else None
    case_trends = hist.case_trends(history) if history else {}
    cells: list[Cell] = []
    by_key: dict[tuple[str, str], Cell] = {}
    for r in sorted(results, key=lambda r: (list(cases).index(r.case), backends.index(r.backend))):
        cell = Cell(len(cells), r, case_trends.get((r.case, r.backend), []))
        cells.append(cell)
        by_key[(r.case, r.backend)] = cell
    rows = [(c, fam, {b: by_key[(c, b)] for b in backends if (c, b) in by_key}) for c, fam in cases.items()]
    counts = {b: Counter(str(r.status) for r in results if r.backend == b) for b in backends}
    present = {r.status for r in results}
    versions: dict[str, dict[str, str]] = {}
    for r in results:
        versions.setdefault(r.backend, {}).update(r.versions)
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
        backend_trends=hist.backend_trends(history) if history else {},
        changes=hist.changes(history, run.id) if history and run else None,
        runs=hist.runs(history) if history else [],
        run=run,
        note=note,
        no_history_why="an interrupted run is not recorded" if note else "--no-history",
        coverage=coverage(results),
        triage=triage(results, history if run else None),
    )


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
    env.filters["explain"] = lambda name: explain(str(name)) if name else ""
    env.globals.update(timeline_chart=timeline_chart, spark=spark, is_failure=hist.is_failure)
    return env


def render(page: Page) -> str:
    env = _env()
    css = env.loader.get_source(env, "report.css")[0]  # type: ignore[union-attr]
    js = env.loader.get_source(env, "report.js")[0]  # type: ignore[union-attr]
    # the package's own static files: the only markup not built by autoescaping templates
    return env.get_template("report.html.j2").render(page=page, css=Markup(css), js=Markup(js))


def build_report(results_dirs: list[Path], out_dir: Path, history: Path | None = None, note: str = "",
                 warn: Callable[[str], None] | None = None) -> Path:
    """Build the site into ``out_dir`` and return its ``index.html``.

    With ``history`` the results are recorded there as a run (once: the same results
    are recognised by their fingerprint) and the page shows trends and what changed
    since the previous run.  ``note`` is shown under the title (an interrupted run).
    The page is written to a fresh file and moved into place: a failure leaves the old one.
    """
    check_target(out_dir, "-o")
    results = load_results(results_dirs, warn)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    index = out_dir / "index.html"
    staged = out_dir / "index.html.partial"
    try:
        with locked(out_dir, "-o"):  # a run or another report writing there refuses this one
            page = build_page(results, [str(d) for d in results_dirs], history,
                              run_time=results_time(results_dirs), note=note)
            page.by_version = version_matrix(all_results(results_dirs))
            staged.write_text(render(page), encoding="utf-8")
            os.replace(staged, index)
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
