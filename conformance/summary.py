"""The terminal summary: a Rich table of verdicts per backend, and what went wrong."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from conformance.result import STATUSES, Result

STYLE = {
    "pass": "green", "xfail": "yellow", "skip": "dim", "xpass": "red", "fail-compile": "red",
    "fail-run": "red", "fail-parity": "red", "fail-peak": "red", "fail-residual": "red",
    "crash": "red bold", "timeout": "red bold",
}


def summary_table(results: list[Result], wall_s: float, path: Path, warnings: list[str] = ()) -> None:  # type: ignore[assignment]
    console = Console(stderr=True, width=max(120, Console(stderr=True).width))
    backends = sorted({r.backend for r in results})
    table = Table(title=f"conformance: {len(results)} verdicts in {wall_s:.0f}s")
    table.add_column("backend")
    used = [s for s in STATUSES if any(r.status == s for r in results)]
    for s in used:
        table.add_column(s, justify="right", style=STYLE.get(s, ""))
    table.add_column("as expected", justify="right")
    for b in backends:
        rs = [r for r in results if r.backend == b]
        counts = Counter(r.status for r in rs)
        ok = sum(r.ok for r in rs)
        table.add_row(b, *(str(counts.get(s, "")) for s in used), f"{ok}/{len(rs)}")
    console.print(table)
    bad = [r for r in results if not r.ok]
    for r in bad:
        console.print(f"[red]{r.status}[/red] {r.case}@{r.backend}: {r.reason}")
        console.print(f"    repro: {r.repro}")
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    console.print(f"results: {path}" + (f"  ({len(bad)} unexpected)" if bad else "  (all as expected)"))
