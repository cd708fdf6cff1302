"""The coverage tables: the module sweep's (a row per ``torch.nn`` module, a verdict per backend and step)
and the op sweep's (op x backend x {inference, training}, with the short reason of a non-pass).

The module sweep (``mod-<Name>-infer``, ``mod-<Name>-train``: :mod:`conformance.cases.modules`)
asks one question per module: is the harness exact on it alone?  Read as the matrix, its
~270 pairs bury the answer; read as this table, each module is one line.  The report shows
it when a run holds sweep results, and ``conformance coverage DIR`` prints it as Markdown
(docs/module-coverage.md's table is that output).  The op table is printed the same way, and the report
shows it with a filter (:func:`conformance.output.report.op_lines` builds its lines from :func:`op_cell`).
"""

from __future__ import annotations

import functools
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


#: a cell's mark for a case this run did not run, told apart from one the sweep does not have
NOT_RUN = "not run"
NO_SUCH = "-"
LEGEND = (f"`{NOT_RUN}`: the sweep has this case, this run did not run it (another shard's, or not selected); "
          f"`{NO_SUCH}`: the sweep has no such case (no training step: the op or module has no autograd, or no "
          "such sample)")


def _absent(case_id: str, swept: set[str] | None) -> str:
    """The mark of a step without a result: not run here, or no such case (``-`` where the sweep is unknown)."""
    return NOT_RUN if swept is not None and case_id in swept else NO_SUCH


def markdown(table: Coverage, swept: set[str] | None = None) -> str:
    """The table as Markdown: a cell is ``infer / train`` verdicts; where a step has none, ``not run`` when
    ``swept`` (every id of the module sweep) has it, ``-`` when not; then how many modules ran of the sweep's."""
    lines = ["| module | " + " | ".join(printable(b) for b in table.backends) + " |",
             "| --- |" + " --- |" * len(table.backends)]
    for row in table.rows:
        cells = []
        for backend in table.backends:
            steps = row.cells.get(backend, {})
            cells.append(" / ".join(str(steps[s].status) if s in steps else _absent(f"mod-{row.module}-{s}", swept)
                                    for s in STEPS))
        lines.append(f"| `{printable(row.module)}` | " + " | ".join(cells) + " |")
    totals = ", ".join(f"{printable(b)}: {ok} of {n} modules as expected"
                       for b in table.backends for ok, n in [table.summary(b)])
    if swept is None:
        return "\n".join([*lines, "", totals])
    modules = {m["module"] for i in swept if (m := _CASE.match(i)) is not None}
    return "\n".join([*lines, "", LEGEND, "", f"{len(table.rows)} of the sweep's {len(modules)} modules run.",
                      totals])


# --- the op sweep (op-<key>-<k>[-<dtype>]-{infer,train}: conformance.cases.ops) ---

OP_FAMILY = "ops"
#: an op case's id; a dtype part (``op-add-0-float64-infer``) names a case in another dtype than float32
_OP_CASE = re.compile(r"^op-(?P<op>.+)-(?P<k>\d+)(?:-(?P<dtype>b?float\d+))?-(?P<step>infer|train)$")
REASON_CHARS = 100


@dataclass
class OpRow:
    op: str  # the op's key, and its dtype where not float32: ``add [float64]``, a row of its own
    #: backend -> step -> the pairs of its samples, in sample order
    cells: dict[str, dict[str, list[Result]]] = field(default_factory=dict)
    key: str = ""  # the op's key (``add``)
    dtype: str = "float32"


@dataclass
class OpCoverage:
    """op x backend x {inference, training}: the verdict of its samples and the first non-pass's reason;
    and what the sweep left out (``(label, reason)``), so the table accounts for every op."""

    backends: list[str]
    rows: list[OpRow]
    left_out: list[tuple[str, str]] = field(default_factory=list)
    #: ``(what, why)`` of the op records this torch release cannot place (another release's op, an unknown
    #: dtype, an id that is no op case's): listed, not screened
    unplaced: list[tuple[str, str]] = field(default_factory=list)
    #: every case id of the sweep in the table's dtypes (:func:`sweep_cases`; ``None``: not known), and the
    #: number of ops the whole sweep has per dtype (where it is known)
    swept: frozenset[str] | None = None
    sweep_ops: dict[str, int] = field(default_factory=dict)

    def counts(self, backend: str) -> dict[str, int]:
        """Pairs by verdict on ``backend``."""
        out: dict[str, int] = {}
        for row in self.rows:
            for results in row.cells.get(backend, {}).values():
                for r in results:
                    out[str(r.status)] = out.get(str(r.status), 0) + 1
        return dict(sorted(out.items()))

    def left_out_by_reason(self) -> list[tuple[str, int]]:
        """The left-out lines counted by reason (its parenthesised detail dropped), most first."""
        by_reason: dict[str, int] = {}
        for _, reason in self.left_out:
            short = re.sub(r" \(.*", "", reason)
            by_reason[short] = by_reason.get(short, 0) + 1
        return sorted(by_reason.items(), key=lambda kv: -kv[1])


def op_coverage(results: Iterable[Result], left_out: Iterable[tuple[str, str]] = ()) -> OpCoverage | None:
    """The op sweep's results as a table (pure); ``None`` when no op case was run."""
    rows: dict[str, OpRow] = {}
    backends: list[str] = []
    unplaced: list[tuple[str, str]] = []
    for r in sorted(results, key=lambda r: r.case):
        m = _OP_CASE.match(r.case)
        if r.family == OP_FAMILY and m is None:
            unplaced.append((f"{r.case}@{r.backend}", "its id is not op-<op>-<k>[-<dtype>]-<step>"))
        if r.family != OP_FAMILY or m is None:
            continue
        name = f"{m['op']} [{m['dtype']}]" if m["dtype"] else m["op"]
        row = rows.setdefault(name, OpRow(name, key=m["op"], dtype=m["dtype"] or "float32"))
        row.cells.setdefault(r.backend, {}).setdefault(m["step"], []).append(r)
        if r.backend not in backends:
            backends.append(r.backend)
    if not rows and not unplaced:
        return None
    return OpCoverage(backends, [rows[k] for k in sorted(rows, key=str.lower)], list(left_out), unplaced)


def short_reason(result: Result) -> str:
    """A non-pass's reason on one line, cut to :data:`REASON_CHARS` (the cause where the run gave one)."""
    text = " ".join((result.reason or result.cause or "").split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def op_cell(results: list[Result]) -> tuple[str, str]:
    """The samples' verdicts (one word where they agree) and the first non-pass's short reason: a cell of the
    table, in Markdown and in the report alike."""
    statuses = [str(r.status) for r in results]
    verdict = statuses[0] if len(set(statuses)) == 1 else "/".join(statuses)
    first = next((r for r in results if not r.ok or str(r.status) != "pass"), None)
    return verdict, short_reason(first) if first is not None else ""


def _cell(results: list[Result]) -> str:
    verdict, reason = op_cell(results)
    return f"{verdict}: {reason}" if reason else verdict


def _md(text: str) -> str:
    return printable(text).replace("|", "\\|")


def op_markdown(table: OpCoverage) -> str:
    """The table as Markdown: one line per op and backend, a column per step (``-``: not run), then the
    verdict counts per backend and what was left out, counted by reason and listed."""
    lines = ["| op | backend | inference | training |", "| --- | --- | --- | --- |"]
    for row in table.rows:
        for backend in table.backends:
            steps = row.cells.get(backend)
            if steps is None:
                continue
            cells = [_md(_cell(steps[s])) if s in steps else _op_absent(table, row, s) for s in STEPS]
            lines.append(f"| `{_md(row.op)}` | {_md(backend)} | " + " | ".join(cells) + " |")
    lines += ["", *([LEGEND, ""] if table.swept is not None else []), _ops_run(table)]
    for backend in table.backends:
        counts = ", ".join(f"{n} {status}" for status, n in table.counts(backend).items())
        lines.append(f"{_md(backend)}: {counts} (pairs)")
    if table.unplaced:
        lines += ["", f"Not placed ({len(table.unplaced)}): records this torch release's op sweep cannot place", "",
                  "| op | why |", "| --- | --- |"]
        lines += [f"| `{_md(what)}` | {_md(why)} |" for what, why in table.unplaced]
    if table.left_out:
        lines += ["", f"Left out ({len(table.left_out)}), by reason:", ""]
        lines += [f"- {n}: {_md(reason)}" for reason, n in table.left_out_by_reason()]
        lines += ["", "| left out | reason |", "| --- | --- |"]
        lines += [f"| `{_md(label)}` | {_md(reason)} |" for label, reason in table.left_out]
    return "\n".join(lines)


def _op_absent(table: OpCoverage, row: OpRow, step: str) -> str:
    """A step without results: ``not run`` where the sweep has a case of it, ``-`` where it has none."""
    if table.swept is None:
        return NO_SUCH
    return NOT_RUN if (row.key, row.dtype, step) in _op_steps(table.swept) else NO_SUCH


@functools.cache
def _op_steps(swept: frozenset[str]) -> set[tuple[str, str, str]]:
    """(op key, dtype, step) of every op case id in ``swept``."""
    return {(m["op"], m["dtype"] or "float32", m["step"]) for i in swept if (m := _OP_CASE.match(i)) is not None}


def _ops_run(table: OpCoverage) -> str:
    """How many ops the run covered, of the whole sweep's where it is known (a shard's share of it)."""
    parts = []
    for dtype in dict.fromkeys(row.dtype for row in table.rows):
        ran = len({row.key for row in table.rows if row.dtype == dtype})
        whole = table.sweep_ops.get(dtype)
        named = "" if dtype == "float32" else f" {dtype}"
        parts.append(f"{ran} of the {whole} ops of the {dtype} sweep" if whole is not None else f"{ran}{named} ops")
    return f"{'; '.join(parts)} run."


def sweep_cases(table: OpCoverage) -> None:
    """Fill ``table.swept`` and ``table.sweep_ops`` from this torch release's screening (cached where a run here
    made it; a dtype whose whole sweep no run here screened is counted over the run's ops only)."""
    from conformance.cases import ops as op_sweep

    swept: set[str] = set()
    placed = place_rows(table)  # a row this release cannot place (another release's op, a dtype it lacks) is listed
    for dtype in dict.fromkeys(row.dtype for row in placed):
        run = sorted({row.key for row in placed if row.dtype == dtype})
        whole = dtype == "float32" or op_sweep.cache_path(dtype).is_file()
        screened = op_sweep.whole_sweep(dtype) if whole else op_sweep.sweep(run, dtype)
        swept |= {case.id for s in screened for case in s.cases}
        if whole:
            table.sweep_ops[dtype] = sum(1 for s in screened if s.cases)
    table.swept = frozenset(swept)


def sweep_left_out(table: OpCoverage, every: bool = False) -> list[tuple[str, str]]:
    """What this torch release's sweep leaves out of the table's ops (of every op with ``every``), as
    ``(label, reason)``: from the screening a run here cached, else screened now (minutes for the whole sweep).
    A row this release cannot place (:func:`place_rows`) is listed in ``table.unplaced`` instead."""
    from conformance.cases import ops as op_sweep

    placed = place_rows(table)
    found: list[tuple[str, str]] = []
    for dtype in dict.fromkeys([*(["float32"] if every else []), *(row.dtype for row in placed)]):
        run = {row.key for row in placed if row.dtype == dtype}
        # float32's screening as before; another dtype's, the run's ops only unless a run here cached it whole
        whole = dtype == "float32" or every or op_sweep.cache_path(dtype).is_file()
        screened = op_sweep.whole_sweep(dtype) if whole else op_sweep.sweep(sorted(run), dtype)
        found += [(lo.label, lo.reason) for s in screened for lo in s.left_out if every or s.key in run]
    return found


def place_rows(table: OpCoverage) -> list[OpRow]:
    """The table's rows this torch release's sweep has (op and dtype); the others go to ``table.unplaced``,
    with why (a record of another release, or another backend's dtype)."""
    from conformance.cases import ops as op_sweep

    placed = []
    for row in table.rows:
        why = op_sweep.unplaced(row.key, row.dtype)
        if why is None:
            placed.append(row)
        elif (row.op, why) not in table.unplaced:
            table.unplaced.append((row.op, why))
    return placed
