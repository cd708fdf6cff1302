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

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from conformance.checks.facts import (
    NOT_IN_MODEL,
    CallTransients,
    ProgramBuffer,
    Release,
    ResultPack,
    SharedResultBuffer,
    death_sentence,
    made_at_sentence,
    result_pack_sentence,
    share,
    shared_buffer_sentence,
    transients_sentence,
)
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
    #: the buffer as the generated program names it (typed: what the mechanisms read, never ``producer``)
    program_buffer: ProgramBuffer | None = None
    #: the program statement after which the model frees it, where the model is a program's
    released_by: Release | None = None

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
        for fact in (self.program_buffer, self.released_by):
            if fact is not None:
                entry[fact.KEY] = fact.to_json()
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
        return Blamed(a.nbytes, producer, op, measured_death, a.seq, NOT_IN_MODEL,
                      "node" if a.label else "not identified", tuple(holders), None, candidates)
    producer = s.producer
    if holders and not a.label:  # matched by size only: what holds the storage, beside the model's name for it
        producer = f"{s.producer} (matched by size; held by {', '.join(holders[:2])})"
    released = None
    if s.death is not None:
        death = death_sentence(model.events[s.death], s.death)
        released = Release.at(model.events[s.death])
    elif s.role == "output":
        death = "when the caller drops the step's outputs"
    else:
        death = "outlives the step"
    return Blamed(s.nbytes, producer, op, measured_death, a.seq, death, "node" if a.label else "size and order",
                  tuple(holders), s.describe(), released_by=released)


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


_Entry = TypeVar("_Entry", "Blamed", dict[str, Any])


def _bytes_of(entry: Blamed | dict[str, Any]) -> int:
    return int(entry["bytes"]) if isinstance(entry, dict) else entry.bytes


def explaining(candidates: Sequence[_Entry], excess: int, limit: int = 10) -> list[_Entry]:
    """The candidates that explain ``excess`` bytes: largest first, none bigger than the excess (blame's own
    entries, or a runtime's buffers in their record form)."""
    if excess <= 0:
        return []
    chosen: list[_Entry] = []
    total = 0
    for entry in sorted(candidates, key=lambda e: -_bytes_of(e)):
        if _bytes_of(entry) > excess or total >= excess:
            continue
        chosen.append(entry)
        total += _bytes_of(entry)
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
    certain = []  # buffers the graphs hold no storage for (Storage.copy_of_input), whatever size and order say
    for a in live:
        p = in_program.get(a.seq)
        if p is not None and p.copy_of_input:
            made = program.events[p.birth] if 0 <= p.birth < len(program.events) else "?"
            held = f"alive at measured peak (the graphs save their input {p.copy_of_input} itself)"
            certain.append(replace(_entry(a, p, program, held), model="generated program",
                                   **_named_by_program(p, made)))
            continue
        s = in_graphs.get(a.seq)
        if s is not None and (s.death is None or s.death >= latest_birth):
            continue  # the received graphs' schedule holds it alive at its peak too
        p = in_program.get(a.seq)
        if p is None:
            candidates.append(_entry(a, s, model, "alive at measured peak"))
            continue
        made = program.events[p.birth] if 0 <= p.birth < len(program.events) else "?"
        candidates.append(replace(_entry(a, p, program, "alive at measured peak"), model="generated program",
                                  **_named_by_program(p, made)))
    excess = trace.peak_bytes - model.peak_bytes
    if certain:  # extra bytes by the program's own correspondence: named first, even beyond the excess (an offset)
        return (certain + explaining(candidates, excess - sum(c.bytes for c in certain), limit))[:limit]
    chosen = explaining(candidates, excess, limit)
    if not chosen and excess > 0 and candidates:
        # each extra buffer is larger than the excess (the graphs hold something small the program
        # does not): the smallest that alone accounts for it
        chosen = [min((c for c in candidates if c.bytes >= excess), key=lambda c: c.bytes)]
    return chosen


def _named_by_program(p: Storage, made: str) -> dict[str, Any]:
    """A program storage's name and the statement that made it (``made``: its event label), as the typed fact and
    the sentence a reader sees."""
    name = p.producer.split(":")[-1]
    return {"producer": made_at_sentence(name, made), "program_buffer": ProgramBuffer.made_at(name, made)}


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


def _call_events(model: LifetimeModel, prefix: str) -> range:
    """The model's events of one graph call (``fw:``, ``bw:``; ``""``: all of them)."""
    if not prefix:
        return range(len(model.events))
    idx = [i for i, e in enumerate(model.events) if e.startswith(prefix)]
    return range(idx[0], idx[-1] + 1) if idx else range(0)


def _prefix(label: str | None) -> str:
    return label.split(":", 1)[0] + ":" if label and ":" in label else ""


def _result_name(k: int, n: int, j: int, r: dict[str, Any]) -> str:
    what = r.get("label") or f"result {j}"
    return f"iree-hal call {k + 1}/{n} result {what} ({list(r.get('shape') or [])} {r.get('dtype', '?')})"


def _model_death(s: Storage | None, model: LifetimeModel) -> str:
    if s is None:
        return NOT_IN_MODEL
    if s.death is None:
        return "outlives the step" if s.role != "output" else "when the caller drops the step's outputs"
    return death_sentence(model.events[s.death], s.death)


def _runtime_entry(nbytes: int, producer: str, measured: str, model_death: str) -> dict[str, Any]:
    return {"bytes": nbytes, "producer": producer, "measured_death": measured, "model_death": model_death,
            "identified_by": "runtime call's buffers"}


def _explaining_or_smallest(candidates: list[dict[str, Any]], excess: int) -> list[dict[str, Any]]:
    """:func:`explaining` where it names the whole excess, else the smallest candidate that alone accounts
    for it (a buffer over the model's schedule of its call by more than the peak-to-peak excess: the model's
    own peak was elsewhere), else what :func:`explaining` named."""
    chosen = explaining(candidates, excess)
    if sum(c["bytes"] for c in chosen) < excess:
        over = [c for c in candidates if c["bytes"] >= excess]
        chosen = [min(over, key=lambda c: c["bytes"])] if over else chosen
    return chosen


#: the alignment of the slots a runtime packs a call's results at (IREE: its stream resources' 64 B)
PACK_ALIGNMENT = 64


def _slot_bytes(sizes: Sequence[int], alignment: int = PACK_ALIGNMENT) -> int:
    """The bytes a call's results take packed in one allocation: each in a slot rounded up to ``alignment``
    (a single result: its exact size, no pack)."""
    if len(sizes) == 1:
        return sizes[0]
    return sum(-(-n // alignment) * alignment for n in sizes)


def _allocations(call: dict[str, Any]) -> list[tuple[list[int], int]]:
    """A call's result allocations: per allocation, the results in it (a result returned twice counted at its
    first) and its bytes.  A probe that recorded where each result lies (``buffer``, ``offset``) gives them
    one by one (several results: their aligned slots, rounded up to the alignment of the next slot, 64 B; one
    result: its exact size); otherwise the call's results are one allocation of what the call left allocated."""
    results = call.get("results") or []
    own = [j for j, r in enumerate(results) if "same_buffer_as" not in r]
    if not own or not all("buffer" in results[j] for j in own):
        kept = max(0, int(call.get("live_after", 0)) - int(call.get("live_before", 0)))
        return [(own, kept)] if own else []
    groups: dict[int, list[int]] = {}
    for j in own:
        groups.setdefault(int(results[j]["buffer"]), []).append(j)
    out = []
    # a returned input is its input copy, no result allocation: its own entry, after the call's result buffers
    ordered = sorted(groups.values(), key=lambda m: all(":stage:" in f":{results[j].get('label') or ''}" for j in m))
    for members in ordered:
        end = max(int(results[j].get("offset", 0)) + int(results[j]["bytes"]) for j in members)
        out.append((members, end if len(members) == 1 else -(-end // PACK_ALIGNMENT) * PACK_ALIGNMENT))
    return out


def _buffer_name(k: int, n: int, g: int, allocations: list[tuple[list[int], int]],
                 results: list[dict[str, Any]]) -> str:
    """How blame names the call's ``g``-th result allocation ("result buffer 2 of 3" where the call made several)."""
    made = sum(not all(":stage:" in f":{results[j].get('label') or ''}" for j in m) for m, _ in allocations)
    which = f" {g + 1} of {made}" if made > 1 else ""
    return f"iree-hal call {k + 1}/{n}'s result buffer{which}"


def _residual_buffers(invocations: list[dict[str, Any]], model: LifetimeModel) -> list[dict[str, Any]]:
    """Per call, the buffers still alive after the step that the model does not retain: a returned input's
    copy, and the call's result buffer (one pack: it stays allocated while any result in it is alive),
    less what of it the model retains (gradients)."""
    n = len(invocations)
    by_label = {s.producer: s for s in model.storages}
    retained = [s for s in model.storages if s.role == "retained" and s.death is None]
    candidates = []
    for k, call in enumerate(invocations):
        results = call["results"]
        alive_all = {int(r.get("same_buffer_as", j)) for j, r in enumerate(results) if r.get("alive_after")}
        allocations = _allocations(call)
        for g, (members, kept_all) in enumerate(allocations):  # an allocation stays while any result in it is alive
            pack: list[tuple[int, dict[str, Any]]] = []
            expected = 0  # bytes of the allocation the model retains
            alive = sorted(alive_all.intersection(members))
            for j in alive:  # one buffer returned twice (a detach) is its first result's
                r = results[j]
                label = r.get("label") or ""
                s = by_label.get(label)
                twin = s if s in retained else next((t for t in retained if s is None and t.nbytes >= r["bytes"]),
                                                    None)
                if twin is not None:
                    retained.remove(twin)  # a gradient the model keeps
                    expected += twin.nbytes
                elif ":stage:" in f":{label}":  # a returned input: its copy, not the call's buffer
                    candidates.append(_runtime_entry(r["bytes"], f"{_result_name(k, n, j, r)}, its input copy",
                                                     "still alive after the step", _model_death(s, model)))
                else:
                    pack.append((j, r))
            name = _buffer_name(k, n, g, allocations, results)
            if not pack and expected and kept_all > expected:  # results the model frees, in the buffer it retains
                freed = tuple((str(results[j].get('label') or f'result {j}'), int(results[j]['bytes'])) for j in members
                              if j not in alive and ":stage:" not in f":{results[j].get('label') or ''}")
                slots = _slot_bytes([int(results[j]["bytes"]) for j in members])
                packed = ResultPack(name, kept_all, expected, slots, len(members), PACK_ALIGNMENT, freed)
                entry = _runtime_entry(kept_all - expected, result_pack_sentence(packed),
                                       "still alive after the step (with the retained results)",
                                       "with its last use")
                # slot_bytes and retained_bytes as records have had them, beside the whole fact
                candidates.append({**entry, "slot_bytes": slots, "retained_bytes": expected,
                                   ResultPack.KEY: packed.to_json()})
            if pack:
                kept = max(kept_all, sum(r["bytes"] for _, r in pack))
                held = ", ".join(f"{r.get('label') or f'result {j}'} {r['bytes']} B" for j, r in pack)
                first = by_label.get(pack[0][1].get("label") or "")
                candidates.append(_runtime_entry(max(0, kept - expected),
                                                 f"{name} ({kept} B allocated; alive in it: {held})",
                                                 "still alive after the step", _model_death(first, model)))
        if len(invocations) == 1:  # the step's only call: what it left allocated that no result alive holds
            left = max(0, int(call["live_after"]) - int(call["live_before"]))
            held_bytes = sum(size for members, size in allocations if alive_all.intersection(members))
            if left > held_bytes and all("buffer" in r for r in results if "same_buffer_as" not in r):
                returned = ", ".join(f"{r.get('label') or f'result {j}'} {r['bytes']} B"
                                     for j, r in enumerate(results) if "same_buffer_as" not in r)
                candidates.append(_runtime_entry(
                    left - held_bytes, f"iree-hal call 1/1's own allocations: it left {left} B allocated when it "
                                       f"returned, {left - held_bytes} B of them held by no result alive after the "
                                       f"step (it returned {returned or 'nothing'})",
                    "still allocated after the step", "not in the model (the program's own buffers)"))
    return candidates


def _peak_buffers(invocations: list[dict[str, Any]], model: LifetimeModel) -> list[dict[str, Any]]:
    """At the call that reached the domain's peak: earlier results still alive that the model had freed
    before the call, and each part of the call (transients, results, input copies) over the model's."""
    n = len(invocations)
    by_label = {s.producer: s for s in model.storages}
    k, top = max(enumerate(invocations), key=lambda kv: kv[1]["live_before"] + kv[1]["peak_rise"])
    labels = [x.get("label") for x in top["results"] + top.get("inputs", [])]
    prefix = _prefix(next((x for x in labels if x), None))
    events = _call_events(model, prefix)
    results_event = next((i for i in events if model.events[i] == f"{prefix}results"), None)
    # where the call's work starts in the model: its inputs copied (donated ones dropped), its results allocated
    start = results_event if results_event is not None else (events.start if len(events) else len(model.events))
    candidates = []
    alive: dict[int, list[int]] = {}
    for i, j in top.get("alive_before") or []:  # one buffer returned twice (a detach) is its first result's
        alive.setdefault(i, []).append(int(invocations[i]["results"][j].get("same_buffer_as", j)))

    def held_by_model(r: dict[str, Any]) -> Storage | None:
        s = by_label.get(r.get("label") or "")
        return s if s is not None and (s.death is None or s.death >= start) else None

    for i, js in alive.items():  # an earlier call's buffer stays allocated while any result in it is alive
        results = invocations[i]["results"]
        for j in js:
            r = results[j]
            if ":stage:" in f":{r.get('label') or ''}" and held_by_model(r) is None:
                candidates.append(_runtime_entry(r["bytes"], f"{_result_name(i, n, j, r)}, its input copy",
                                                 f"alive when call {k + 1}/{n} started",
                                                 _model_death(by_label.get(r.get("label") or ""), model)))
        allocations = _allocations(invocations[i])
        for g, (members, kept_g) in enumerate(allocations):
            packed = [(j, results[j]) for j in members if ":stage:" not in f":{results[j].get('label') or ''}"]
            if not any(j in js for j, _ in packed):
                continue
            kept_i = max(kept_g, sum(r["bytes"] for _, r in packed))
            model_held = [s for s in (held_by_model(r) for _, r in packed) if s is not None]
            over = kept_i - sum(s.nbytes for s in model_held)
            if over > 0:
                live = tuple((str(results[j].get('label') or f'result {j}'), int(results[j]['bytes']))
                             for j, _ in packed if j in js)
                freed = tuple((str(r.get('label') or 'result'), int(r['bytes'])) for _, r in packed
                              if held_by_model(r) is None)
                shared = SharedResultBuffer(_buffer_name(i, n, g, allocations, results), kept_i, f"{k + 1}/{n}",
                                            live, freed)
                entry = _runtime_entry(over, shared_buffer_sentence(shared), f"alive when call {k + 1}/{n} started",
                                       "freed with its last result")
                candidates.append({**entry, SharedResultBuffer.KEY: shared.to_json()})
    kept = max(0, top["live_after"] - top["live_before"])
    transient = max(0, top["peak_rise"] - kept)
    up_front = [s for s in model.storages if results_event is not None and s.birth == results_event]
    inner = [s for s in model.storages if s.role not in ("staging", "caller") and s not in up_front
             and s.birth in events and (results_event is None or s.birth > results_event)]
    model_inner = max((sum(s.nbytes for s in inner if s.birth <= e and (s.death is None or s.death >= e))
                       for e in events), default=0)
    copies = sum(int(x["bytes"]) for x in top.get("inputs", []))
    model_copies = sum(s.nbytes for s in model.storages if s.role == "staging" and s.birth in events)
    model_results = sum(s.nbytes for s in up_front)
    values = ", ".join(f"{r.get('label') or f'result {j}'} {r['bytes']} B"
                       for j, r in enumerate(top["results"]) if "same_buffer_as" not in r)
    where = f"iree-hal call {k + 1}/{n}"
    declared = top.get("program_transients")
    transients = CallTransients(where, transient, model_inner, declared if isinstance(declared, int) else None,
                                declared is None and "program_transients" in top)
    parts = [(transient, model_inner, transients_sentence(transients), {CallTransients.KEY: transients.to_json()}),
             (kept, model_results, f"{where}'s results: {kept} B allocated for {values or 'none'}, "
                                   f"{model_results} B in the model", {}),
             (copies, model_copies, f"{where}'s input copies: {copies} B, {model_copies} B in the model", {})]
    for measured, modelled, text, fact in parts:
        if measured > modelled:
            candidates.append({**_runtime_entry(measured - modelled, text, "inside the call",
                                                "the model's schedule of the call"), **fact})
    return candidates


def runtime_buffers(invocations: list[dict[str, Any]], model: LifetimeModel, check: str,
                    excess: int) -> list[dict[str, Any]]:
    """Blame in a runtime's own domain (IREE's HAL) by the buffers its compiled program handled, where the
    probe recorded them per call (``inputs``, ``results`` with ``alive_before``/``alive_after``, labelled
    as the model names their storages): for the residual, the result buffers and input copies that
    outlived the step which the model does not retain; for the peak, at the call that reached it, the
    earlier results still alive that the model had freed, and each part of the call (its transients, its
    results, its input copies) by how far it is over the model's.  Only entries that explain ``excess``
    are kept (:func:`explaining`), else the smallest that alone accounts for it."""
    if excess <= 0 or not invocations or not all("results" in c for c in invocations):
        return []
    if check == "residual":
        return _explaining_or_smallest(_residual_buffers(invocations, model), excess)
    return _explaining_or_smallest(_peak_buffers(invocations, model), excess)
