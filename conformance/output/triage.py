"""Triage: a run's failures grouped by cause, the news first.

A wide nightly run finds one backend behaviour on dozens of programs.  Grouped by case, each is
news; grouped by cause (``results.jsonl``'s ``cause_parts``, :mod:`conformance.checks.cause`) the
page says "the 12th instance of a known cause" once and puts what is new on top: a cause that
neither the run history (before this run) nor a manifest knew, then a cause with a part no
manifest entry knows.  A group of manifest-expected failures (xfail) is never "new": the
manifest knew it.

A group is one backend and one *mechanism*: a failure's primary part (``cause_parts[0]``, the
part with the largest share of the excess), whatever fused kernels, ops or sizes showed it.  A
failure with parts no manifest entry knew is grouped by those new parts instead, so news is
never folded into a known group.  No run has more groups per backend than mechanisms (and new
causes) in it.
Each group names its smallest repro (the shortest repro script written, else the pair with the
smallest modelled peak), and when the history first saw it.

``conformance triage DIR`` prints it; the HTML report shows the same groups
(:mod:`conformance.output.report`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.api.result import Result
from conformance.api.verdict import Status
from conformance.output import history as hist
from conformance.output.records import RecordsError, read_usable


@dataclass
class Group:
    """The failures of one backend that share a mechanism (their primary cause part), or a new cause."""

    backend: str
    signature: str  # the primary part (or the new parts) the group is keyed by
    parts: tuple[str, ...]  # every part seen on the group's failures, the key first
    results: list[Result] = field(default_factory=list)
    #: parts of the cause that no manifest entry knew, on any of the group's pairs
    new_parts: tuple[str, ...] = ()
    first_seen: hist.Run | None = None  # the earliest run of the history that had it
    #: news: no earlier run of the history had it, and no manifest expected it (a group of manifest
    #: xfails with no unknown part is known, however new to the history)
    new_this_run: bool = False

    @property
    def known_to_manifest(self) -> bool:
        """Every pair a manifest expected (xfail) and no part unknown to the manifests."""
        return not self.unexpected and not self.new_parts

    @property
    def count(self) -> int:
        return len(self.results)

    @property
    def expected(self) -> int:
        return sum(1 for r in self.results if r.status == Status.XFAIL)

    @property
    def unexpected(self) -> int:
        return sum(1 for r in self.results if Status.parse(r.status).is_unexpected)

    @property
    def smallest(self) -> Result:
        """The group's smallest repro: the shortest repro script written, else the smallest modelled peak."""
        return min(self.results, key=_repro_size)

    @property
    def rank(self) -> tuple[int, int, int, int, str, str]:
        """New this run first, then a cause partly unknown to the manifests, then unexpected, then by size."""
        return (not self.new_this_run, not self.new_parts, not self.unexpected, -self.count,
                self.backend, self.signature)


def _raw_status(r: Result) -> Status:
    """The backend's own verdict; a record from outside may hold any text as its ``raw_status``."""
    try:
        return Status.parse(r.raw_status or r.status)
    except ValueError:
        return Status.parse(r.status)


def _repro_size(r: Result) -> tuple[int, int, str]:
    size = 1 << 62
    if r.repro_file:
        try:
            size = Path(r.repro_file).stat().st_size
        except (OSError, ValueError):  # gone, or not a path at all (a record from outside)
            pass
    peak = r.memory.model_peak_bytes if r.memory is not None and r.memory.model_peak_bytes is not None else 1 << 62
    return size, peak, r.case


@dataclass
class Triage:
    groups: list[Group]
    pairs: int
    history: Path | None = None
    run: hist.Run | None = None  # the run these results are in the history as (None: not recorded)

    @property
    def failures(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def new_this_run(self) -> list[Group]:
        return [g for g in self.groups if g.new_this_run]

    @property
    def unexpected(self) -> list[Group]:
        """Groups with a pair no manifest expected (or a part none knows): what the run is not as expected by."""
        return [g for g in self.groups if not g.known_to_manifest]

    @property
    def expected(self) -> list[Group]:
        """Groups of manifest-expected failures only (xfails whose cause a manifest names)."""
        return [g for g in self.groups if g.known_to_manifest]


#: fills in the cause of a record written before records carried one (``conformance.checks.cause``
#: lies above this layer: the command passes it in)
CauseFiller = Callable[[Result], None]


#: joins the new parts a group of new causes is keyed by
_JOIN = " + "


#: a part that names a mechanism: ``<check>: <mechanism>``, the mechanism one kebab-case word
#: (``peak: layout-copy``); a part no recogniser knew is words with spaces
_MECHANISM_PART = re.compile(r"^[\w-]+: ([a-z0-9]+(?:-[a-z0-9]+)+)$")


def group_key(r: Result) -> str:
    """What a failure is grouped by: its new parts where it has any, else its primary part; a part
    that names a mechanism by the mechanism alone, whichever check found it."""
    if r.new_cause_parts:
        return _JOIN.join(sorted(r.new_cause_parts))
    if r.cause_parts:
        m = _MECHANISM_PART.match(r.cause_parts[0])
        return m.group(1) if m else r.cause_parts[0]
    return r.cause or f"{_raw_status(r).value}: (no cause recorded)"


def group_failures(results: Sequence[Result], fill: CauseFiller | None = None) -> list[Group]:
    """Every failing pair (expected ones included: a known cause is still a cause), by backend and
    mechanism (:func:`group_key`).  ``fill`` gives a record its cause by mechanism where it was
    written without one (or before causes named mechanisms)."""
    groups: dict[tuple[str, str], Group] = {}
    for r in results:
        raw = _raw_status(r)
        if not raw.is_failure:
            continue
        if fill is not None:
            fill(r)
        key = (r.backend, group_key(r))
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(r.backend, key[1], ())
        group.results.append(r)
        group.parts = group.parts + tuple(p for p in (r.cause_parts or [key[1]]) if p not in group.parts)
        group.new_parts = tuple(sorted(set(group.new_parts) | set(r.new_cause_parts)))
    return list(groups.values())


def triage(results: Sequence[Result], history: Path | None = None, fill: CauseFiller | None = None) -> Triage:
    """The run's failures by cause, with first sightings from ``history`` (when it exists)."""
    groups = group_failures(results, fill)
    run = hist.recorded_run(history, results) if history is not None else None
    sightings = hist.cause_sightings(history) if history is not None else {}
    order = {r.id: i for i, r in enumerate(hist.runs(history))} if history is not None else {}
    here = order.get(run.id) if run is not None else None
    for g in groups:
        # the history records each failure's whole signature: the group was seen where any of its were
        signatures = {r.cause for r in g.results if r.cause} or {g.signature}
        seen = sorted((s for sig in signatures for s in sightings.get((g.backend, sig), [])),
                      key=lambda s: order.get(s.id, -1))
        earlier = [s for s in seen if here is None or order.get(s.id, -1) < here]
        g.first_seen = seen[0] if seen else None
        g.new_this_run = not earlier and not g.known_to_manifest
    return Triage(sorted(groups, key=lambda g: g.rank), len(results), history, run)


def render_text(t: Triage, limit: int | None = None) -> list[str]:
    """The triage as terminal lines (the caller escapes them for the terminal)."""
    lines = [f"{t.pairs} pairs, {t.failures} failures in {len(t.groups)} cause group(s); "
             f"{len(t.new_this_run)} new this run"
             + ("" if t.history is not None else " (no run history: every cause no manifest expects counts as new)")]
    for g in t.groups[:limit]:
        tags = [tag for tag, on in (("NEW THIS RUN", g.new_this_run), ("UNKNOWN TO MANIFEST", bool(g.new_parts)))
                if on]
        lines.append("")
        lines.append(f"{'[' + ', '.join(tags) + '] ' if tags else ''}{g.backend}: {g.count} pair(s), "
                     f"{g.expected} expected, {g.unexpected} unexpected")
        lines.extend(f"    {p}{'   <- new' if p in g.new_parts else ''}" for p in g.parts)
        first = (f"run #{g.first_seen.id} ({g.first_seen.started_at})" if g.first_seen is not None
                 else "not in the history")
        lines.append(f"    first seen: {first}")
        small = g.smallest
        repro = small.repro_file or small.repro or "(no repro)"
        lines.append(f"    smallest repro: {small.case} -> {repro}")
        lines.append(f"    cases: {', '.join(sorted(r.case for r in g.results))}")
    if limit is not None and len(t.groups) > limit:
        lines.append(f"... {len(t.groups) - limit} more group(s)")
    return lines


def triage_dir(source: Path, history: Path | None = None, use_history: bool = True,
               fill: CauseFiller | None = None) -> tuple[Triage, list[str]]:
    """Triage of a results directory (or a ``results.jsonl``) and the warnings its bad lines gave.

    The history defaults to the directory's own ``history.sqlite`` when there is one; it is read,
    never created.  Raises :class:`RecordsError` or :class:`conformance.output.history.HistoryError`
    (one line naming the file) for input that cannot be used."""
    if not source.exists():
        raise RecordsError(f"{source}: no such results directory or file")
    path = source / "results.jsonl" if source.is_dir() else source
    loaded = read_usable(path)
    if use_history:
        history = history or hist.default_for(source)
        if history.exists():
            hist.check(history, "history")
        else:
            history = None
    else:
        history = None
    return triage(loaded.results, history, fill), loaded.warnings()
