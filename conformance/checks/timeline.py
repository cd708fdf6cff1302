"""Does a measured allocation timeline follow a model's timeline exactly?

Used for the program model (:mod:`conformance.models.program`): on an allocator that
reports every allocation and free (torch's CPU allocator does), what a generated
program allocates, and when it frees it, is fully determined by the program.  The
comparison aligns the measured allocations with the model's storages in order of
allocation, by size, and then checks that at every allocation the same storages
are alive in both.  Allocations an opaque op makes and frees inside its own call
(a fallback op's eager implementation, an extern kernel's workspace) are the op's
business, not the program's: they are set apart and reported, not compared.
"""

from __future__ import annotations

import bisect
import difflib
from dataclasses import dataclass, field
from typing import Any

from conformance.models.lifetime import LifetimeModel, Storage
from conformance.models.lifetime.accumulate import COPY_OP, in_engine_order
from conformance.probes.cpu import Allocation, MemoryTrace


@dataclass
class TimelineDiff:
    """Where a measured timeline departs from the model's (empty lists: it follows it exactly)."""

    matched: list[tuple[Storage, Allocation]] = field(default_factory=list)
    unmodelled: list[Allocation] = field(default_factory=list)  # measured, not in the model
    missing: list[Storage] = field(default_factory=list)  # in the model, not measured
    freed_late: list[tuple[Storage, Allocation, Allocation]] = field(default_factory=list)  # (s, a, at)
    freed_early: list[tuple[Storage, Allocation, Allocation]] = field(default_factory=list)
    #: freed after a storage the program frees later (s, a, the one freed before it)
    out_of_order: list[tuple[Storage, Allocation, Allocation]] = field(default_factory=list)
    op_transients: list[Allocation] = field(default_factory=list)
    measured_peak: int = 0  # without the ops' own transients
    model_peak: int = 0

    @property
    def exact(self) -> bool:
        return not (self.unmodelled or self.missing or self.freed_late or self.freed_early or self.out_of_order)

    def excess_bytes(self) -> int:
        late = [s for s, _, _ in (*self.freed_late, *self.out_of_order)]
        return max(self.measured_peak - self.model_peak, 0) + sum(a.nbytes for a in self.unmodelled) + sum(
            s.nbytes for s in late)

    def blamed(self, model: LifetimeModel, limit: int = 10) -> list[dict[str, Any]]:
        """The allocations that explain the difference, largest first."""
        out: list[dict[str, Any]] = []
        for a in self.unmodelled:
            out.append({"producer": a.label or a.op or "?", "op": a.op, "bytes": a.nbytes, "shape": None,
                        "finding": "unmodelled-allocation", "model_death": "not in the program",
                        "measured_death": "freed" if a.t_free is not None else "still alive after the step"})
        for s, _, at in self.freed_late:
            entry = s.describe()
            entry.update({"finding": "freed-later-than-program",
                          "model_death": _death(model, s),
                          "measured_death": f"still alive at the allocation of {at.nbytes} B ({at.op or '?'})"})
            out.append(entry)
        for s, _, before in self.out_of_order:
            entry = s.describe()
            entry.update({"finding": "freed-later-than-program", "model_death": _death(model, s),
                          "measured_death": f"freed after a {before.nbytes} B buffer the program frees later "
                                            "(something outside the program held it)"})
            out.append(entry)
        for s, _, at in self.freed_early:
            entry = s.describe()
            entry.update({"finding": "freed-earlier-than-program", "model_death": _death(model, s),
                          "measured_death": f"already freed at the allocation of {at.nbytes} B ({at.op or '?'})"})
            out.append(entry)
        for s in self.missing:
            entry = s.describe()
            entry.update({"finding": "modelled-not-measured", "model_death": _death(model, s),
                          "measured_death": "never allocated"})
            out.append(entry)
        out.sort(key=lambda e: -int(e.get("bytes") or 0))
        return out[:limit]

    def sentence(self) -> str:
        parts = []
        if self.unmodelled:
            parts.append("allocations the program does not make: " + ", ".join(
                f"{a.nbytes} B ({a.op or '?'})" for a in self.unmodelled[:3]))
        if self.missing:
            parts.append("program allocations never measured: " + ", ".join(
                f"{_name(s)} ({s.nbytes} B)" for s in self.missing[:3]))
        if self.freed_late:
            parts.append("freed later than the program frees them: " + ", ".join(
                f"{_name(s)} ({s.nbytes} B)" for s, _, _ in self.freed_late[:3]))
        if self.out_of_order:
            parts.append("freed after buffers the program frees later: " + ", ".join(
                f"{_name(s)} ({s.nbytes} B)" for s, _, _ in self.out_of_order[:3]))
        if self.freed_early:
            parts.append("freed earlier than the program frees them: " + ", ".join(
                f"{_name(s)} ({s.nbytes} B)" for s, _, _ in self.freed_early[:3]))
        return "; ".join(parts)


def _name(s: Storage) -> str:
    return s.producer.split(":")[-1]


def _death(model: LifetimeModel, s: Storage) -> str:
    if s.death is None:
        return "outlives the step"
    return f"after {model.events[s.death]}" if 0 <= s.death < len(model.events) else f"after event {s.death}"


def modelled_storages(model: LifetimeModel) -> list[Storage]:
    """The storages a step allocates, in the order the model allocates them."""
    return sorted((s for s in model.storages if s.nbytes and s.role != "caller" and s.birth >= 0),
                  key=lambda s: (s.birth, s.sid))


def compare(model: LifetimeModel, trace: MemoryTrace) -> TimelineDiff:
    """Align ``trace`` with ``model`` and say where they differ (pure)."""
    diff = TimelineDiff(model_peak=model.peak_bytes)
    allocations: list[Allocation] = []
    for a in trace.allocations:
        (diff.op_transients if a.transient_in else allocations).append(a)
    diff.measured_peak = _peak(allocations)
    matched, missing, unmodelled = _match(model, allocations)
    engine = in_engine_order(model, _engine_order(model, matched))
    if engine is not model:
        matched, missing, unmodelled = _match(engine, allocations)
    diff.matched, diff.missing, diff.unmodelled = matched, missing, unmodelled
    _free_order(diff)
    return diff


def _match(model: LifetimeModel, allocations: list[Allocation]
           ) -> tuple[list[tuple[Storage, Allocation]], list[Storage], list[Allocation]]:
    """The model's storages aligned with the measured allocations, in order of allocation, by size."""
    storages = _in_measured_order(modelled_storages(model), allocations)
    matched: list[tuple[Storage, Allocation]] = []
    missing: list[Storage] = []
    unmodelled: list[Allocation] = []
    matcher = difflib.SequenceMatcher(None, [s.nbytes for s in storages], [a.nbytes for a in allocations],
                                      autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            matched.extend(zip(storages[i1:i2], allocations[j1:j2]))
        else:
            missing.extend(storages[i1:i2])
            unmodelled.extend(allocations[j1:j2])
    return matched, missing, unmodelled


def _engine_order(model: LifetimeModel, matched: list[tuple[Storage, Allocation]]) -> list[Storage]:
    """The model's ``AccumulateGrad`` copies in the order the engine made them (its ready queue's, which
    no program says): each copy's original is freed as soon as the copy is made, so the copies go in
    the order their originals were measured to be freed (a copy whose original was not matched: last)."""
    copies = [s for s in model.storages if s.op == COPY_OP]
    if len(copies) < 2:
        return copies
    freed = {id(s): a.order_free for s, a in matched if a.order_free is not None}
    late = 1 << 62

    by_sid = {s.sid: s for s in model.storages}

    def when(copy: Storage) -> int:
        original = by_sid.get(copy.copy_of) if copy.copy_of is not None else None
        return freed.get(id(original), late) if original is not None else late

    return sorted(copies, key=lambda c: (when(c), c.birth))


def _in_measured_order(storages: list[Storage], allocations: list[Allocation]) -> list[Storage]:
    """``storages`` with those born at one event (the results of one op) in the order the op
    allocated them: the order of a kernel's own results is the kernel's business, not the
    program's (``convolution_backward`` allocates its bias gradient before its weight gradient).

    Each storage claims the first unclaimed measured allocation of its size from where the
    previous event's claims reached; a group is ordered by its claims (unclaimed last)."""
    unclaimed: dict[int, list[int]] = {}
    for j, a in enumerate(allocations):
        unclaimed.setdefault(a.nbytes, []).append(j)
    ordered: list[Storage] = []
    cursor = 0
    i = 0
    while i < len(storages):
        group = [storages[i]]
        while i + len(group) < len(storages) and storages[i + len(group)].birth == group[0].birth:
            group.append(storages[i + len(group)])
        claims: list[tuple[float, int, Storage]] = []
        for k, s in enumerate(group):
            positions = unclaimed.get(s.nbytes, [])
            at = bisect.bisect_left(positions, cursor)
            claim: float = positions.pop(at) if at < len(positions) else float("inf")
            claims.append((claim, k, s))
        claims.sort(key=lambda c: (c[0], c[1]))
        ordered.extend(s for _, _, s in claims)
        reached = [int(c) for c, _, _ in claims if c != float("inf")]
        if reached:
            cursor = max(cursor, min(reached))
        i += len(group)
    return ordered


def _peak(allocations: list[Allocation]) -> int:
    points = sorted([(a.t_alloc, 1, a.nbytes) for a in allocations]
                    + [(a.t_free, 0, -a.nbytes) for a in allocations if a.t_free is not None])
    live = peak = 0
    for _, _, delta in points:
        live += delta
        peak = max(peak, live)
    return peak


def _free_order(diff: TimelineDiff) -> None:
    """At each matched allocation, the matched storages alive must be the same in model and measurement.

    For each storage, the first later allocation at which it is dead must be the same one in
    both; a storage still alive there in the measurement was freed later than the program
    frees it (named at that allocation), one dead earlier was freed earlier.  A storage is alive at
    its own allocation: one the model frees before any event closes after its birth (``death ==
    birth - 1``: it lives through no event, as the tangent of a backward that runs no op does) is
    dead from the next allocation on.  O(n log n)."""
    pairs = diff.matched
    births = [s.birth for s, _ in pairs]
    allocated = [a.order_alloc for _, a in pairs]
    for i, (s, a) in enumerate(pairs):
        model_pos = len(pairs) if s.death is None else max(bisect.bisect_right(births, s.death), i + 1)
        measured_pos = len(pairs) if a.order_free is None else bisect.bisect_left(allocated, a.order_free)
        if measured_pos > model_pos:
            diff.freed_late.append((s, a, pairs[model_pos][1]))
        elif measured_pos < model_pos:
            diff.freed_early.append((s, a, pairs[measured_pos][1]))
    _free_sequence(diff)


def _free_sequence(diff: TimelineDiff) -> None:
    """Frees after the last allocation are ordered by nothing above: hold them to the program's order
    of deaths instead.  Taken in measured order, the deaths must not go back; the storages outside the
    longest run that does not (fewest out of place) were freed later than the program frees them."""
    known = {id(s) for s, _, _ in diff.freed_late} | {id(s) for s, _, _ in diff.freed_early}
    freed = sorted(((a.order_free, s, a) for s, a in diff.matched
                    if a.order_free is not None and s.death is not None), key=lambda x: x[0])
    keep = _longest_non_decreasing([s.death for _, s, _ in freed])  # type: ignore[misc]
    for i, (_, s, a) in enumerate(freed):
        if i in keep or id(s) in known:
            continue
        before = next((freed[j][2] for j in range(i - 1, -1, -1) if j in keep), a)
        diff.out_of_order.append((s, a, before))


def _longest_non_decreasing(values: list[int]) -> set[int]:
    """Indices of one longest non-decreasing subsequence (patience sorting, O(n log n))."""
    tails: list[int] = []  # tails[k]: index ending the best subsequence of length k + 1
    tail_values: list[int] = []
    previous = [-1] * len(values)
    for i, v in enumerate(values):
        k = bisect.bisect_right(tail_values, v)
        if k:
            previous[i] = tails[k - 1]
        if k == len(tails):
            tails.append(i)
            tail_values.append(v)
        else:
            tails[k] = i
            tail_values[k] = v
    chosen: set[int] = set()
    i = tails[-1] if tails else -1
    while i != -1:
        chosen.add(i)
        i = previous[i]
    return chosen
