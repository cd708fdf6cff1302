"""The module coverage table: one row per swept ``torch.nn`` module, a verdict per backend and step.

The module sweep (``mod-<Name>-infer``, ``mod-<Name>-train``: :mod:`conformance.cases.modules`)
asks one question per module: is the harness exact on it alone?  Read as the matrix, its
~270 pairs bury the answer; read as this table, each module is one line.  The report shows
it when a run holds sweep results, and ``conformance coverage DIR`` prints it as Markdown
(README's table is that output).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from conformance.api.result import Result
from conformance.util.text import printable

FAMILY = "modules"
STEPS = ("infer", "train")
_CASE = re.compile(r"^mod-(?P<module>.+)-(?P<step>infer|train)$")


@dataclass
class CoverageRow:
    module: str
    #: backend -> step ("infer" | "train") -> the pair's result
    cells: dict[str, dict[str, Result]] = field(default_factory=dict)


@dataclass
class Coverage:
    backends: list[str]
    rows: list[CoverageRow]

    def summary(self, backend: str) -> tuple[int, int]:
        """(modules with every step as expected, modules run) on ``backend``."""
        run = [r for r in self.rows if backend in r.cells]
        return sum(all(res.ok for res in r.cells[backend].values()) for r in run), len(run)


def coverage(results: Iterable[Result]) -> Coverage | None:
    """The sweep's results as a table (pure); ``None`` when no sweep case was run."""
    rows: dict[str, CoverageRow] = {}
    backends: list[str] = []
    for r in results:
        m = _CASE.match(r.case)
        if r.family != FAMILY or m is None:
            continue
        row = rows.setdefault(m["module"], CoverageRow(m["module"]))
        row.cells.setdefault(r.backend, {})[m["step"]] = r
        if r.backend not in backends:
            backends.append(r.backend)
    if not rows:
        return None
    return Coverage(backends, [rows[k] for k in sorted(rows, key=str.lower)])


def markdown(table: Coverage) -> str:
    """The table as Markdown: a cell is ``infer / train`` verdicts (``-`` where a step is not run)."""
    lines = ["| module | " + " | ".join(printable(b) for b in table.backends) + " |",
             "| --- |" + " --- |" * len(table.backends)]
    for row in table.rows:
        cells = []
        for backend in table.backends:
            steps = row.cells.get(backend, {})
            cells.append(" / ".join(str(steps[s].status) if s in steps else "-" for s in STEPS))
        lines.append(f"| `{printable(row.module)}` | " + " | ".join(cells) + " |")
    totals = ", ".join(f"{printable(b)}: {ok} of {n} modules as expected"
                       for b in table.backends for ok, n in [table.summary(b)])
    return "\n".join([*lines, "", totals])
