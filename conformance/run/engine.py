"""Runs one case on one backend and decides its verdict, with the numbers behind it.

A pair's life: compile and run the first call, one timed call, then ``steps`` probed
calls, each with fresh inputs drawn from the case's seed.  Every call's results and the
state it left (inputs, buffers, parameters: :mod:`conformance.checks.state`) are checked
against the float64 reference making the same sequence of calls.
Every check (parity, residual, the generated program, peak, backward inputs, the
adapter's own contract) is a :class:`~conformance.api.verdict.Check`;
:func:`~conformance.api.verdict.combine` decides the verdict from them.
"""

from __future__ import annotations

import contextlib
import gc
import re
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.utils._pytree as pytree
from torch.utils._pytree import tree_flatten

from conformance.api.adapter import Backend, CompiledStep, CompileError
from conformance.api.case import Case, Workload
from conformance.api.result import DomainFigures, MemoryFigures, ModelPoint, Result, TimelinePoint
from conformance.api.step import (
    STEP_TRACES,
    StepOutput,
    clear_grads,
    depends_on_data,
    eager_modules,
    optimizer_segment,
    params_of,
    snapshot,
    trace_user_kernels,
)
from conformance.api.verdict import Check, CheckName, Status, combine, registered_checks
from conformance.checks.blame import invocation_breakdown, runtime_buffers
from conformance.checks.context import Judging
from conformance.checks.domains import MEMORY_CHECKS, DomainPlan, plan
from conformance.checks.judge import ProbedStep
from conformance.checks.mechanisms import EAGER_ROUNDING, GRAPH_BREAK_NOTE, LOWERING_FALLBACK, SPLIT_SOURCE
from conformance.checks.outputs import KeptOutputs
from conformance.checks.parity import ParityReport
from conformance.checks.references import (
    REFERENCE_SOURCES,
    InputDigest,
    SharedReferences,
    cached_reference_key,
    load_cached_references,
    reference_key,
    store_cached_references,
)
from conformance.checks.state import CallReference, after_call, judge_calls, make_references, state_of
from conformance.models.interpreter import GraphExecutor
from conformance.models.lifetime import LifetimeModel, ModelError, Observation, is_while_loop, model_graph
from conformance.models.lifetime import cached as cached_models
from conformance.models.optimizer import OptimizerSegment, with_optimizer_step
from conformance.models.transients import KernelNotModelled
from conformance.probes import native_heap
from conformance.probes.cpu import CpuAllocatorProbe, MemoryProbe, MemoryTrace, combine_traces, without_op_transients
from conformance.probes.observer import fallback_reason
from conformance.probes.owners import holders
from conformance.probes.statements import StatementTracer, attribute
from conformance.run import boundary, pristine, reaper, shapes
from conformance.run.boundary import HookError
from conformance.run.options import RunOptions
from conformance.run.rerun import rerun_command
from conformance.util import result_cache
from conformance.util.phases import PhaseClock
from conformance.util.result_cache import ResultCache
from conformance.util.text import clip, code_roots, traceback_tail, without_escapes


def repro_command(case: Case, backend: str, steps: int | None = None) -> str:
    """The command that reruns the pair (:func:`conformance.run.rerun.rerun_command`)."""
    return rerun_command(case.id, backend, steps)


#: set when a pair left state changed that could not be restored: the isolation worker is recycled
NEEDS_RECYCLE = False


def run_case(case: Case, backend: Backend, options: RunOptions | None = None, spec: str | None = None,
             recyclable: bool = False) -> Result:
    """The verdict of ``case`` on ``backend``; ``spec`` is how the run named the backend (for the repro).

    The process state the pair found is restored when it ends (:mod:`conformance.run.pristine`), and
    the pair gets a note naming what it changed; so does one that leaves a process running, which is
    killed (:mod:`conformance.run.reaper`); ``recyclable``: the caller is an isolation worker
    that ends after this pair when something could not be restored (``NEEDS_RECYCLE``)."""
    global NEEDS_RECYCLE
    reaper.become_subreaper()  # orphans of what the pair starts stay in this process's tree
    processes = reaper.descendants()
    before = pristine.snapshot()
    result: Result | None = None
    try:
        result = _run_case(case, backend, options or RunOptions(), spec)
        return result
    finally:
        left = reaper.note(reaper.sweep(processes))  # no process outlives its pair
        if left and result is not None:
            result.notes.append(left)
        changes = pristine.diff(before, pristine.snapshot())
        failed = pristine.restore(before, changes)
        NEEDS_RECYCLE = NEEDS_RECYCLE or (bool(failed) and recyclable)
        said = pristine.note(changes, failed, recyclable)
        if said and result is not None:
            result.notes.append(said)


def _run_case(case: Case, backend: Backend, options: RunOptions, spec: str | None) -> Result:
    result = Result(
        case.id, backend.name, Status.PASS, seed=case.seed, kind=case.kind, family=case.family,
        repro=repro_command(case, spec or backend.name, options.steps),
    )
    try:
        result.versions = boundary.versions(backend.versions())
    except HookError as exc:
        return _verdict(result, Status.FAIL_RUN, str(exc))
    unavailable = backend.unavailable_reason()
    if unavailable:
        return _verdict(result, Status.SKIP, unavailable)
    missing = backend.capabilities.missing_for(case)
    if missing:
        return _verdict(result, Status.SKIP, f"backend lacks capability: {', '.join(missing)}")
    clock = PhaseClock()
    t0 = time.perf_counter()
    cache = ResultCache(Path(options.result_cache)) if options.result_cache is not None else None
    try:
        with result_cache.active(cache):
            return _run(case, backend, result, options, clock)
    except Exception as exc:  # the harness's own error (a model, a reference, a check): a verdict naming its stage
        return _verdict(result, Status.FAIL_RUN, f"harness error in {stage_of(exc)}: {_one_line(exc)}",
                        traceback.format_exc())
    finally:
        with clock.phase("cleanup"):
            gc.unfreeze()  # what _run froze is collectable again (by Python's own collector, later)
            torch._dynamo.reset()
        result.timing.update(clock.timing())
        result.timing["pair_s"] = time.perf_counter() - t0
        if cache is not None:
            result.cache = cache.counts()


class _Stopped(Exception):
    """A step of :func:`_run` ended the pair with its verdict (a compile error, a failed call)."""

    def __init__(self, result: Result) -> None:
        super().__init__(result.reason)
        self.result = result


def _stop(result: Result, status: Status, reason: str, detail: str = "") -> NoReturn:
    raise _Stopped(_verdict(result, status, reason, detail))


@dataclass
class _Probed:
    """What the probed calls leave for the models and the checks: each call's traces per domain, what the
    backend's evidence showed, and the bytes of its dropped outputs something else still held."""

    traces: list[tuple[int, list[MemoryTrace]]] = field(default_factory=list)
    evidence: dict[int, StepEvidence] = field(default_factory=dict)
    outputs_held: dict[int, int] = field(default_factory=dict)


def _run(case: Case, backend: Backend, result: Result, options: RunOptions, clock: PhaseClock) -> Result:
    try:
        return _run_steps(case, backend, result, options, clock)
    except _Stopped as stopped:
        return stopped.result


def _run_steps(case: Case, backend: Backend, result: Result, options: RunOptions, clock: PhaseClock) -> Result:
    """Build, compile and call 0, call 1 (timed), the optimizer's model, the probed calls, parity, then the
    memory checks; a parity failure is explained by running its reference again where one may explain it."""
    models = _Models(case)
    workload, digest = _build(case, backend, models, options, clock)
    calls = shapes.Calls(case)
    compiled, kept, states = _compile_and_call_0(case, backend, result, workload, calls, clock)
    _call_1(case, backend, result, compiled, workload, calls, digest, kept, states, clock)
    models.optimizer = _modelled_optimizer(case, compiled, workload, result, clock)
    probed = _probed_calls(case, backend, result, options, compiled, workload, calls, digest, kept, states, models,
                           clock)
    parity, references = _parity(case, states, options, digest, clock)
    # the parameters and buffers each call found (the copies the previous one left): a step whose graph
    # depends on its values is modelled on the values each call ran with
    models.found = {call + 1: {k: v for k, v in left.items() if k.startswith(("param[", "buffer["))}
                    for call, left in states.items()}
    del states
    result.parity = _parity_figures(parity)
    judged = _judge_memory(backend, compiled, result, models, calls, probed, parity, kept, clock)
    if not all(report.ok for report in parity.values()):
        reruns = _parity_reruns(case, backend, compiled, workload)
        del compiled, workload
        _explain_parity(case, backend, reruns, judged, references, 1 + options.steps, clock)
    return judged


def _build(case: Case, backend: Backend, models: _Models, options: RunOptions, clock: PhaseClock,
           ) -> tuple[Workload, InputDigest | None]:
    """The case's workload, and the digest of what the backend is given call by call (the case's shared
    references are of these values only; None where the pair makes its own)."""
    with clock.phase("build"), harness_stage("build: the case's builder"):
        workload = case.build()
    # what the backend is given, call by call: the case's shared references are of these values only
    digest = InputDigest() if options.references is not None or options.result_cache is not None else None
    if digest is not None:
        digest.add("call 0", state_of(workload))
    # the user-kernels model is of CPU kernels (oneDNN's, ATen's CPU composites): a step on another device
    # runs that device's (cuDNN's) RNN
    on_cpu = (backend.capabilities.devices or ("cpu",))[0] == "cpu"
    models.eager_modules = on_cpu and bool(eager_modules(workload.model))
    return workload, digest


def _compile_and_call_0(case: Case, backend: Backend, result: Result, workload: Workload, calls: shapes.Calls,
                        clock: PhaseClock) -> tuple[CompiledStep, KeptOutputs, dict[int, dict[str, torch.Tensor]]]:
    """Compile and make the first call: its results and state, its outputs kept as a user keeps them."""
    calls.see(0, workload.inputs)
    t0 = time.perf_counter()
    stage = "compile"
    try:
        with clock.phase("compile"):
            compiled = backend.compile(case, workload)
            stage = "first call"
            first = compiled.run()
    except Exception as exc:
        status = Status.FAIL_COMPILE if stage == "compile" or _is_compile_error(exc) else Status.FAIL_RUN
        _stop(result, status, _one_line(exc), traceback.format_exc())
    result.timing["compile_s"] = time.perf_counter() - t0
    calls.end()
    # every call's results and the state it left (inputs, buffers, parameters), copied outside the
    # probes' windows and torch's allocators, checked against references making the same calls
    with harness_stage("call 0: the step's results"):
        results = snapshot(first)
    # call 0's and call 1's outputs are kept, as a user keeps them, and compared after every later call
    kept = KeptOutputs(backend.capabilities.outputs_overwritten_by_next_call)
    kept.keep(0, first, results, state_of(workload))
    del first
    try:
        states = {0: _end_call(compiled, workload, results, calls)}
    except Exception as exc:
        status = Status.FAIL_COMPILE if _is_compile_error(exc) else Status.FAIL_RUN
        _stop(result, status, f"call 0: optimizer step: {_one_line(exc)}", traceback.format_exc())
    clear_grads(workload.model)
    return compiled, kept, states


def _call_1(case: Case, backend: Backend, result: Result, compiled: CompiledStep, workload: Workload,
            calls: shapes.Calls, digest: InputDigest | None, kept: KeptOutputs,
            states: dict[int, dict[str, torch.Tensor]], clock: PhaseClock) -> None:
    """The timed call, on fresh inputs: its results and state join ``states``, its outputs are kept."""
    try:
        with clock.phase("probe"):
            workload.inputs = _inputs(case, 1, backend)
            calls.see(1, workload.inputs)
            if digest is not None:
                digest.add("call 1", workload.inputs)
            compiled.prepare_call()
            t1 = time.perf_counter()
            out = compiled.run()
            result.timing["run_s"] = time.perf_counter() - t1
            results = snapshot(out)
            kept.keep(1, out, results, state_of(workload))
            del out
            calls.end()
            states[1] = _end_call(compiled, workload, results, calls)
            kept.check(1)
    except Exception as exc:
        _stop(result, Status.FAIL_RUN, f"call 1: {_one_line(exc)}", traceback.format_exc())


def _modelled_optimizer(case: Case, compiled: CompiledStep, workload: Workload, result: Result,
                        clock: PhaseClock) -> OptimizerSegment | None:
    """The optimizer step's model, after two optimizer steps: its state made, and a compiled one as it runs
    from now on."""
    try:
        with clock.phase("model"):
            return _optimizer_model(case, compiled, workload, result)
    except HookError as exc:
        _stop(result, Status.FAIL_RUN, str(exc))
    except Exception as exc:
        _stop(result, Status.FAIL_RUN, f"the optimizer step's model: {_one_line(exc)}", traceback.format_exc())


def _probed_calls(case: Case, backend: Backend, result: Result, options: RunOptions, compiled: CompiledStep,
                  workload: Workload, calls: shapes.Calls, digest: InputDigest | None, kept: KeptOutputs,
                  states: dict[int, dict[str, torch.Tensor]], models: _Models, clock: PhaseClock) -> _Probed:
    """Calls 2..N+1, each on fresh inputs inside the probes' windows; each call's results and state join
    ``states``, and the kept outputs are compared after each."""
    # the optimizer step runs in the probed calls' windows when its memory is modelled
    optimizer = ((lambda: calls.not_the_step(lambda: compiled.optimizer_step(workload)))
                 if models.optimizer is not None else None)
    probed = _Probed()
    try:
        with clock.phase("probe"):
            _freeze_survivors()
            for call in range(2, 2 + options.steps):
                _probe_call(case, backend, compiled, workload, calls, digest, call, optimizer, probed, states)
                kept.check(call)  # outside the windows: the kept outputs were allocated before them
    except Exception as exc:
        _stop(result, Status.FAIL_RUN, f"call {2 + len(probed.traces)}: {_one_line(exc)}", traceback.format_exc())
    finally:
        clear_grads(workload.model)
        kept.release()
    return probed


def _probe_call(case: Case, backend: Backend, compiled: CompiledStep, workload: Workload, calls: shapes.Calls,
                digest: InputDigest | None, call: int, optimizer: Callable[[], None] | None, probed: _Probed,
                states: dict[int, dict[str, torch.Tensor]]) -> None:
    """One probed call: its traces, evidence and held outputs into ``probed``, its results and state into
    ``states``."""
    workload.inputs = _inputs(case, call, backend)
    calls.see(call, workload.inputs)
    if digest is not None:
        digest.add(f"call {call}", workload.inputs)
    seen = StepEvidence()
    owned = _storages_of(state_of(workload))  # the step's state: an output sharing it is not dropped
    held: list[int] = []
    domain_traces, snap = probed_step(compiled, workload.model, backend.make_probe, True, optimizer,
                                      seen, held, owned, workload.inputs)
    if calls.end() and calls.changing:
        # the call compiled: its window holds the compiler's own allocations too, so the
        # step is probed again at the same shapes (it settles) and judged on that run; its
        # results and state are the first run's (the state the re-run changes, its optimizer
        # step's included, is put back as the first run left it, outside the window)
        calls.compiled(call, domain_traces)
        left = after_call(workload)
        seen = StepEvidence()
        domain_traces, _ = probed_step(compiled, workload.model, backend.make_probe, False, optimizer,
                                       seen, held, owned, workload.inputs)
        _restore(workload, left)
    calls.settled(call)
    probed.traces.append((call, domain_traces))
    probed.evidence[call] = seen
    probed.outputs_held[call] = held[-1]
    states[call] = _end_call(compiled, workload, snap, calls, optimizer is None)


def _judge_memory(backend: Backend, compiled: CompiledStep, result: Result, models: _Models, calls: shapes.Calls,
                  probed: _Probed, parity: dict[int, ParityReport], kept: KeptOutputs, clock: PhaseClock) -> Result:
    """The memory domains the pair is held on, the models of each probed call, then every check's verdict."""
    try:
        with harness_stage("memory domains"):
            domain_plan = domain_plan_of(backend, probed.traces, probed.evidence)
            traces = _held_traces(domain_plan, probed.traces, probed.evidence, result)
        with clock.phase("model"):
            models.changing = calls.changing
            steps, source = _probed_steps(compiled, models, traces, result, calls,
                                          backend.capabilities.exact_memory, probed.outputs_held)
        with harness_stage("model: shapes"):
            shape_figures = shapes.figures(calls, steps)
        if shape_figures is not None:
            result.shapes = shape_figures.to_json()
        with clock.phase("judge"), harness_stage("judge"):
            return _judge(backend, compiled, result, steps, source, traces, parity, domain_plan, kept)
    except HookError as exc:  # an adapter hook returned what no record can hold: its verdict names the hook
        _stop(result, Status.FAIL_RUN, str(exc))
    except KernelNotModelled as exc:  # the harness's gap, said as one: no verdict on memory it cannot model
        _stop(result, Status.FAIL_RUN, f"the harness cannot model this step's memory: {exc}", traceback.format_exc())


#: configurations a pair is judged again under, by figure, then by name
_Reruns = dict[str, dict[str, contextlib.AbstractContextManager[object]]]


def _parity_reruns(case: Case, backend: Backend, compiled: CompiledStep, workload: Workload) -> _Reruns:
    """The configurations a parity failure's reference may run again under, by figure: eager's own rounding
    of a reduced-precision step, the lowering's fallbacks."""
    rounding = backend.eager_rounding()
    reruns: _Reruns = ({EAGER_ROUNDING: {"": rounding}} if rounding is not None and _reduced_precision(case, workload)
                       else {})
    fallbacks = compiled.lowering_fallbacks()
    if fallbacks:
        reruns[LOWERING_FALLBACK] = dict(fallbacks)
    return reruns


def _explain_parity(case: Case, backend: Backend, reruns: _Reruns, judged: Result,
                    references: dict[int, CallReference], last_call: int, clock: PhaseClock) -> None:
    """Judge the pair again under each configuration in turn, until one explains its parity failure."""
    for figure, contexts in reruns.items():
        for name, context in contexts.items():
            if _judge_again(case, backend, context, judged, references, last_call, clock, figure, name):
                break  # one configuration that matches explains the failure


_REDUCED = (torch.bfloat16, torch.float16)


def _reduced_precision(case: Case, workload: Workload) -> bool:
    """Whether the step computes any bfloat16/float16 value (its user-level graph, traced once per case and
    shared: :data:`STEP_TRACES`): only such a step can round otherwise than eager.  A step that cannot be
    traced is taken as one (its failure is then run again)."""
    try:
        gm, args, _ = _USER_TRACES.trace(case, workload)
    except Exception:
        return True
    values = pytree.tree_leaves([n.meta.get("val") for n in gm.graph.nodes])
    return any(isinstance(v, torch.Tensor) and v.dtype in _REDUCED for v in [*values, *args])


def _judge_again(case: Case, backend: Backend, context: contextlib.AbstractContextManager[object],
                 result: Result, references: dict[int, CallReference], last_call: int, clock: PhaseClock,
                 figure: str, name: str) -> bool:
    """Run a pair that failed parity again, compiled afresh under ``context`` (the backend's eager rounding,
    :meth:`Backend.eager_rounding`; or ATen's kernels for a lowering known to be wrong,
    :meth:`CompiledStep.lowering_fallbacks`, ``name``), and put on its parity check, as ``figure``, whether
    every call then matches (``pass``), still differs (``fail``, with the first call that does) or could not
    run (``error``).  Returns whether every call matched."""
    check = next((c for c in result.checks if c.name == CheckName.PARITY), None)
    if check is None:
        return False
    states: dict[int, dict[str, torch.Tensor]] = {}
    with clock.phase("parity"), harness_stage(f"parity: the pair again under {figure.replace('_', ' ')} {name}"):
        torch._dynamo.reset()  # compiled afresh: no graph of the first run is reused
        try:
            with context:
                workload = case.build()
                compiled = backend.compile(case, workload)
                for call in range(last_call + 1):
                    if call:
                        workload.inputs = _inputs(case, call, backend)
                        clear_grads(workload.model)
                        compiled.prepare_call()
                    out = compiled.run()
                    results = snapshot(out)
                    del out
                    compiled.optimizer_step(workload)
                    states[call] = {**results, **after_call(workload)}
                clear_grads(workload.model)
                del compiled, workload
        except Exception as exc:
            outcome = RerunOutcome("error", error=_one_line(exc), lowering=name)
        else:
            reports = judge_calls(references, states, case)
            off = [call for call, report in reports.items() if not report.ok]
            outcome = RerunOutcome("fail", call=off[0], lowering=name) if off else RerunOutcome("pass", lowering=name)
        finally:
            torch._dynamo.reset()
    check.figures = {**(check.figures or {}), figure: outcome.to_json()}
    if result.parity is not None:
        result.parity[figure] = outcome.to_json()
    return outcome.outcome == "pass"


@dataclass(frozen=True)
class RerunOutcome:
    """A pair judged again for parity under one configuration (:func:`_judge_again`): every call matched
    (``pass``), ``call`` still differs (``fail``), or it could not run (``error``, with the error); ``lowering``
    names the known-wrong lowering it ran without ("" for the eager rounding)."""

    outcome: str
    call: int | None = None
    error: str | None = None
    lowering: str = ""

    def to_json(self) -> dict[str, object]:
        """The parity figure a record holds: ``outcome``, then ``error`` or ``call``, then ``lowering``."""
        data: dict[str, object] = {"outcome": self.outcome}
        if self.error is not None:
            data["error"] = self.error
        if self.call is not None:
            data["call"] = self.call
        if self.lowering:
            data["lowering"] = self.lowering
        return data


def _parity(case: Case, states: dict[int, dict[str, torch.Tensor]], options: RunOptions, digest: InputDigest | None,
            clock: PhaseClock) -> tuple[dict[int, ParityReport], dict[int, CallReference]]:
    """Every call's results and state against the case's references: the run's shared ones
    (:mod:`conformance.checks.references`) where another pair of the case made them for the same inputs,
    else made here (and shared)."""
    shared = SharedReferences(Path(options.references)) if options.references is not None else None
    calls = sorted(states)
    key = reference_key(case, calls, digest.hexdigest()) if digest is not None else ""
    cache = result_cache.current()
    kept = ""  # the key in the run's result cache, where the case's step could be traced (its graph is in it)
    if cache is not None and digest is not None:
        with clock.phase("parity"):
            graph = _case_graph(case)
        kept = cached_reference_key(case, calls, digest.hexdigest(), graph) if graph is not None else ""
    with clock.phase("parity"):
        if kept:
            references = load_cached_references(cache, kept) if cache is not None else None
        else:
            references = shared.load(key) if shared is not None else None
    if references is None:
        with clock.phase("reference"), harness_stage("reference: the float64 and float32 calls"):
            references = make_references(case, calls)
            if kept and cache is not None:
                store_cached_references(cache, kept, references)
            elif shared is not None:
                shared.store(key, references)
    with clock.phase("parity"), harness_stage("parity"):
        return judge_calls(references, {call: states[call] for call in calls}, case), references


def _end_call(compiled: CompiledStep, workload: Workload, results: dict[str, torch.Tensor],
              calls: shapes.Calls, step: bool = True) -> dict[str, torch.Tensor]:
    """End a call outside any probe's window: the optimizer step (a training case's, with ``step``: an
    unprobed call's, or one whose optimizer is not modelled), then copies of the state the call left
    (:func:`conformance.checks.state.after_call`) beside its results' copies."""
    if step:
        calls.not_the_step(lambda: compiled.optimizer_step(workload))
    return {**results, **after_call(workload)}


def _optimizer_model(case: Case, compiled: CompiledStep, workload: Workload, result: Result) -> OptimizerSegment | None:
    """The model of the optimizer step the probed calls hold in their window (``None``: it runs outside)."""
    if workload.optimizer is None:
        return None
    devices = {p.device.type for p in params_of(workload.model).values()}
    if devices != {"cpu"}:
        result.notes.append(f"the optimizer step ran outside the probes' window: its model is recorded and "
                            f"verified on the CPU only, these parameters are on {', '.join(sorted(devices))}")
        return None
    eager = optimizer_segment(case)
    if eager is None:
        return None
    segment = compiled.optimizer_model(eager)
    if segment is not None and not isinstance(segment, OptimizerSegment):
        raise HookError(f"CompiledStep.optimizer_model() returned {type(segment).__name__}, not an OptimizerSegment "
                        "or None")
    if segment is None:
        result.notes.append("the optimizer step ran outside the probes' window: this backend does not model "
                            "what its optimizer step allocates (CompiledStep.optimizer_model), so its memory is "
                            "not judged; the state it leaves is checked on every call")
    return segment


def _restore(workload: Workload, left: dict[str, torch.Tensor]) -> None:
    """Put the state a call left back (in place, allocating nothing) after a re-run changed it."""
    with torch.no_grad():
        for name, t in state_of(workload).items():
            if name in left and t.shape == left[name].shape:
                t.copy_(left[name])


def _freeze_survivors() -> None:
    """Move every object alive now out of the collector's sight (``gc.freeze``) for the probed calls.

    A probed call starts with a collection, so no garbage of an earlier call is freed
    inside its window.  A full collection costs a quarter of a second once torch and a
    compiler are loaded; after the freeze, a collection sees only what the probed calls
    made, which is all it needs to see: what was alive before them (garbage included)
    allocated outside every window, so its frees could only be foreign ones.  The young
    generations are collected first, so the freeze keeps little garbage; ``run_case``
    unfreezes when the pair ends."""
    gc.collect(1)
    gc.freeze()


def _judge(backend: Backend, compiled: CompiledStep, result: Result, steps: list[ProbedStep],
           source: str, traces: list[tuple[int, list[MemoryTrace]]], parity: dict[int, ParityReport],
           domains: DomainPlan | None = None, kept: KeptOutputs | None = None) -> Result:
    result.notes.extend(boundary.notes(compiled.notes()))
    fallbacks = boundary.fallbacks(compiled.fallbacks())
    result.fallbacks = [f.to_json() for f in fallbacks]
    result.notes.extend(f"fallback: {f.describe()}" for f in fallbacks)
    if any(t.domain == CpuAllocatorProbe.domain for _, ts in traces for t in ts) and (why := fallback_reason()):
        result.notes.append(f"CPU allocator recorded by the profiler, not the native observer: {why}")
    held_by = _held_by(steps)
    exact_domain = all(all(t.exact for t in ts) for _, ts in traces)
    figures: list[MemoryFigures] = []
    extras: list[Check | tuple[str, str] | None] = []

    def memory() -> MemoryFigures:
        """The record's figures, with what the adapter found (its hooks run once, when a check first asks)."""
        if not figures:
            figures.append(_memory_figures(backend, steps, source, traces))
            result.memory = figures[0]
            try:
                found = compiled.memory_findings(steps[-1].observation or Observation(), [s.trace for s in steps])
                extra = compiled.contract_check()
            except Exception as exc:
                result.notes.append(traceback_tail(traceback.format_exc(), 4000, code_roots()))
                found, extra = {}, Check(CheckName.POOL, Status.FAIL_RUN, f"contract check failed: {_one_line(exc)}")
            result.checks = checks  # a hook's bad return below is the verdict; the checks made so far stay on record
            figures[0].findings = boundary.findings(found)
            extras.append(boundary.contract(extra))
        return figures[0]

    def contract() -> Check | tuple[str, str] | None:
        memory()
        return extras[0]

    judging = Judging(steps, backend.capabilities.exact_memory, backend.peak_slack_bytes, source, parity,
                      exact_domain, held_by, memory, contract, domains.unobserved if domains is not None else (),
                      kept)
    checks: list[Check] = []
    for spec in registered_checks():  # in precedence order: the checks that need the hooks come after peak
        if judging.unobserved and spec.name in MEMORY_CHECKS:
            continue  # bytes no probe observed: the measured ones alone would say nothing
        check = spec.judge(judging) if spec.judge is not None else None
        if check is not None:
            checks.append(check)
    result = _decide(result, checks)
    _headline(memory(), checks, steps)
    _name_domain_bytes(result, memory(), steps)
    return result


def _name_domain_bytes(result: Result, memory: MemoryFigures, steps: list[ProbedStep]) -> None:
    """An excess blame could not name in full, where a runtime allocates in a domain of its own (IREE's
    HAL): named by the buffers that domain's compiled program handled, where the probe recorded them
    (:func:`conformance.checks.blame.runtime_buffers`: a result still alive, the call's transients, its
    results or input copies over the model's), else by what it allocated at its peak, results apart from
    transients and input copies, so the bytes are named by what made them rather than "none named"."""
    unnamed = memory.blame_unexplained_bytes
    invocations = memory.findings.get("iree_invocations")
    if unnamed is None or unnamed <= 0 or not isinstance(invocations, list):
        return
    last = steps[-1]  # the call the runtime's figures are of; another judged call must have measured the same
    judged = next((s for s in steps if memory.contract is not None and s.call == memory.contract.call), None)
    same = judged is not None and (judged is last or (
        judged.trace.peak_bytes == last.trace.peak_bytes and judged.model.peak_bytes == last.model.peak_bytes
        and judged.trace.residual_bytes == last.trace.residual_bytes
        and judged.model.residual_bytes == last.model.residual_bytes))
    entries: list[dict[str, Any]] = []
    if same and memory.check in ("residual", "peak"):
        entries = runtime_buffers(invocations, last.model, memory.check, unnamed)
    if entries:
        rest = unnamed - sum(int(e["bytes"]) for e in entries)
        before = f" ({unnamed} B of the excess not named)"
        after = f" ({rest} B of the excess not named)" if rest > 0 else ""
        named = ", ".join(f"{e['producer']} ({e['bytes']} B)" for e in entries[:3])  # as judge.names words them
        deciding = next((c for c in result.checks if c.name.value == memory.check), None)
        for holder in (result, deciding):
            if holder is None or result.status == Status.PASS or before not in holder.reason:
                continue
            if not memory.blamed:
                holder.reason = holder.reason.replace("no single allocation" + before, named + after, 1)
            else:
                holder.reason = holder.reason.replace(before, f", {named}{after}", 1)
        memory.blamed.extend(entries)  # the deciding check's own list
        memory.blame_unexplained_bytes = rest if rest > 0 else None
        note = (f"{unnamed} B the allocations could not name, named in {CHECK_DOMAIN} by its program's buffers: "
                + "; ".join(f"{e['producer']} ({e['bytes']} B)" for e in entries)
                + (f"; {rest} B left unnamed" if rest > 0 else ""))
        memory.blame_note = note
        if rest <= 0:
            return
    breakdown = invocation_breakdown(invocations, CHECK_DOMAIN)
    if breakdown:
        memory.blame_note = f"{memory.blame_note}; {breakdown}" if memory.blame_note else breakdown
        if memory.check is not None and result.status != Status.PASS and "not named)" in result.reason:
            short = invocation_breakdown(invocations, CHECK_DOMAIN, short=True)
            result.reason = result.reason.replace("not named)", f"not named; {short})", 1)


#: the runtime domain whose per-call figures name bytes (IREE's HAL allocator)
CHECK_DOMAIN = "iree-hal"


def _held_by(steps: list[ProbedStep]) -> dict[int, list[str]]:
    """What still holds the last probed call's allocations it left alive beyond its model's residual (a
    leak's storage, found by its address: :mod:`conformance.probes.owners`); nothing to find otherwise."""
    last = steps[-1]
    if last.trace.residual_bytes <= last.model.residual_bytes:
        return {}
    gc.unfreeze()  # the probed calls are over: the frozen survivors (a module's list) may be the holders
    return holders({a.ptr: a.nbytes for a in last.trace.still_alive()})


def _headline(memory: MemoryFigures, checks: list[Check], steps: list[ProbedStep]) -> None:
    """The record's headline figures are the deciding check's (the peak check's where no memory check
    decided), of the call it judged (peaks, residuals, timelines): one story, never a failing verdict
    beside figures that pass.  A check with no peak of its own (residual, backward inputs) shows the
    peak of the call it judged (the peak check's call where it names none) beside its contract.
    Every check's own figures stay in ``checks``."""
    deciding = combine(checks)
    peak = next((c for c in checks if c.name == CheckName.PEAK), None)
    check = deciding if deciding is not None and deciding.contract is not None else peak
    if check is None:
        return
    figures = check.figures
    memory.check, memory.contract = check.name.value, check.contract
    memory.blamed = check.blamed
    memory.blame_unexplained_bytes = figures.get("blame_unexplained_bytes")
    memory.blame_note = figures.get("blame_note")
    shown = check if check.name in (CheckName.PEAK, CheckName.PROGRAM) else peak  # whose peak is shown
    if shown is not None and "measured_peak_bytes" in shown.figures:
        memory.measured_peak_bytes = shown.figures["measured_peak_bytes"]
    if shown is not None and shown.name == CheckName.PEAK:
        memory.model_peak_bytes = shown.figures.get("model_peak_bytes", memory.model_peak_bytes)
        memory.model_source = shown.figures.get("model_source", memory.model_source)
        memory.peak_contract = shown.figures.get("contract", memory.peak_contract)
    elif shown is not None:
        memory.model_peak_bytes = shown.figures.get("program_peak_bytes", memory.model_peak_bytes)
        memory.model_source = "generated program"
        memory.peak_contract = "the program's own timeline"
    if check.name == CheckName.RESIDUAL and "measured_residual_bytes" in figures:
        memory.measured_residual_bytes = figures["measured_residual_bytes"]
        memory.model_residual_bytes = figures["model_residual_bytes"]
    call = check.contract.call if check.contract is not None else None
    if call is None and shown is not None:
        call = shown.figures.get("call")
    step = next((s for s in steps if s.call == call), None)
    if step is None:
        return
    memory.call = step.call
    if check.name != CheckName.RESIDUAL:  # the residual the call's own timeline ends at
        memory.measured_residual_bytes = step.trace.residual_bytes
        memory.model_residual_bytes = step.model.residual_bytes
    if step.program is not None:
        memory.program_peak_bytes = step.program.peak_bytes
        memory.program_timeline = model_points(step.program.events, step.program.live_bytes)
    program_story = shown is not None and shown.name == CheckName.PROGRAM and step.program is not None
    model = step.program if program_story and step.program is not None else step.model
    # the timeline of the figures: without the ops' own transients where the peak check set them apart
    apart = shown is not None and "op_transient_peak_bytes" in shown.figures
    trace = without_op_transients(step.trace) if apart else step.trace
    if check.name not in (CheckName.PEAK, CheckName.PROGRAM):  # the peak of the call whose story it is
        memory.measured_peak_bytes, memory.model_peak_bytes = trace.peak_bytes, model.peak_bytes
    memory.timeline = [TimelinePoint(*p) for p in trace.relative_timeline()]
    memory.model_timeline = model_points(model.events, model.live_bytes)
    memory.peak_event = model.events[model.peak_event] if model.events else None
    memory.user_model_peak_bytes = step.user_model.peak_bytes
    memory.user_model_made_bytes = step.user_model.made_bytes
    memory.foreign_free_bytes = trace.foreign_free_bytes


def _inputs(case: Case, call: int, backend: Backend) -> tuple[torch.Tensor, ...]:
    """A call's fresh inputs, on the backend's device, made before (outside) any probe window."""
    device = backend.capabilities.devices[0] if backend.capabilities.devices else "cpu"
    inputs = case.inputs_for(call)
    return inputs if device == "cpu" else tuple(t.to(device) for t in inputs)


def _probed_steps(
    compiled: CompiledStep, models: _Models, traces: list[tuple[int, list[MemoryTrace]]], result: Result,
    calls: shapes.Calls, exact: bool = False, outputs_held: dict[int, int] | None = None,
) -> tuple[list[ProbedStep], str]:
    steps = []
    source = "user-graph"
    for call, domain_traces in traces:
        trace = _one_trace(domain_traces)
        user, observation = models.user(call)
        observation = observation.copy()
        observation.call = calls.run_of(call)  # the backend's models are of the graphs this run ran
        with harness_stage("model: received graphs"):
            received = models.received(compiled, observation, result)
        with harness_stage("model: generated program"):
            program = models.program(compiled, observation, result)
        breaks = calls.graph_breaks()
        source = "received-graphs"
        with harness_stage("model: split graphs"):  # the graphs a split call ran, composed in order
            split = models.split(compiled, observation, result) if breaks or received is None else None
        if breaks or split is not None:  # eager PyTorch runs part of the step: no received graph is all of it
            received, source = split, SPLIT_SOURCE
            note = ("received graphs not held alone: Dynamo broke the step (held to the graphs it ran, composed)"
                    if received is not None else
                    "received graphs not held alone: Dynamo broke the step (held to the user-level model)")
            if note not in result.notes:
                result.notes.append(note)
        source = source if received is not None else "user-graph"
        held, low = received or user, None
        with harness_stage("model: user-kernels trace"):
            eager = models.eager(compiled, call)
            low = models.eager_low(call) if eager is not None and exact else None
        if eager is not None:  # the received graphs (if any) do not cover the modules run eagerly
            held, source = eager, "user-kernels"
            if program is not None:  # nor does the program: it is one part of the measured step
                program = None
                note = ("generated program not held to the measured timeline: it covers the compiled part of "
                        "a step whose other modules run eagerly (the step is held to the user-kernels model)")
                if note not in result.notes:
                    result.notes.append(note)
        for reason in breaks[:3]:  # the evidence of a split step (conformance.checks.mechanism.graph_break_split)
            note = GRAPH_BREAK_NOTE + clip(_ADDRESS.sub("", " ".join(reason.split())), 300)
            if note not in result.notes:
                result.notes.append(note)
        if program is not None and breaks:  # Dynamo broke the step: eager PyTorch runs part of it, outside
            program = None                   # every generated program
            reason = clip(breaks[0].strip().splitlines()[0], 200)
            note = ("generated program not held to the measured timeline: it covers the compiled part of a step "
                    f"Dynamo broke into graphs and eager code ({reason})")
            if note not in result.notes:
                result.notes.append(note)
        compiling = calls.compiling.get(call)
        steps.append(ProbedStep(call, trace, held, user, program, observation, calls.new_graphs(call),
                                calls.label(call), _one_trace(compiling) if compiling is not None else None,
                                low, (outputs_held or {}).get(call, 0)))
    return steps, source


_ADDRESS = re.compile(r" (?:object )?at 0x[0-9a-f]+")  # an object's address in a reason: not the same twice


def _one_trace(domain_traces: list[MemoryTrace]) -> MemoryTrace:
    return domain_traces[0] if len(domain_traces) == 1 else combine_traces(domain_traces)


class _Models:
    """The models each probed call is held to, per observation (loop trip counts differ with inputs)."""

    def __init__(self, case: Case) -> None:
        self.case = case
        #: the case's shapes change between calls (declared, or seen in its inputs)
        self.changing = case.shapes is not None
        self._user: dict[int, tuple[LifetimeModel, Observation]] = {}
        #: the optimizer step's model, appended to every model a probed call is held to (``None``: the
        #: step has no optimizer in the probes' window)
        self.optimizer: OptimizerSegment | None = None
        self._backend: dict[tuple[str, tuple[int, ...], int], LifetimeModel | None] = {}
        self._eager: dict[int, LifetimeModel] = {}
        self._eager_low: dict[int, LifetimeModel] = {}
        #: the case's step has modules ``torch.compile`` leaves to eager (:func:`eager_modules`)
        self.eager_modules = False
        #: the parameters and buffers (host copies, by record name) each call found
        self.found: dict[int, dict[str, torch.Tensor]] = {}
        #: the step's graph depends on its values (:func:`conformance.api.step.depends_on_data`)
        self.depends_on_data = False

    def _key(self, call: int) -> int:
        """Whose model a call is held to: its own where the graph depends on the inputs' values (a loop's
        trip counts, a step traced on its values) or shapes, else the one model of every call."""
        return call if self.case.kind == "loop" or self.changing or self.depends_on_data else 0

    def user(self, call: int) -> tuple[LifetimeModel, Observation]:
        key = self._key(call)
        if key not in self._user:
            with harness_stage("model: user-level trace"):
                model, observation, depends = _user_model(self.case, call, self.found.get(call))
            if depends and not self.depends_on_data:  # known from the first model built
                self.depends_on_data, key = True, call
            self._user[key] = self._with_optimizer(model), observation
        return self._user[key]

    def eager(self, compiled: CompiledStep, call: int) -> LifetimeModel | None:
        """The model of the step as eager PyTorch runs it with the user's kernels, for a backend that
        leaves modules of this case's step to eager (:meth:`CompiledStep.leaves_modules_to_eager`);
        None for every other pair."""
        if not (self.eager_modules and compiled.leaves_modules_to_eager()):
            return None
        observation = self.user(call)[1]
        key = self._key(call)
        if key not in self._eager:
            self._eager[key] = self._with_optimizer(
                user_kernels_model(self.case, call, observation, found=self.found.get(call)))
        return self._eager[key]

    def eager_low(self, call: int) -> LifetimeModel:
        """The lower bound of :meth:`eager`'s model (built after it, for an exact backend's contract)."""
        observation = self.user(call)[1]
        key = self._key(call)
        if key not in self._eager_low:
            self._eager_low[key] = self._with_optimizer(
                user_kernels_model(self.case, call, observation, high=False, found=self.found.get(call)))
        return self._eager_low[key]

    def _with_optimizer(self, model: LifetimeModel) -> LifetimeModel:
        return model if self.optimizer is None else with_optimizer_step(model, self.optimizer)

    def received(self, compiled: CompiledStep, observation: Observation, result: Result) -> LifetimeModel | None:
        return self._of_backend("received graphs not modelled ({}); held to the user-level model",
                                compiled.received_model, observation, result)

    def split(self, compiled: CompiledStep, observation: Observation, result: Result) -> LifetimeModel | None:
        return self._of_backend("split step not composed ({}); held to the user-level model",
                                compiled.split_model, observation, result)

    def program(self, compiled: CompiledStep, observation: Observation, result: Result) -> LifetimeModel | None:
        return self._of_backend("generated program not modelled: {}", compiled.program_model, observation, result)

    def _of_backend(self, why_not: str, build: Callable[[Observation], LifetimeModel | None],
                    observation: Observation, result: Result) -> LifetimeModel | None:
        """A model the backend builds (once per trip counts); one it cannot build is a note, not a verdict."""
        # a case whose shapes change may run other graphs, at other sizes, on every call
        key = (why_not, tuple(observation.trip_counts), observation.call if self.changing else -1)
        if key not in self._backend:
            try:
                built = boundary.model(build(observation.copy()), _hook_name(build))
                self._backend[key] = None if built is None else self._with_optimizer(built)
            except ModelError as exc:
                self._backend[key] = None
                result.notes.append(why_not.format(exc))
        return self._backend[key]


def _hook_name(build: Callable[..., Any]) -> str:
    return f"CompiledStep.{getattr(build, '__name__', 'model')}()"


def user_level_model(case: Case, call: int = 0) -> tuple[LifetimeModel, Observation]:
    """The lifetime model of the case's own step on the ``call``-th inputs, with loop trip counts from a real run."""
    model, observation, _ = _user_model(case, call)
    return model, observation


def _user_model(case: Case, call: int, found: dict[str, torch.Tensor] | None = None
                ) -> tuple[LifetimeModel, Observation, bool]:
    """:func:`user_level_model` on the parameters and buffers the call ``found`` (by record name; the
    built ones without), and whether its graph depends on the values (then it is this call's only)."""
    workload = _workload_of_call(case, call, found)
    gm, args, _ = _USER_TRACES.trace(case, workload)
    retained = list(range(1, 1 + len(params_of(workload.model))) if case.trains else ())
    cache, key = result_cache.current(), ""
    depends = depends_on_data(gm)
    if cache is not None:  # the graph, and where its loops' trip counts follow them, the values it runs on
        values = None
        if depends or any(is_while_loop(n) for m in gm.modules() if isinstance(m, torch.fx.GraphModule)
                          for n in m.graph.nodes):
            digest = InputDigest()
            digest.add("args", list(args))
            values = digest.hexdigest()
        key = cached_models.model_key(USER_MODEL, cached_models.graph_digest(gm), values, retained)
        kept = cached_models.load(cache, USER_MODEL, key)
        if kept is not None:
            model, extra = kept
            return model, cached_models.decode_observation(extra["observation"]), bool(extra["depends"])
    executor = GraphExecutor(label_ranges=False)
    with torch.no_grad():
        executor.run(gm, list(args))
    model = model_graph(gm, executor.observation.copy(), retained, cache_as=None)
    if cache is not None:
        with contextlib.suppress(cached_models.NotCachable):
            cached_models.store(cache, USER_MODEL, key, model,
                                {"observation": cached_models.encode_observation(executor.observation),
                                 "depends": depends})
    return model, executor.observation, depends


#: the result cache's kind of entry for the models of the case's own step
USER_MODEL = "user-model"


def warm_cache_keys() -> None:
    """Read the code digests every result cache key holds (:func:`conformance.util.result_cache.source_digest`:
    the sources of the models' and the references' code, parsed for their imports; seconds on a loaded machine)
    once, in the fork server before any worker forks: each worker inherits them instead of reading them again."""
    result_cache.source_digest(*cached_models.MODEL_SOURCES)
    result_cache.source_digest(*REFERENCE_SOURCES)
    result_cache.machine()


def _case_graph(case: Case) -> str | None:
    """A digest of the case's user-level step (its graph on call 0's inputs), what its references are kept in
    the result cache under beside its inputs' values; ``None`` where the step cannot be traced (its references
    are then made by every run).  Traced once per case and process (:data:`STEP_TRACES`), as its model is."""
    kept = _CASE_GRAPHS.get(id(case))
    if kept is not None and kept[0] is case:
        return kept[1]
    try:
        gm, _, _ = _USER_TRACES.trace(case, _workload_of_call(case, 0, None))
        graph: str | None = cached_models.graph_digest(gm)
    except Exception:
        graph = None
    _CASE_GRAPHS[id(case)] = (case, graph)
    return graph


#: per case object (kept alive in the value, so its id is not reused): its step's graph digest
_CASE_GRAPHS: dict[int, tuple[Case, str | None]] = {}


_USER_TRACES = STEP_TRACES  # the user-level graphs, shared with the eager backend's steps


def _workload_of_call(case: Case, call: int, found: dict[str, torch.Tensor] | None) -> Workload:
    """A fresh build of the case with the ``call``-th inputs and the state that call found."""
    workload = case.build()
    if call:
        workload.inputs = case.inputs_for(call)
    if found:
        named: dict[str, torch.Tensor] = {f"param[{n}]": p for n, p in workload.model.named_parameters()}
        named.update({f"buffer[{n}]": b for n, b in workload.model.named_buffers()})
        with torch.no_grad():
            for name, value in found.items():
                target = named.get(name)
                if target is not None and target.shape == value.shape:
                    target.copy_(value)
    return workload


def user_kernels_model(case: Case, call: int, observation: Observation,
                       high: bool = True, found: dict[str, torch.Tensor] | None = None) -> LifetimeModel:
    """The lifetime model of the case's step on the ``call``-th inputs as eager PyTorch runs it with the
    user's kernels (:func:`conformance.api.step.trace_user_kernels`): oneDNN's RNN layers with their
    workspace and scratchpad, the C++ composites' and autograd nodes' scopes.  ``high``: kernels whose
    workspace depends on the CPU count their upper bound and values are held to their scopes' ends,
    so the model bounds the measurement from above; ``False``: their lower bound and every value to
    its last use, a bound from below (what an exact backend's peak must not go under)."""
    workload = _workload_of_call(case, call, found)
    gm = trace_user_kernels(workload, case.trains, scopes=high)
    retained = range(1, 1 + len(params_of(workload.model))) if case.trains else ()
    return model_graph(gm, observation.copy(), retained, high=high, cache_as=USER_MODEL)


def probed_step(
    compiled: CompiledStep,
    model: torch.nn.Module,
    make_probe: Callable[[], MemoryProbe] = CpuAllocatorProbe,
    keep_results: bool = False,
    optimizer: Callable[[], None] | None = None,
    seen: StepEvidence | None = None,
    held: list[int] | None = None,
    owned: frozenset[int] = frozenset(),
    inputs: Sequence[Any] = (),
) -> tuple[list[MemoryTrace], dict[str, torch.Tensor]]:
    """One step inside the probes' window; outputs are dropped inside it, grads kept; then, with
    ``optimizer``, the optimizer's step and ``zero_grad(set_to_none=True)`` inside it too.

    Returns the backend's main probe's trace (the torch CPU allocator unless the backend
    says otherwise), then one trace per extra domain the step declares; and, with
    ``keep_results``, copies of the step's results (gradients included) made outside torch's
    allocators before the optimizer runs.  With ``seen``, the native domain is recorded too where this
    process preloads its observer, and ``seen`` gets its trace and the results torch's allocator did not
    make (the engine decides whether the pair is held on it: :mod:`conformance.checks.domains`).  ``held``: the
    bytes of the outputs it dropped whose storages are still alive when the window closes are appended
    (outputs sharing a storage in ``owned``, the step's state, aside)."""
    clear_grads(model)
    compiled.prepare_call()
    gc.collect()
    extras = compiled.extra_probes()
    files = boundary.files(compiled.program_files())
    kept: dict[str, torch.Tensor] = {}
    native = native_heap.NativeHeapProbe() if seen is not None and native_heap.unavailable_reason() is None else None
    known = _callers_addresses(model, inputs) if seen is not None else set()
    with make_probe() as probe, contextlib.ExitStack() as stack:
        for extra in extras:
            stack.enter_context(extra)
        if native is not None:
            stack.enter_context(native)
        statements = stack.enter_context(StatementTracer(files))
        out: StepOutput | None = compiled.run()
        returned = time.time_ns()
        if seen is not None and out is not None:
            seen.outside = native_heap.outside_storages(out.named(), known)
        if keep_results and out is not None:
            with native.paused() if native is not None else contextlib.nullcontext():
                kept = snapshot(out)
        dropped_outputs = _dropped_outputs(out, owned) if held is not None else []
        del out
        dropped = time.time_ns()
        if optimizer is not None:
            optimizer()
        stepped = time.time_ns() if optimizer is not None else None  # the gradients dropped (zero_grad)
    if held is not None:
        held.append(sum(nbytes for weak, nbytes in dropped_outputs if not weak.expired()))
    main = attribute(probe.trace, statements.spans) if probe.domain == CpuAllocatorProbe.domain else probe.trace
    if seen is not None and native is not None:
        _native_evidence(seen, native, returned, dropped, stepped)
    return [main, *(extra.trace for extra in extras)], kept


def _callers_addresses(model: torch.nn.Module, inputs: Sequence[Any]) -> set[int]:
    """The addresses of the caller's own tensors (parameters, buffers, this call's inputs): a result in their
    memory (a view of an input, an input returned) is the caller's, made before the call, whatever allocated it."""
    callers = [*model.parameters(), *model.buffers(),
               *(t for t in tree_flatten(list(inputs))[0] if isinstance(t, torch.Tensor))]
    return {_data_ptr(t) for t in callers} - {0}


def _native_evidence(seen: StepEvidence, native: native_heap.NativeHeapProbe, returned: int, dropped: int,
                     stepped: int | None) -> None:
    """The native domain's trace into ``seen``, with the results torch's allocator did not make placed in the
    pools that hold them: a result in a pool occupies its bytes while the caller holds it (outputs to their
    drop, gradients to the optimizer's zero_grad, or past the window)."""
    if seen.outside:
        seen.outside = native.pooled(seen.outside)
        native.count_pooled([(s, returned, dropped if s.what.startswith("output") else stepped)
                             for s in seen.outside if s.pool is not None])
    seen.native, seen.native_lost = native.trace, native.lost


@dataclass
class StepEvidence:
    """What a probed call showed beside its domains' traces: the native domain's trace (where this process
    records it) and the results whose storage torch's allocator did not make."""

    native: MemoryTrace | None = None
    native_lost: int = 0  # events the native observer could not keep (its figures are then low)
    outside: list[native_heap.OutsideStorage] = field(default_factory=list)


def domain_plan_of(backend: Backend, traces: list[tuple[int, list[MemoryTrace]]],
                   evidence: dict[int, StepEvidence]) -> DomainPlan:
    """The domains the pair is held on and the memory no probe observed (:func:`conformance.checks.domains.plan`)."""
    probed = {t.domain for _, ts in traces for t in ts}
    return plan(backend.capabilities.memory_domains, probed, not probed <= {CpuAllocatorProbe.domain},
                native_heap.unavailable_reason(), {c: e.outside for c, e in evidence.items()},
                {c: e.native for c, e in evidence.items() if e.native is not None},
                {c: t for c, ts in traces for t in ts if t.domain == CpuAllocatorProbe.domain})


def _held_traces(domains: DomainPlan, traces: list[tuple[int, list[MemoryTrace]]],
                 evidence: dict[int, StepEvidence], result: Result) -> list[tuple[int, list[MemoryTrace]]]:
    """Each probed call's traces, with the native domain's where the pair is held on it (and a note of its
    bytes by library, of the call with the highest native peak)."""
    if not domains.held_on_native:
        return traces
    held = []
    for call, ts in traces:
        native = evidence[call].native if call in evidence else None
        held.append((call, [*ts, native] if native is not None else ts))
    natives = [(call, e.native) for call, e in evidence.items() if e.native is not None]
    if natives:
        call, worst = max(natives, key=lambda ct: ct[1].peak_bytes)
        made = ", ".join(f"{lib} {n} B" for lib, n in list(native_heap.by_library(worst).items())[:4]) or "none"
        alive = ", ".join(f"{lib} {n} B" for lib, n in
                          list(native_heap.by_library(worst, still_alive=True).items())[:4]) or "none"
        result.notes.append(f"held on the native domain (results outside torch's allocator, or declared): call "
                            f"{call} peaked at {worst.peak_bytes} B there; allocated by {made}; left alive by {alive}")
    pooled = {(s.what, s.pool, s.pool_bytes) for e in evidence.values() for s in e.outside if s.pool is not None}
    if pooled:
        result.notes.append("results in native memory made before the probed call (a pool; counted while "
                            "the caller holds them): " + "; ".join(f"{what} in {pool}'s {n} B"
                                                    for what, pool, n in sorted(pooled)[:4]))
    lost = sum(e.native_lost for e in evidence.values())
    if lost:
        result.notes.append(f"the native observer could not keep {lost} events: its figures are low")
    return held


def _data_ptr(t: torch.Tensor) -> int:
    """A tensor's storage's address; 0 where it has none of its own (autograd's zero tensor)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return 0


def _storages_of(named: dict[str, torch.Tensor]) -> frozenset[int]:
    return frozenset(_data_ptr(t) for t in named.values()) - {0}


def _dropped_outputs(out: StepOutput | None, owned: frozenset[int]) -> list[tuple[Any, int]]:
    """Weak references to the storages of the outputs the caller is about to drop, with their bytes (one per
    storage; those of the step's state, ``owned``, aside): one still alive when the window closes is held by
    something else, in any memory domain."""
    from torch.multiprocessing.reductions import StorageWeakRef

    found: dict[int, tuple[Any, int]] = {}
    for t in (out.outputs if out is not None else []):
        if not isinstance(t, torch.Tensor):
            continue
        try:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # no storage (autograd's zero tensor)
            continue
        if ptr and ptr not in owned and ptr not in found:
            found[ptr] = (StorageWeakRef(storage), storage.nbytes())
    return list(found.values())


def _parity_figures(reports: dict[int, ParityReport]) -> dict[str, Any]:
    """The worst checked call's figures (a failing one first), and every checked call's under ``calls``."""
    worst = min(reports, key=lambda c: (reports[c].ok, -max((t.rel_err for t in reports[c].tensors), default=0)))
    return {**reports[worst].to_json(), "call": worst, "calls": {str(c): r.to_json() for c, r in reports.items()}}


#: the most points of a model's timeline a record keeps
MODEL_POINTS = 2000


def model_points(events: Sequence[str], live_bytes: Sequence[int]) -> list[ModelPoint]:
    """A model's timeline as a record keeps it: its first :data:`MODEL_POINTS` events with the bytes live after each."""
    return [ModelPoint(e, b) for e, b in zip(events[:MODEL_POINTS], live_bytes[:MODEL_POINTS])]


def _memory_figures(backend: Backend, steps: list[ProbedStep], source: str,
                    traces: list[tuple[int, list[MemoryTrace]]]) -> MemoryFigures:
    """The figures the report and history show: the worst step's timeline against its model."""
    worst = max(steps, key=lambda s: (s.trace.peak_bytes - s.model.peak_bytes, s.call))
    trace, model = worst.trace, worst.model
    exact = backend.capabilities.exact_memory
    return MemoryFigures(
        domain=trace.domain,
        model_source=source,
        model_peak_bytes=model.peak_bytes,
        measured_peak_bytes=trace.peak_bytes,
        model_residual_bytes=steps[-1].model.residual_bytes,
        measured_residual_bytes=steps[-1].trace.residual_bytes,
        residual_per_step=[s.trace.residual_bytes for s in steps],
        peak_per_step=[s.trace.peak_bytes for s in steps],
        user_model_peak_bytes=worst.user_model.peak_bytes,
        user_model_made_bytes=worst.user_model.made_bytes,
        peak_contract="equal" if exact else f"<= model + {backend.peak_slack_bytes}",
        peak_event=model.events[model.peak_event] if model.events else None,
        foreign_free_bytes=trace.foreign_free_bytes,
        timeline=[TimelinePoint(*p) for p in trace.relative_timeline()],
        model_timeline=model_points(model.events, model.live_bytes),
        program_peak_bytes=worst.program.peak_bytes if worst.program is not None else None,
        program_timeline=(model_points(worst.program.events, worst.program.live_bytes)
                          if worst.program is not None else None),
        peak_slack_reason=backend.peak_slack_reason if backend.peak_slack_bytes else None,
        domains=(domain_summary([ts for _, ts in traces], [s.trace for s in steps])
                 if any(len(ts) > 1 for _, ts in traces) else None),
    )


def domain_summary(domain_traces: list[list[MemoryTrace]], combined: list[MemoryTrace]) -> dict[str, DomainFigures]:
    """Peak and residual per domain (worst probed step) and of their sum."""
    summary: dict[str, DomainFigures] = {}
    for i, first in enumerate(domain_traces[0]):
        per_step = [d[i] for d in domain_traces]
        summary[first.domain] = DomainFigures(max(t.peak_bytes for t in per_step), per_step[-1].residual_bytes,
                                              [t.residual_bytes for t in per_step])
    summary["combined"] = DomainFigures(max(t.peak_bytes for t in combined), combined[-1].residual_bytes,
                                        [t.residual_bytes for t in combined])
    return summary


def _decide(result: Result, checks: list[Check]) -> Result:
    result.checks = checks
    deciding = combine(checks)
    if deciding is not None:
        result.excess_bytes = deciding.excess_bytes
        return _verdict(result, deciding.status, deciding.reason)
    unjudged = next((c for c in checks if c.status == Status.SKIP), None)
    if unjudged is not None:  # memory not observed: never a pass (conformance.checks.domains)
        return _verdict(result, Status.SKIP, unjudged.reason)
    return _verdict(result, Status.PASS, "")


#: the attribute an exception raised inside :func:`harness_stage` carries: the innermost stage's name
_STAGE = "conformance_stage"


@contextlib.contextmanager
def harness_stage(name: str) -> Iterator[None]:
    """A stage of the harness's own work (``"model: user-level trace"``): an error raised inside it names it
    (:func:`stage_of`), so its verdict says where the harness failed."""
    try:
        yield
    except Exception as exc:
        if not hasattr(exc, _STAGE):
            with contextlib.suppress(AttributeError, TypeError):
                setattr(exc, _STAGE, name)
        raise


def stage_of(exc: BaseException) -> str:
    return str(getattr(exc, _STAGE, "the engine"))


def _verdict(result: Result, status: Status, reason: str, detail: str = "") -> Result:
    result.status = status
    result.reason = without_escapes(reason)  # a vendor's coloured message: its words, not its terminal codes
    if detail:
        result.notes.append(traceback_tail(without_escapes(detail), 4000, code_roots()))
    return result


def _is_compile_error(exc: BaseException) -> bool:
    if isinstance(exc, CompileError):
        return True
    mod = type(exc).__module__
    return mod.startswith(("torch._dynamo", "torch._inductor", "torch._functorch"))


def _one_line(exc: BaseException) -> str:
    text = [ln.strip() for ln in without_escapes(str(exc)).strip().splitlines() if ln.strip()]
    first = text[0] if text else ""
    if first.endswith("raised:") and len(text) > 1:  # Dynamo's BackendCompilerFailed: the cause is next
        first = f"{first} {text[1]}"
    return clip(f"{type(exc).__name__}: {first}", 500)
