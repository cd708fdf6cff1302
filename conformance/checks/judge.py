"""The memory checks: each turns models and measurements into one typed :class:`Check`.

Pure functions over :class:`~conformance.models.lifetime.LifetimeModel` and
:class:`~conformance.probes.cpu.MemoryTrace`; the engine gathers their checks and
:func:`conformance.api.verdict.combine` decides the verdict.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conformance.api.result import MemoryFigures
from conformance.api.verdict import Check, CheckName, Contract, Status, passed
from conformance.checks.blame import Blamed, blame_peak, blame_peak_in_program, blame_residual, share, unexplained
from conformance.checks.cause import (
    PARTS_KEY,
    SHARES_KEY,
    TIMELINE_PART,
    program_part,
    program_part_facts,
    program_parts,
)
from conformance.checks.facts import ProgramPart
from conformance.checks.timeline import compare as compare_timeline
from conformance.models.donation import DETAIL_KEY
from conformance.models.lifetime import LifetimeModel, Observation
from conformance.models.program import LateReference, late_references, late_releases
from conformance.probes.cpu import MemoryTrace, without_op_transients


@dataclass(frozen=True)
class ProbedStep:
    """One probed call: its models (the one it is held to, the user-level one, the program's) and its trace."""

    call: int
    trace: MemoryTrace
    model: LifetimeModel
    user_model: LifetimeModel
    program: LifetimeModel | None = None
    observation: Observation | None = None  # the loop trip counts this call's models were built with
    #: graphs the call compiled (a case whose shapes change: a recompile for a new shape); 0 otherwise
    new_graphs: int = 0
    #: the call's changing dimension and size (``batch=10``) in a case whose shapes change, else ""
    shape: str = ""
    #: a call that compiled: the run that compiled (the compiler's allocations in its window);
    #: ``trace`` is then the same call run again at the same shapes, which the contracts judge
    compile_trace: MemoryTrace | None = None
    #: where ``model`` is an upper bound (kernels whose workspace depends on the CPU, C++ scopes): the
    #: same step's lower bound; an exact backend's peak must lie between the two
    model_low: LifetimeModel | None = None
    #: bytes of the step's outputs the caller dropped inside the window whose storages were still alive when it
    #: closed (something else holds them: the adapter), where they share no storage with the step's state
    outputs_held_bytes: int = 0

    @property
    def residual_bytes(self) -> int:
        """The residual the call is judged by: the trace's; where the trace does not see every allocation (a
        runtime's statistics, which frees of memory made before the window offset: an adapter dropping the previous
        call's outputs while it holds this call's), at least the model's plus the dropped outputs still held."""
        if self.trace.exact:
            return self.trace.residual_bytes
        return max(self.trace.residual_bytes, self.model.residual_bytes + self.outputs_held_bytes)

    @property
    def kept_bytes(self) -> int:
        """Bytes the call left alive past its model's residual: what a backend keeps across calls
        (for a call that compiled, what its compiling run kept)."""
        residual = self.compile_trace.residual_bytes if self.compile_trace is not None else self.residual_bytes
        return max(0, residual - self.model.residual_bytes)

    @property
    def kept_for_new_graph(self) -> bool:
        """Memory kept by the run that compiled a graph: one graph's (one shape's) cache, counted and
        reported; bounded by the graphs a frame may compile, so not a leak.  The call's settled
        run must then keep nothing more; memory kept by a call that compiled nothing grows with
        calls: a leak."""
        return self.compile_trace is not None and self.kept_bytes > 0


def names(blamed: Sequence[Blamed], limit: int = 3) -> str:
    return ", ".join(f"{b.producer} ({b.bytes} B)" for b in blamed[:limit]) or "no single allocation"


def judge_residual(steps: Sequence[ProbedStep], held_by: dict[int, list[str]] | None = None) -> Check:
    """After each step (outputs dropped, gradients kept) live bytes equal the model's residual exactly.

    ``held_by``: what still holds the last probed call's allocations (:func:`conformance.probes.owners.holders`),
    for blame to name the storage that stayed alive by its own address."""
    residuals = [s.residual_bytes for s in steps]
    expected = [s.model.residual_bytes for s in steps]
    figures: dict[str, Any] = {"residual_per_step": residuals, "model_residual_per_step": expected,
                               "growth_bytes": residuals[-1] - residuals[0] if residuals else 0}
    if any(s.outputs_held_bytes for s in steps):
        figures["outputs_held_per_step"] = [s.outputs_held_bytes for s in steps]
    kept = {s.call: s.kept_bytes for s in steps if s.kept_for_new_graph}
    if kept:
        figures["kept_for_new_graphs"] = kept
    bad = [s for s in steps if s.residual_bytes != s.model.residual_bytes]
    # the figures judged: the worst call (the latest of equals: what it left is still alive to be named)
    worst = max(reversed(bad or list(steps)), key=lambda s: abs(s.residual_bytes - s.model.residual_bytes))
    measured, model = worst.residual_bytes, worst.model.residual_bytes
    contract = Contract("residual after the step", measured, model, model,
                        f"residual after probed call {worst.call} == model residual {model} B (measured {measured} B)",
                        worst.call)
    figures.update(call=worst.call, measured_residual_bytes=measured, model_residual_bytes=model)
    if not bad:
        return Check(CheckName.RESIDUAL, Status.PASS, "", figures, contract=contract)
    excess = contract.excess_bytes
    last = worst is steps[-1]
    blamed = blame_residual(worst.model, worst.trace, held_by=held_by if last else None) if excess > 0 else []
    first_bad = steps.index(bad[0]) + 1
    growth = (f"; grows {figures['growth_bytes']:+d} B over {len(steps)} steps"
              if figures["growth_bytes"] else "")
    if excess > 0 and worst.shape and worst.compile_trace is None:
        growth += (f"; at {worst.shape} call {worst.call} kept {worst.kept_bytes} B with no new graph compiled "
                   "(memory kept across shapes that grows with calls, without bound)")
    entries = [b.to_json() for b in blamed]
    figures.update(_remainder(entries, excess, "still alive after the step", "the model keeps more than was measured"))
    held = (f"; the step's outputs ({worst.outputs_held_bytes} B) were dropped by the caller and are still held "
            f"after it" if worst.outputs_held_bytes and not blamed else "")
    return Check(CheckName.RESIDUAL, Status.FAIL_RESIDUAL,
                 f"residual {measured} B after probed call {worst.call} != model residual {model} B "
                 f"(per step {residuals} B, first off at probed step {first_bad}){growth}; "
                 f"still alive: {names(blamed)}{_unnamed(figures)}{held}",
                 figures, entries, excess, contract)


def _remainder(blamed: Sequence[dict[str, Any]], excess: int, what: str, under: str,
               offset: str = "") -> dict[str, Any]:
    """The part of ``excess`` the blamed entries do not account for, and what makes it up, for the record."""
    rest = unexplained(list(blamed), excess)
    if rest is None:
        return {}
    if excess <= 0:
        note = f"{-excess} B under the contract: {under}; nothing to blame"
    elif rest > 0:
        named = excess - rest
        note = (f"{rest} B of the {excess} B excess not named: no other allocation {what} can be told apart as "
                f"the model's (each other candidate is larger than what is left, or none is left)"
                if named else f"none of the {excess} B excess named: no allocation {what} accounts for it alone")
    else:
        note = (f"the blamed storages hold {-rest} B more than the {excess} B excess: "
                + (offset or "the model holds that much at its peak which the measurement did not"))
    return {"blame_unexplained_bytes": rest, "blame_note": note}


def _unnamed(figures: dict[str, Any]) -> str:
    rest = figures.get("blame_unexplained_bytes")
    if not rest:
        return ""
    return f" ({rest} B of the excess not named)" if rest > 0 else f" (offset by {-rest} B the model holds)"


def loop_predicate_bytes(model: LifetimeModel) -> int:
    """The most bytes of ``while_loop`` predicates one schedule can hold at once: per loop (its condition's
    storages share the loop's label), its largest predicate; nested loops' added (the outer's is held while the
    inner runs).  The evidence of the dense kernel's held predicate (:mod:`conformance.checks.mechanism`)."""
    per_loop: dict[str, int] = {}
    for s in model.storages:
        if s.loop_predicate:
            loop = s.producer.rsplit(".cond", 1)[0]
            per_loop[loop] = max(per_loop.get(loop, 0), s.nbytes)
    return sum(per_loop.values())


def judge_peak(steps: Sequence[ProbedStep], exact: bool, slack: int, source: str,
               program_held: bool = False, held_by: dict[int, list[str]] | None = None) -> Check:
    """Exact backends (eager) equal the model byte for byte; others stay at or under it (plus any slack).

    ``program_held``: the step's generated program was held to the measured timeline exactly (its
    own check), so what its opaque ops allocate and free inside their own calls (a fallback
    kernel's temporaries, oneDNN's reorders) is set apart here too: the received graphs' model
    counts no kernel's workspace, and the peak compared is the program's.  What was set apart is
    reported (``op_transient_peak_bytes``)."""
    traces = {id(s): without_op_transients(s.trace) if program_held else s.trace for s in steps}
    worst = _peak_worst(steps, traces, exact)
    trace = traces[id(worst)]
    figures = _peak_figures(steps, worst, trace, exact, slack, source)
    contract = _peak_contract(worst, trace.peak_bytes, exact, slack, source)
    if not contract.violated:
        return Check(CheckName.PEAK, Status.PASS, "", figures, contract=contract)
    return _peak_failure(steps, worst, trace, figures, contract, exact, slack, source, program_held, held_by)


def _peak_worst(steps: Sequence[ProbedStep], traces: dict[int, MemoryTrace], exact: bool) -> ProbedStep:
    """The call judged: the most over its model; for an exact backend, the furthest from it either way (every
    call equals its own model: a call's shapes may differ from the others')."""

    def over(s: ProbedStep) -> int:
        return traces[id(s)].peak_bytes - s.model.peak_bytes

    def off(s: ProbedStep) -> int:
        """How far an exact backend's peak is from its model: from the range, where the model is one."""
        low = s.model_low.peak_bytes if s.model_low is not None else s.model.peak_bytes
        measured = traces[id(s)].peak_bytes
        return over(s) if measured > s.model.peak_bytes else min(measured - low, 0)

    if exact:
        return max(steps, key=lambda s: (abs(off(s)), off(s)))
    return max(steps, key=over)


def _peak_figures(steps: Sequence[ProbedStep], worst: ProbedStep, trace: MemoryTrace, exact: bool, slack: int,
                  source: str) -> dict[str, Any]:
    measured, model = trace.peak_bytes, worst.model.peak_bytes
    figures: dict[str, Any] = {"measured_peak_bytes": measured, "model_peak_bytes": model, "model_source": source,
                               "contract": "equal" if exact else f"<= model + {slack}", "call": worst.call}
    if trace is not worst.trace:
        figures["op_transient_peak_bytes"] = worst.trace.peak_bytes - measured
    predicates = loop_predicate_bytes(worst.model)
    if predicates:
        figures["loop_predicate_bytes"] = predicates
    if any(s.shape for s in steps):
        figures["model_peak_per_step"] = [s.model.peak_bytes for s in steps]
        figures["shape_per_step"] = [s.shape for s in steps]
    if worst.model_low is not None:
        figures["model_low_peak_bytes"] = worst.model_low.peak_bytes
        figures["contract"] = "within [model low, model]" if exact else figures["contract"]
    return figures


def _peak_contract(worst: ProbedStep, measured: int, exact: bool, slack: int, source: str) -> Contract:
    model = worst.model.peak_bytes
    if exact:
        low = worst.model_low.peak_bytes if worst.model_low is not None else model
        rule = (f"measured peak within [model low {low} B, model {model} B] ({source})"
                if worst.model_low is not None
                else f"measured peak == model peak {model} B ({source})")
        return Contract("measured peak", measured, low, model, f"{rule}; measured {measured} B", worst.call)
    return Contract("measured peak", measured, None, model + slack,
                    f"measured peak <= model peak {model} B ({source}) + slack {slack} B; "
                    f"measured {measured} B",
                    worst.call)


def _peak_failure(steps: Sequence[ProbedStep], worst: ProbedStep, trace: MemoryTrace, figures: dict[str, Any],
                  contract: Contract, exact: bool, slack: int, source: str, program_held: bool,
                  held_by: dict[int, list[str]] | None) -> Check:
    """A peak off its contract: above it, what is alive past its modelled death; below it, no culprit."""
    measured, model = trace.peak_bytes, worst.model.peak_bytes
    above = measured > model
    last = worst is steps[-1]
    blamed = blame_peak(worst.model, trace, held_by=held_by if last else None) if above else []  # below: no culprit
    if above and program_held and worst.program is not None:
        named = blame_peak_in_program(worst.model, worst.program, trace,
                                      compare_timeline(worst.program, worst.trace).matched)
        blamed = named or blamed
    excess = contract.excess_bytes
    entries = [b.to_json() for b in blamed]
    figures.update(_remainder(entries, excess, "alive at the measured peak past its modelled death",
                              "the model holds more than was measured",
                              "the measured step does not hold that much of what the model holds at its peak "
                              "(it frees or never makes it), so the blamed bytes net of it make the excess"))
    rel = "!=" if exact else ">"
    culprits = (f"; alive past modelled death: {names(blamed)}{_unnamed(figures)}" if above
                else "; the model holds more than was measured")
    if exact and not above and worst.model_low is not None:  # under the range's lower bound
        return Check(CheckName.PEAK, Status.FAIL_PEAK,
                     f"measured peak {measured} B < model peak's lower bound {contract.low_bytes} B "
                     f"({source}){culprits}",
                     figures, entries, excess, contract)
    return Check(CheckName.PEAK, Status.FAIL_PEAK,
                 f"measured peak {measured} B {rel} model peak {model} B{f' + slack {slack} B' if slack else ''} "
                 f"({source}){culprits}", figures, entries, excess, contract)


def judge_program(steps: Sequence[ProbedStep], exact_domain: bool) -> Check | None:
    """The program the compiler generated: its own lifetimes, and the measurement following it.

    Fails on any storage the program keeps past its last use (or allocates and never
    uses), any reference it keeps that blocks reuse at a storage's last use, and, where
    the allocator reports every allocation (``exact_domain``), any measured allocation,
    free or peak that departs from the program's timeline."""
    with_program = [s for s in steps if s.program is not None]
    if not with_program:
        return None
    found = _program_findings(with_program[-1])
    if exact_domain:
        _compare_timelines(with_program, found)
    figures = found.figures
    figures["call"] = found.call
    if found.measured is not None:
        figures["measured_peak_bytes"] = found.measured
    rule = ("frees every storage at its last use and the measured timeline follows it" if exact_domain
            else "frees every storage at its last use")
    excess = found.excess
    contract = Contract("generated program's excess (bytes held past their last use x statements run meanwhile, "
                        "plus bytes the measured timeline departs by)", excess, 0, 0,
                        f"generated program {rule}: excess {excess} B, 0 B allowed", found.call)
    if not found.sentences:
        return Check(CheckName.PROGRAM, Status.PASS, "", figures, contract=contract)
    return _program_failure(found, contract)


@dataclass
class _ProgramFindings:
    """What the program check found so far: its figures, blamed entries and sentences, the excess and each
    cause part's share of it, the call judged and its measured peak, and the measured peak over the program's."""

    figures: dict[str, Any]
    blamed: list[dict[str, Any]]
    sentences: list[str]
    excess: int
    shares: dict[str, int]
    call: int
    measured: int | None
    peak_over: int = 0  # where the timeline is compared (no entry names it)


def _program_findings(step: ProbedStep) -> _ProgramFindings:
    """The last call's program: the storages it keeps past their last use and the references that block reuse,
    the largest first (what a maintainer looks at first)."""
    program = step.program
    assert program is not None
    late = late_releases(program.events, program.storages, program.work_events)
    refs: list[LateReference] = late_references(program.findings)
    figures: dict[str, Any] = {
        "program_peak_bytes": program.peak_bytes,
        "program_residual_bytes": program.residual_bytes,
        "program_events": len(program.events),
        "late_releases": len(late),
        "late_references": len(refs),
        "timeline": "not compared (the allocator does not report every allocation)",
    }
    late.sort(key=lambda f: -f.storage.nbytes)
    refs.sort(key=lambda r: -sum(s.nbytes for s in r.blocked))
    blamed = ([{**f.describe(program.events), "explains_bytes": _held_late([f], program)} for f in late]
              + [{**r.describe(program.events), "explains_bytes": sum(s.nbytes for s in r.blocked)} for r in refs])
    sentences = [f.sentence(program.events) for f in late] + [r.sentence(program.events) for r in refs]
    excess = _held_late(late, program) + sum(sum(s.nbytes for s in r.blocked) for r in refs)
    # each cause part's share of the excess, what a manifest's cause entry bounds
    shares: dict[str, int] = {}
    for entry in blamed:
        part = program_part(entry)
        shares[part] = shares.get(part, 0) + share(entry)
    measured = getattr(step.trace, "peak_bytes", None)  # a step judged on its program alone has none
    return _ProgramFindings(figures, blamed, sentences, excess, shares, step.call, measured)


def _compare_timelines(with_program: Sequence[ProbedStep], found: _ProgramFindings) -> None:
    """Every call's measured timeline against its program's; the first that departs leads the findings."""
    figures = found.figures
    diffs = [(s, compare_timeline(s.program, s.trace)) for s in with_program if s.program is not None]
    bad = [(s, d) for s, d in diffs if not d.exact]
    last = diffs[-1][1]
    figures["timeline"] = "exact" if not bad else "differs"
    figures["measured_peak_bytes"] = found.measured = last.measured_peak
    figures["op_transient_bytes"] = sum(a.nbytes for a in last.op_transients)
    figures["op_transients_in"] = sorted({a.transient_in or "" for a in last.op_transients})
    if not bad:
        return
    s, d = bad[0]
    assert s.program is not None
    found.sentences.insert(0, f"measured timeline of call {s.call} departs from the program's: {d.sentence()}")
    found.blamed = [{**e, "explains_bytes": e["bytes"] if e.get("finding") in _TIMELINE_EXCESS else 0}
                    for e in d.blamed(s.program)] + found.blamed
    found.excess += d.excess_bytes()
    found.peak_over = max(d.measured_peak - d.model_peak, 0)
    found.shares[TIMELINE_PART] = found.shares.get(TIMELINE_PART, 0) + d.excess_bytes()
    found.call, found.measured = s.call, d.measured_peak
    figures["program_peak_bytes"] = d.model_peak


def _program_failure(found: _ProgramFindings, contract: Contract) -> Check:
    """The failing check: its cause parts and their shares, the first ten findings, what they leave unnamed."""
    figures, blamed, excess, sentences = found.figures, found.blamed, found.excess, found.sentences
    figures[PARTS_KEY] = program_parts(blamed, figures["timeline"] == "differs")  # from every finding
    figures[SHARES_KEY] = {part: found.shares.get(part, 0) for part in figures[PARTS_KEY]}
    figures[ProgramPart.KEY] = program_part_facts(blamed)  # what a part whose entries are cut below is
    shown = blamed[:10]
    rest = unexplained(shown, excess)
    if rest:
        why = [f"{len(blamed) - len(shown)} more finding(s) not listed"] if len(blamed) > len(shown) else []
        if found.peak_over:
            why.append(f"the measured peak is {found.peak_over} B over the program's")
        figures.update(blame_unexplained_bytes=rest,
                       blame_note=f"{rest} B of the {excess} B excess not in the blamed entries: "
                                  + ("; ".join(why) or "findings without a storage"))
    more = f" [{len(sentences) - 1} more finding(s)]" if len(sentences) > 1 else ""
    reason = f"generated program: excess {excess} B over 0 B allowed: {sentences[0]}{more}"
    return Check(CheckName.PROGRAM, Status.FAIL_PEAK, reason, figures, shown, excess, contract)


#: timeline findings whose bytes count in the program check's excess (conformance.checks.timeline.TimelineDiff)
_TIMELINE_EXCESS = ("unmodelled-allocation", "freed-later-than-program")


def _held_late(late: Sequence[Any], program: LifetimeModel) -> int:
    """Bytes held past their last use, counted once per statement that does work while they are held:
    holding a buffer longer, not only holding a bigger one, changes it (what a manifest's excess pins)."""
    work = sorted(program.work_events)
    total = 0
    for f in late:
        end = f.freed if f.freed is not None else len(program.events) - 1
        held = bisect.bisect_right(work, end) - bisect.bisect_left(work, f.should_die)
        total += f.storage.nbytes * max(held, 1)
    return total


def judge_backward_inputs(memory: MemoryFigures) -> Check | None:
    """Saved activations measured alive past their last use fail the peak contract even when the
    backend's other savings keep the peak under the model (see :mod:`conformance.models.donation`)."""
    found = memory.backward_inputs
    if found is None:
        return None
    # the figures as the backend reported them (``backward_inputs_detail``), less the calls
    detail = memory.findings.get(DETAIL_KEY) or {}
    figures = {"verdict": found.verdict, **{k: v for k, v in detail.items() if k != "calls"}}
    if found.verdict == "held-for-call":
        held = int(found.held_bytes or 0)
        why = "argument list never cleared" if found.list_cleared is False else "references kept"
        return Check(CheckName.BACKWARD_INPUTS, Status.FAIL_PEAK,
                     f"backward inputs held for the whole backward call: {held} B of saved activations "
                     f"outlive the call ({why})", figures, [], held, _saved_contract(held))
    if found.verdict == "released-late" and found.still_allocated_bytes:
        late = int(found.still_allocated_bytes)
        return Check(CheckName.BACKWARD_INPUTS, Status.FAIL_PEAK,
                     f"backward inputs released late: {late} B of saved activations stayed allocated after the "
                     "backward dropped them", figures, [], late, _saved_contract(late))
    return passed(CheckName.BACKWARD_INPUTS, **figures)


def _saved_contract(held: int) -> Contract:
    return Contract("saved activations held past their last use in the backward", held, 0, 0,
                    f"saved activations released at their last use: {held} B held past it, 0 B allowed")


def adapter_check(extra: Check | tuple[str, str] | None) -> Check | None:
    """An adapter's own contract (CUDA graph pools) as a check; the old ``(status, reason)`` form still works."""
    if extra is None or isinstance(extra, Check):
        return extra
    status, reason = extra
    return Check(CheckName.POOL, Status.parse(status), reason)
