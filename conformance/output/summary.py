"""The terminal summary: a Rich table of verdicts per backend, and what went wrong.

Names and reasons come from backends: they are escaped, never read as Rich markup, and their control
characters are shown escaped (:func:`printable`), never sent to the terminal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conformance.api.result import STATUSES, Result, Status
from conformance.util.phases import Breakdown
from conformance.util.result_cache import HIT, KINDS, MISS, REBUILT
from conformance.util.text import plural, printable

STYLE: dict[str, str] = {
    Status.PASS: "green", Status.XFAIL: "yellow", Status.SKIP: "dim", Status.XPASS: "red",
    Status.FAIL_COMPILE: "red", Status.FAIL_RUN: "red", Status.FAIL_PARITY: "red", Status.FAIL_PEAK: "red",
    Status.FAIL_RESIDUAL: "red", Status.CRASH: "red bold", Status.TIMEOUT: "red bold",
}


def summary_table(results: list[Result], wall_s: float, path: Path, warnings: Sequence[str] = (),
                  cut_short: str = "") -> None:
    """Verdict counts per backend, then each unexpected verdict; ``cut_short`` says the run did not finish."""
    console = Console(stderr=True, width=max(120, Console(stderr=True).width))
    backends = sorted({r.backend for r in results})
    table = Table(title=f"conformance: {plural(len(results), 'verdict')} in {wall_s:.0f}s")
    table.add_column("backend")
    used = [s for s in STATUSES if any(r.status == s for r in results)]
    for s in used:
        table.add_column(s, justify="right", style=STYLE.get(s, ""))
    table.add_column("as expected", justify="right")
    for b in backends:
        rs = [r for r in results if r.backend == b]
        counts = Counter(r.status for r in rs)
        ok = sum(r.ok for r in rs)
        table.add_row(escape(printable(b)), *(str(counts.get(s, "")) for s in used), f"{ok}/{len(rs)}")
    console.print(table)
    bad = [r for r in results if not r.ok]
    for r in bad:  # each unexpected verdict once (pytest's own failure lines are off): where to go next
        what = escape(printable(f"{r.case}@{r.backend}: {r.reason}"))
        console.print(f"[red]{escape(printable(r.status))}[/red] {what}")
        if r.repro_file:
            console.print(printable(f"    repro script: {r.repro_file}"), markup=False, highlight=False,
                          soft_wrap=True)
        # soft_wrap: the command is printed on one line, whatever the terminal's width, so it pastes as printed
        console.print(printable(f"    rerun: {r.repro}"), markup=False, highlight=False, soft_wrap=True)
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(printable(w))}")
    console.print(printable(f"results: {path}  ({_verdict_line(len(bad), cut_short)})"), markup=False,
                  highlight=False)


def _verdict_line(unexpected: int, cut_short: str) -> str:
    """Never "all as expected" for a run that did not run everything."""
    if cut_short:
        return f"{cut_short}; {unexpected} unexpected among them"
    return f"{unexpected} unexpected" if unexpected else "all as expected"


def profile_table(profile: Breakdown) -> None:
    """``--profile-harness``: seconds per phase, and each one's share of the wall time (or of pair-seconds)."""
    console = Console(stderr=True, width=max(120, Console(stderr=True).width))
    overlapped = profile.workers > 1
    whole = profile.accounted_s if overlapped else profile.wall_s
    title = (f"where the time went: {profile.wall_s:.1f}s wall"
             + (f", {profile.accounted_s:.1f}s over {profile.workers} workers" if overlapped else ""))
    table = Table(title=title)
    for column, justify in (("phase", "left"), ("seconds", "right"), ("share", "right"), ("what", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for name, seconds, what in profile.rows:
        share = f"{100 * seconds / whole:.0f}%" if whole > 0 else ""
        table.add_row(escape(printable(name)), f"{seconds:.2f}", share, escape(printable(what)))
    console.print(table)


def cache_line(counts: dict[str, dict[str, int]]) -> str:
    """``--profile-harness``: the result cache's hits and misses per kind over the run's pairs
    (:mod:`conformance.util.result_cache`), one line; ``""`` where no pair used it."""
    if not counts:
        return ""
    parts = []
    for kind in [*KINDS, *sorted(set(counts) - set(KINDS))]:
        outcomes = counts.get(kind)
        if outcomes:
            said = ", ".join(f"{outcomes[o]} {o}" for o in (HIT, MISS, REBUILT) if outcomes.get(o))
            parts.append(f"{printable(kind)} {said}")
    return "result cache: " + "; ".join(parts)
