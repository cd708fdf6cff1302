"""Naming what is responsible for a memory failure.

Measured allocations are matched to the model's storages: by the reference
executor's node range when the allocation carries one, otherwise by size in
allocation order, among the storages the probe's own record of the allocation agrees
with (a storage the model makes outside any operator, a wrapped scalar, is realised by
an allocation made outside any operator).  An allocation no storage agrees with is
never pinned on a stand-in of the same size: its blame says it could not be identified
and lists the model's storages of that size, beside what the probe saw of it (the
operator that made it, and, where the engine found them, the objects still holding it:
``held_by``).  A storage is a candidate when it is measured alive at a point
where the model says it is already dead (or the model does not know it); only
candidates that can explain the excess are blamed: the largest ones no bigger
than the excess, until they account for all of it.  A 4-byte leak does not blame
a 1 KB gradient, and a peak below the model blames nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from conformance.models.lifetime import LifetimeModel, Storage
from conformance.probes.cpu import Allocation, MemoryTrace

#: the ``op`` of a storage the model makes outside any operator (conformance.models.optimizer)
OUTSIDE_OP_STORAGE = "wrapped scalar"


def agrees(a: Allocation, s: Storage) -> bool:
    """The probe's record of ``a`` does not contradict its being ``s``: a storage the model makes outside
    any operator (a wrapped scalar) is never an allocation the probe saw an operator make."""
    return a.op is None if s.op == OUTSIDE_OP_STORAGE else True


def match(model: LifetimeModel, trace: MemoryTrace) -> dict[int, Storage]:
    """Allocation ``seq`` -> the model storage it realises (one the probe's record :func:`agrees` with)."""
    storages = [s for s in model.storages if s.role != "caller" and s.nbytes]
    matched: dict[int, Storage] = {}
    used: set[int] = set()
    by_label: dict[str, list[Storage]] = {}
    for s in storages:
        by_label.setdefault(s.producer, []).append(s)
    rest: list[Allocation] = []
    for a in trace.allocations:
        cands = [s for s in by_label.get(a.label or "", []) if s.sid not in used and s.nbytes == a.nbytes]
        if cands:
            matched[a.seq] = cands[0]
            used.add(cands[0].sid)
        else:
            rest.append(a)
    cursor = 0
    order = sorted((s for s in storages if s.sid not in used), key=lambda s: (s.birth, s.sid))
    for a in rest:
        if a.label is not None:  # made by a reference-executor node the model has no storage for
            continue
        for i in range(cursor, len(order)):
            if order[i].nbytes == a.nbytes and order[i].sid not in used and agrees(a, order[i]):
                matched[a.seq] = order[i]
                used.add(order[i].sid)
                cursor = i + 1
                break
    return matched


#: what blame says of an allocation made while no operator was running (Python-level code, a
#: runtime's own buffers): a name a reader can act on, never ``None``
OUTSIDE_OPERATORS = "(outside any operator)"


@dataclass(frozen=True)
class Blamed:
    """One storage blamed for a memory check's excess, in the manner of inductor's ``BufferInfo``: the
    measured allocation and, where blame identified it, the model's storage it realises.

    ``Check.blamed`` holds :meth:`to_json`'s form (``results.jsonl``'s ``blamed`` entries): blame
    makes these, the check writes them out."""

    bytes: int
    #: who made it, in words a reader can act on (the model's name for it, or what the probe saw)
    producer: str
    measured_op: str
    measured_death: str
    allocation: int  # the allocation's ``seq`` in the trace
    model_death: str
    identified_by: str  # "node", "size and order" or "not identified"
    held_by: tuple[str, ...] = ()  # what still holds it (found by its address)
    #: the model storage's description (:meth:`~conformance.models.lifetime.Storage.describe`); None: not in it
    storage: dict[str, Any] | None = None
    candidates: tuple[str, ...] = ()  # the model's storages of its size, where it could not be identified
    model: str | None = None  # "generated program": named by the program's own statements

    @property
    def op(self) -> str:
        return str(self.storage["op"]) if self.storage is not None else self.measured_op

    def to_json(self) -> dict[str, Any]:
        """The record's form, keys in the order results have always had them."""
        entry: dict[str, Any] = {"bytes": self.bytes, "measured_op": self.measured_op,
                                 "measured_death": self.measured_death, "allocation": self.allocation}
        if self.held_by:
            entry["held_by"] = list(self.held_by)
        if self.storage is None:
            entry.update({"producer": self.producer, "op": self.measured_op, "shape": None,
                          "model_death": self.model_death, "identified_by": self.identified_by})
            if self.candidates:
                entry["candidates"] = list(self.candidates)
            return entry
        entry["identified_by"] = self.identified_by
        entry.update(self.storage)
        entry.update(producer=self.producer, model_death=self.model_death)
        if self.model is not None:
            entry["model"] = self.model
        return entry


def _entry(a: Allocation, s: Storage | None, model: LifetimeModel, measured_death: str,
           held_by: dict[int, list[str]] | None = None) -> Blamed:
    op = a.op or OUTSIDE_OPERATORS
    holders = (held_by or {}).get(a.ptr) or []
    if s is None:
        producer = a.label or op
        candidates: tuple[str, ...] = ()
        if not a.label:
            same = sorted({t.producer for t in model.storages if t.nbytes == a.nbytes and t.role != "caller"})
            held = f", held by {', '.join(holders[:2])}" if holders else ""
            if same:  # never pinned on one of them: said as what it is, beside them
                more = f" (+{len(same) - 3} more)" if len(same) > 3 else ""
                producer = (f"{a.nbytes} B made by {op}{held}: could not identify the storage in the model; "
                            f"candidates of that size: {', '.join(same[:3])}{more}")
                candidates = tuple(same[:10])
            elif held:
                producer = f"{op}{held}"
        return Blamed(a.nbytes, producer, op, measured_death, a.seq, "not in model",
                      "node" if a.label else "not identified", tuple(holders), None, candidates)
    producer = s.producer
    if holders and not a.label:  # matched by size only: what holds the storage, beside the model's name for it
        producer = f"{s.producer} (matched by size; held by {', '.join(holders[:2])})"
    if s.death is not None:
        death = f"after {model.events[s.death]} (event {s.death})"
    elif s.role == "output":
        death = "when the caller drops the step's outputs"
    else:
        death = "outlives the step"
    return Blamed(s.nbytes, producer, op, measured_death, a.seq, death, "node" if a.label else "size and order",
                  tuple(holders), s.describe())


def blame_peak(model: LifetimeModel, trace: MemoryTrace, limit: int = 10,
               held_by: dict[int, list[str]] | None = None) -> list[Blamed]:
    """Storages alive at the measured peak that the model says were dead by then."""
    matched = match(model, trace)
    t = trace.peak_time
    live = trace.live_at(t)
    latest_birth = max((matched[a.seq].birth for a in live if a.seq in matched), default=-1)
    blamed = []
    for a in live:
        s = matched.get(a.seq)
        if s is None:
            blamed.append(_entry(a, None, model, "alive at measured peak", held_by))
        elif s.death is not None and s.death < latest_birth:
            when = model.events[latest_birth] if latest_birth >= 0 else "?"
            blamed.append(_entry(a, s, model, f"alive at measured peak (still alive at {when})", held_by))
    return explaining(blamed, trace.peak_bytes - model.peak_bytes, limit)


def explaining(candidates: list[Blamed], excess: int, limit: int = 10) -> list[Blamed]:
    """The candidates that explain ``excess`` bytes: largest first, none bigger than the excess."""
    if excess <= 0:
        return []
    chosen: list[Blamed] = []
    total = 0
    for entry in sorted(candidates, key=lambda e: -e.bytes):
        if entry.bytes > excess or total >= excess:
            continue
        chosen.append(entry)
        total += entry.bytes
    return chosen[:limit]


def blame_residual(model: LifetimeModel, trace: MemoryTrace, limit: int = 10,
                   held_by: dict[int, list[str]] | None = None) -> list[Blamed]:
    """Storages still alive after the step that the model says die within it (gradients too, where the
    model frees them: an optimizer step's ``zero_grad(set_to_none=True)``)."""
    matched = match(model, trace)
    retained = [s for s in model.storages if s.role == "retained" and s.death is None]
    blamed = []
    for a in trace.still_alive():
        s = matched.get(a.seq)
        if s is not None and s.role == "retained" and s.death is None:
            continue
        if s is None:  # a retained storage the order-matching missed?
            twin = next((r for r in retained if r.nbytes == a.nbytes), None)
            if twin is not None:
                retained.remove(twin)
                continue
        blamed.append(_entry(a, s, model, "still alive after the step", held_by))
    return explaining(blamed, trace.residual_bytes - model.residual_bytes, limit)


def blame_peak_in_program(model: LifetimeModel, program: LifetimeModel, trace: MemoryTrace,
                          program_matched: list[tuple[Storage, Allocation]], limit: int = 10) -> list[Blamed]:
    """Where the generated program was held to the measurement exactly: the buffers alive at the measured
    peak that ``model`` (the received graphs') does not hold alive there, named by the program's own
    statements (``buf3``, made at ``fw:line 40``), which a reader of the wrapper can find.

    ``program_matched``: the program's storages paired with the measured allocations that realise them
    (:func:`conformance.checks.timeline.compare`)."""
    in_graphs = match(model, trace)
    in_program = {a.seq: s for s, a in program_matched}
    live = trace.live_at(trace.peak_time)
    latest_birth = max((in_graphs[a.seq].birth for a in live if a.seq in in_graphs), default=-1)
    candidates = []
    for a in live:
        s = in_graphs.get(a.seq)
        if s is not None and (s.death is None or s.death >= latest_birth):
            continue  # the received graphs' schedule holds it alive at its peak too
        p = in_program.get(a.seq)
        if p is None:
            candidates.append(_entry(a, s, model, "alive at measured peak"))
            continue
        made = program.events[p.birth] if 0 <= p.birth < len(program.events) else "?"
        candidates.append(replace(_entry(a, p, program, "alive at measured peak"),
                                  producer=f"{p.producer.split(':')[-1]} (made at {made})", model="generated program"))
    excess = trace.peak_bytes - model.peak_bytes
    chosen = explaining(candidates, excess, limit)
    if not chosen and excess > 0 and candidates:
        # each extra buffer is larger than the excess (the graphs hold something small the program
        # does not): the smallest that alone accounts for it
        chosen = [min((c for c in candidates if c.bytes >= excess), key=lambda c: c.bytes)]
    return chosen


def share(entry: dict[str, Any]) -> int:
    """The bytes of a check's excess a blamed entry accounts for (``explains_bytes`` where the check's
    excess is not counted in plain bytes: the program check's bytes x statements)."""
    value = entry.get("explains_bytes", entry.get("bytes"))
    return int(value) if isinstance(value, int) else 0


def unexplained(blamed: list[dict[str, Any]], excess: int | None) -> int | None:
    """The excess less what the blamed entries account for (negative: they hold more than the excess);
    None where they add up to it exactly."""
    if excess is None:
        return None
    rest = excess - sum(share(b) for b in blamed)
    return rest or None


def invocation_breakdown(invocations: list[dict[str, int]], domain: str, short: bool = False) -> str:
    """What a runtime's own domain allocated at its peak, from its per-invocation figures (IREE's HAL
    ``iree_invocations``: live bytes before each call of the compiled program, its peak rise, live bytes
    after it): the results the call left allocated and the transients and input copies it freed by its
    end, with their sizes.  A runtime's statistics do not split one call's allocations further, so this
    is what names the bytes where no single allocation can be told apart; ``""`` without figures.
    ``short``: the few words a verdict's reason carries."""
    if not invocations:
        return ""
    k, top = max(enumerate(invocations), key=lambda kv: kv[1]["live_before"] + kv[1]["peak_rise"])
    kept = max(0, top["live_after"] - top["live_before"])
    freed = max(0, top["peak_rise"] - kept)
    if short:  # for a verdict's reason
        return (f"{domain} call {k + 1}/{len(invocations)}: {kept} B of results, "
                f"{freed} B of transients and input copies")
    return (f"in {domain}, the compiled program's call {k + 1} of {len(invocations)} reached its peak, "
            f"{top['peak_rise']} B above the {top['live_before']} B live before it: {kept} B of results it left "
            f"allocated, {freed} B of transients and input copies it freed by its end (the runtime's statistics "
            f"do not split one call's allocations further)")
