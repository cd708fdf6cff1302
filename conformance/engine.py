"""Runs one case on one backend and decides its verdict, with the numbers behind it."""

from __future__ import annotations

import contextlib
import gc
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from conformance.adapter import Backend, CompiledStep, CompileError
from conformance.blame import blame_peak, blame_residual
from conformance.case import Case
from conformance.interpreter import GraphExecutor
from conformance.lifetime import LifetimeModel, ModelError, model_graph
from conformance.parity import compare
from conformance.probe import CpuAllocatorProbe, MemoryProbe, MemoryTrace, combine_traces
from conformance.result import Result
from conformance.step import StepOutput, clear_grads, params_of, reference_step, trace_step

PROBED_STEPS = 2  # residual must be exact on each, so growth over steps is caught too


def repro_command(case: Case, backend: str) -> str:
    return f"conformance run --case {case.id} --backend {backend}"


def run_case(case: Case, backend: Backend) -> Result:
    result = Result(
        case.id, backend.name, "pass", seed=case.seed, kind=case.kind, family=case.family,
        versions=backend.versions(), repro=repro_command(case, backend.name),
    )
    unavailable = backend.unavailable_reason()
    if unavailable:
        return _verdict(result, "skip", unavailable)
    missing = backend.capabilities.missing_for(case)
    if missing:
        return _verdict(result, "skip", f"backend lacks capability: {', '.join(missing)}")
    try:
        return _run(case, backend, result)
    finally:
        torch._dynamo.reset()
        gc.collect()


def _run(case: Case, backend: Backend, result: Result) -> Result:
    reference = reference_step(case, torch.float64).named()
    eager32 = reference_step(case, torch.float32).named()
    user_model, observation = user_level_model(case)

    workload = case.build()
    t0 = time.perf_counter()
    try:
        compiled = backend.compile(case, workload)
        first = compiled.run()
    except Exception as exc:
        status = "fail-compile" if _is_compile_error(exc) or "compiled" not in locals() else "fail-run"
        return _verdict(result, status, _one_line(exc), traceback.format_exc())
    result.timing["compile_s"] = time.perf_counter() - t0

    parity = compare(first.named(), reference, eager32, case.tolerance)
    result.parity = parity.to_json()
    del first
    clear_grads(workload.model)

    try:
        t1 = time.perf_counter()
        out = compiled.run()
        result.timing["run_s"] = time.perf_counter() - t1
        del out
        domain_traces = [probed_step(compiled, workload.model, backend.make_probe) for _ in range(PROBED_STEPS)]
    except Exception as exc:
        return _verdict(result, "fail-run", _one_line(exc), traceback.format_exc())
    finally:
        clear_grads(workload.model)

    try:
        received = compiled.received_model(observation)
    except ModelError as exc:
        received = None
        result.notes.append(f"received graphs not modelled ({exc}); held to the user-level model")
    result.notes.extend(compiled.notes())
    model = received or user_model
    traces = [d[0] if len(d) == 1 else combine_traces(d) for d in domain_traces]
    status, reason = judge_memory(result, backend, model, user_model, traces,
                                  "received-graphs" if received else "user-graph")
    if status == "pass" and parity.ok:
        try:
            extra = compiled.contract_check()
        except Exception as exc:
            extra = ("fail-run", f"contract check failed: {_one_line(exc)}")
            result.notes.append(traceback.format_exc()[-4000:])
        if extra:
            status, reason = extra
    if any(len(d) > 1 for d in domain_traces):
        result.memory["domains"] = domain_summary(domain_traces, traces)
    result.memory.update(compiled.memory_findings(observation, traces))
    if status == "pass":
        status, reason = judge_backward_inputs(result.memory)
    if not parity.ok:
        worst = parity.worst
        assert worst is not None
        return _verdict(result, "fail-parity",
                        f"{worst.name}: max_abs_err {worst.max_abs_err:.3g}, rmse {worst.rmse:.3g} "
                        f"vs eager-fp32 rmse {worst.eager_rmse:.3g} ({worst.note or 'outside tolerance'})")
    return _verdict(result, status, reason)


def user_level_model(case: Case) -> tuple[LifetimeModel, Any]:
    """The lifetime model of the case's own step, with loop trip counts from a real run."""
    workload = case.build()
    gm, args, _ = trace_step(workload, case.trains)
    executor = GraphExecutor(label_ranges=False)
    with torch.no_grad():
        executor.run(gm, list(args))
    retained = range(1, 1 + len(params_of(workload.model))) if case.trains else ()
    return model_graph(gm, executor.observation, retained), executor.observation


def probed_step(
    compiled: CompiledStep, model: torch.nn.Module, make_probe: Callable[[], MemoryProbe] = CpuAllocatorProbe
) -> list[MemoryTrace]:
    """One step inside the probes' window; outputs are dropped inside it, grads kept.

    Returns the backend's main probe's trace (the torch CPU allocator unless the backend
    says otherwise), then one trace per extra domain the step declares."""
    clear_grads(model)
    gc.collect()
    extras = compiled.extra_probes()
    with make_probe() as probe, contextlib.ExitStack() as stack:
        for extra in extras:
            stack.enter_context(extra)
        out: StepOutput | None = compiled.run()
        del out
    return [probe.trace, *(extra.trace for extra in extras)]


def domain_summary(domain_traces: list[list[MemoryTrace]], combined: list[MemoryTrace]) -> dict[str, Any]:
    """Peak and residual per domain (worst probed step) and of their sum."""
    summary: dict[str, Any] = {}
    for i, first in enumerate(domain_traces[0]):
        per_step = [d[i] for d in domain_traces]
        summary[first.domain] = {
            "peak_bytes": max(t.peak_bytes for t in per_step),
            "residual_bytes": per_step[-1].residual_bytes,
            "residual_per_step": [t.residual_bytes for t in per_step],
        }
    summary["combined"] = {
        "peak_bytes": max(t.peak_bytes for t in combined),
        "residual_bytes": combined[-1].residual_bytes,
        "residual_per_step": [t.residual_bytes for t in combined],
    }
    return summary


def judge_memory(
    result: Result,
    backend: Backend,
    model: LifetimeModel,
    user_model: LifetimeModel,
    traces: list[MemoryTrace],
    source: str,
) -> tuple[str, str]:
    trace = max(traces, key=lambda t: t.peak_bytes)
    residuals = [t.residual_bytes for t in traces]
    exact = backend.capabilities.exact_memory
    slack = backend.peak_slack_bytes
    memory: dict[str, Any] = {
        "domain": trace.domain,
        "model_source": source,
        "model_peak_bytes": model.peak_bytes,
        "measured_peak_bytes": trace.peak_bytes,
        "model_residual_bytes": model.residual_bytes,
        "measured_residual_bytes": residuals[-1],
        "residual_per_step": residuals,
        "user_model_peak_bytes": user_model.peak_bytes,
        "peak_contract": "equal" if exact else f"<= model + {slack}",
        "peak_event": model.events[model.peak_event] if model.events else None,
        "foreign_free_bytes": trace.foreign_free_bytes,
        "timeline": trace.relative_timeline(),
        "model_timeline": list(zip(model.events, model.live_bytes))[:2000],
        "blamed": [],
    }
    if slack:
        memory["peak_slack_reason"] = backend.peak_slack_reason
    result.memory = memory
    peak_bad = trace.peak_bytes != model.peak_bytes if exact else trace.peak_bytes > model.peak_bytes + slack
    bad_residuals = [r for r in residuals if r != model.residual_bytes]
    memory["checks"] = {"peak": not peak_bad, "residual": not bad_residuals}
    # A leak inflates the peak too; the residual names it more precisely, so it is judged first.
    if bad_residuals:
        worst = max(traces, key=lambda t: abs(t.residual_bytes - model.residual_bytes))
        memory["blamed"] = blame_residual(model, worst)
        return "fail-residual", (
            f"residual {residuals} B per step != model residual {model.residual_bytes} B; "
            f"still alive: {_names(memory['blamed'])}"
        )
    if peak_bad:
        memory["blamed"] = blame_peak(model, trace)
        rel = "!=" if exact else ">"
        return "fail-peak", (
            f"measured peak {trace.peak_bytes} B {rel} model peak {model.peak_bytes} B"
            f"{f' + slack {slack} B' if slack else ''} ({source}); alive past modelled death: "
            f"{_names(memory['blamed'])}"
        )
    return "pass", ""


def _names(blamed: list[dict[str, Any]]) -> str:
    return ", ".join(f"{b['producer']} ({b['bytes']} B)" for b in blamed[:3]) or "none matched"


def judge_backward_inputs(memory: dict[str, Any]) -> tuple[str, str]:
    """Saved activations measured alive past their last use fail the peak contract even when the
    backend's other savings keep the peak under the model (see :mod:`conformance.donation`)."""
    verdict = memory.get("backward_inputs")
    detail = memory.get("backward_inputs_detail") or {}
    if verdict == "held-for-call":
        return "fail-peak", (f"backward inputs held for the whole backward call: {detail.get('held_bytes')} B of "
                             "saved activations outlive the call (argument list never cleared)")
    if verdict == "released-late" and detail.get("still_allocated_bytes"):
        return "fail-peak", (f"backward inputs released late: {detail['still_allocated_bytes']} B of saved "
                             "activations stayed allocated after the backward dropped them")
    return "pass", ""


def _verdict(result: Result, status: str, reason: str, detail: str = "") -> Result:
    result.status = status
    result.reason = reason
    if detail:
        result.notes.append(detail[-4000:])
    return result


def _is_compile_error(exc: BaseException) -> bool:
    if isinstance(exc, CompileError):
        return True
    mod = type(exc).__module__
    return mod.startswith(("torch._dynamo", "torch._inductor", "torch._functorch"))


def _one_line(exc: BaseException) -> str:
    text = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    first = text[0] if text else ""
    if first.endswith("raised:") and len(text) > 1:  # Dynamo's BackendCompilerFailed: the cause is next
        first = f"{first} {text[1]}"
    return f"{type(exc).__name__}: {first}"[:500]
