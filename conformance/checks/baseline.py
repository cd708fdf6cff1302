"""Comparing a run with an earlier one: a baseline that fails memory growth, and ``conformance diff``.

A baseline is a results directory (the last nightly, or the same matrix on another
torch version).  ``conformance run --baseline DIR`` adds a ``baseline`` check to every
pair present in both: its measured peak and residual may not grow beyond the stated
tolerance (by default not at all: the CPU allocator measures bytes exactly, so any
growth is a change in what the backend does).  ``conformance diff A B`` prints what
changed per pair: status, peak, residual, compile and run time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.api.result import MemoryFigures, Result
from conformance.api.verdict import Check, CheckName, Contract, Status, combine, passed
from conformance.util.text import printable


class BaselineError(ValueError):
    """A baseline that cannot be read, or a tolerance that does not parse."""


@dataclass(frozen=True)
class Tolerance:
    """Allowed growth: an absolute number of bytes, or a fraction of the baseline's figure."""

    bytes: int = 0
    fraction: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Tolerance:
        """``0`` (default), ``4096`` (bytes) or ``5%``."""
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*", text or "0")
        if not m:
            raise BaselineError(f"baseline tolerance {text!r}: give bytes (e.g. 4096) or a percentage (e.g. 5%)")
        value, percent = float(m.group(1)), m.group(2)
        return cls(fraction=value / 100) if percent else cls(bytes=int(value))

    def allows(self, before: int, after: int) -> bool:
        return after - before <= max(self.bytes, self.fraction * before)

    def describe(self) -> str:
        return f"{self.fraction:.1%}" if self.fraction else f"{self.bytes} B"


def load_baseline(path: Path) -> dict[tuple[str, str], Result]:
    """The results of an earlier run, by (case, backend); a file without one record, or with a line the
    results reader refuses (a figure beyond 64 bits among them), is refused naming it."""
    results = path / "results.jsonl" if path.is_dir() else path
    if not results.is_file():
        raise BaselineError(f"baseline {path}: no results.jsonl there")
    try:
        from conformance.output.records import read_results  # the results schema: only where results are read

        found = read_results(results)
    except (OSError, ValueError) as exc:
        raise BaselineError(f"baseline {path}: {exc}") from exc
    if not found:  # compared against nothing, every pair would pass its baseline check unseen
        raise BaselineError(f"baseline {path}: {results} holds no result records; nothing to compare against")
    return {(r.case, r.backend): r for r in found}


def _figures(result: Result) -> tuple[int | None, int | None]:
    m = result.memory or MemoryFigures()
    return m.measured_peak_bytes, m.measured_residual_bytes


def _domain(result: Result) -> str | None:
    return result.memory.domain if result.memory is not None else None


def baseline_check(result: Result, before: Result | None, tolerance: Tolerance, source: str) -> Check | None:
    """The ``baseline`` check of a pair against its earlier result (``None`` when nothing to compare)."""
    if before is None:
        return None
    peak, residual = _figures(result)
    old_peak, old_residual = _figures(before)
    if None in (peak, old_peak) or _domain(before) != _domain(result):
        return None
    assert peak is not None and old_peak is not None
    figures: dict[str, Any] = {"baseline": source, "tolerance": tolerance.describe(),
                               "peak_before": old_peak, "peak_after": peak,
                               "residual_before": old_residual, "residual_after": residual,
                               "status_before": str(before.status)}
    if residual is not None and old_residual is not None and not tolerance.allows(old_residual, residual):
        contract = _growth("residual", old_residual, residual, tolerance)
        return Check(CheckName.BASELINE, Status.FAIL_RESIDUAL,
                     f"residual grew {residual - old_residual:+d} B since the baseline ({old_residual} -> "
                     f"{residual} B, tolerance {tolerance.describe()}; {source})", figures, [],
                     contract.excess_bytes, contract)
    if not tolerance.allows(old_peak, peak):
        contract = _growth("measured peak", old_peak, peak, tolerance)
        return Check(CheckName.BASELINE, Status.FAIL_PEAK,
                     f"measured peak grew {peak - old_peak:+d} B since the baseline ({old_peak} -> {peak} B, "
                     f"tolerance {tolerance.describe()}; {source})", figures, [], contract.excess_bytes, contract)
    return passed(CheckName.BASELINE, **figures)


def _growth(what: str, before: int, after: int, tolerance: Tolerance) -> Contract:
    """A figure's growth since the baseline held to the tolerance (what :meth:`Tolerance.allows` allows)."""
    allowed = math.floor(max(tolerance.bytes, tolerance.fraction * before))
    return Contract(f"{what} growth since the baseline", after - before, None, allowed,
                    f"{what} grew {after - before:+d} B since the baseline ({before} -> {after} B), "
                    f"{allowed} B allowed")


def apply_baseline(result: Result, before: Result | None, tolerance: Tolerance, source: str) -> Result:
    """Add the baseline check; a pair that passed everything else now fails on growth."""
    check = baseline_check(result, before, tolerance, source)
    if check is None:
        return result
    result.checks.append(check)
    if result.status == Status.PASS:
        deciding = combine(result.checks)
        if deciding is not None:
            result.status, result.reason, result.excess_bytes = deciding.status, deciding.reason, deciding.excess_bytes
            if result.memory is not None and deciding.contract is not None:  # the headline is the deciding check's
                result.memory.check, result.memory.contract = deciding.name.value, deciding.contract
                result.memory.blamed = []
                result.memory.blame_unexplained_bytes = deciding.contract.excess_bytes or None
                result.memory.blame_note = ("growth since the baseline names no storage: the earlier record keeps "
                                            "no allocations to set against this run's (compare their timelines)")
    return result


@dataclass(frozen=True)
class Baseline:
    """An earlier run every pair is held to (``--baseline``): its results by (case, backend), the
    growth allowed, and how the check names it (``baseline DIR``)."""

    results: Mapping[tuple[str, str], Result]
    tolerance: Tolerance
    source: str

    def apply(self, result: Result) -> Result:
        """:func:`apply_baseline` against this pair's earlier result (none: nothing to compare)."""
        return apply_baseline(result, self.results.get((result.case, result.backend)), self.tolerance, self.source)


# --------------------------------------------------------------------------- diff


@dataclass(frozen=True)
class PairChange:
    case: str
    backend: str
    status: tuple[str | None, str | None]
    peak: tuple[int | None, int | None]
    residual: tuple[int | None, int | None]
    compile_s: tuple[float | None, float | None]
    run_s: tuple[float | None, float | None]

    @property
    def changed(self) -> bool:
        return self.status[0] != self.status[1] or self.peak[0] != self.peak[1] or self.residual[0] != self.residual[1]


def diff(before: Iterable[Result], after: Iterable[Result]) -> list[PairChange]:
    """Every pair of either run, with its figures before and after (pure)."""
    a = {(r.case, r.backend): r for r in before}
    b = {(r.case, r.backend): r for r in after}
    changes = []
    for key in sorted(a.keys() | b.keys()):
        x, y = a.get(key), b.get(key)

        def pick(r: Result | None, f: str) -> Any:
            if r is None:
                return None
            if f == "status":
                return str(r.raw_status or r.status)
            if f in ("compile_s", "run_s"):
                return r.timing.get(f)
            return getattr(r.memory, f) if r.memory is not None else None

        changes.append(PairChange(key[0], key[1], (pick(x, "status"), pick(y, "status")),
                                  (pick(x, "measured_peak_bytes"), pick(y, "measured_peak_bytes")),
                                  (pick(x, "measured_residual_bytes"), pick(y, "measured_residual_bytes")),
                                  (pick(x, "compile_s"), pick(y, "compile_s")), (pick(x, "run_s"), pick(y, "run_s"))))
    return changes


def _delta(pair: tuple[int | None, int | None]) -> str:
    x, y = pair
    if x is None or y is None:
        return f"{x if x is not None else '-'} -> {y if y is not None else '-'}"
    return f"{x} -> {y} ({y - x:+d})" if x != y else f"{x}"


def _seconds(pair: tuple[float | None, float | None]) -> str:
    x, y = pair
    return f"{x:.2f} -> {y:.2f}" if x is not None and y is not None else "-"


def format_diff(changes: Sequence[PairChange], show_all: bool = False) -> list[str]:
    """One line per pair that changed (every pair with ``show_all``), then a count."""
    lines = []
    for c in changes:
        if not (show_all or c.changed):
            continue
        status = c.status[1] if c.status[0] == c.status[1] else f"{c.status[0] or '-'} -> {c.status[1] or '-'}"
        lines.append(f"{c.case}@{c.backend}: {status}; peak {_delta(c.peak)} B; residual {_delta(c.residual)} B; "
                     f"compile {_seconds(c.compile_s)} s; run {_seconds(c.run_s)} s")
    changed = sum(c.changed for c in changes)
    lines.append(f"{changed} of {len(changes)} pairs changed (status, peak or residual)")
    return lines


def main_diff(a: Path, b: Path, show_all: bool = False) -> int:
    before, after = load_baseline(a), load_baseline(b)
    for line in format_diff(diff(before.values(), after.values()), show_all):
        print(printable(line))
    return 0
