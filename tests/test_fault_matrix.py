"""Planted faults over eager, inductor and the example vendor: each must be caught, naming what is wrong.

One case per fault and backend here (the full table over every case is
``benchmarks/fault_matrix.py``).  Every fault below changes the case's memory or
values, so a pass is a miss.
"""

from __future__ import annotations

import pytest

from conformance.api.case import select_cases
from conformance.api.result import Result
from conformance.api.verdict import Status
from conformance.run.engine import RunOptions, run_case
from tests.faults import GENERIC, INDUCTOR_ONLY, LEAK_FROM_CALL, MIDDLE_CALL, backend_classes, planted

BACKENDS = backend_classes()
#: what each fault must be caught as (parity checks come first, so value faults are fail-parity)
EXPECTED = {
    "input-clone": Status.FAIL_PEAK,
    "scratch-buffer": Status.FAIL_PEAK,
    f"leak-from-call-{LEAK_FROM_CALL}": Status.FAIL_RESIDUAL,
    "stale-results": Status.FAIL_PARITY,
    "corrupt-from-call-1": Status.FAIL_PARITY,
    "grad-rel-1e-3": Status.FAIL_PARITY,
    "inputs-overwritten": Status.FAIL_PARITY,
    f"corrupt-call-{MIDDLE_CALL}-only": Status.FAIL_PARITY,
    "lost-buffer-update": Status.FAIL_PARITY,
    "weights-frozen-at-first-call": Status.FAIL_PARITY,
    "optimizer-skips-a-parameter": Status.FAIL_PARITY,
    "wrong-optimizer-state": Status.FAIL_PARITY,
    "lr-off-by-1e-3": Status.FAIL_PARITY,
    # the optimizer step runs in the probed window, held to its model: what it keeps is a residual
    "optimizer-holds-gradients": Status.FAIL_RESIDUAL,
    "optimizer-leaks-per-step": Status.FAIL_RESIDUAL,
    "inductor-pre-163227-alias": Status.FAIL_PEAK,
    "inductor-dropped-free": Status.FAIL_PEAK,
}
#: the case each fault is shown on, where mlp-s-train has nothing it changes (no buffers)
CASE_FOR = {"lost-buffer-update": "bn-mlp-s-train"}
#: what a state fault's verdict must name: the call and the piece of state
NAMES = {
    "inputs-overwritten": "call 0: input[0]:",
    f"corrupt-call-{MIDDLE_CALL}-only": f"call {MIDDLE_CALL}: ",
    "lost-buffer-update": "call 0: buffer[bn.",
    "weights-frozen-at-first-call": "call 1: ",  # the first call's weights are the right ones
    "optimizer-skips-a-parameter": "call 0: param[fc3.bias]:",
    "wrong-optimizer-state": "call 0: optim[fc1.weight].momentum_buffer:",  # mlp-s-train steps with SGD-momentum
    "lr-off-by-1e-3": "call 0: param[",  # every update 0.1% short: seen by the update's comparison on the first call
}
#: enough probed calls for the leak to start (calls 0 and 1 come before the probes)
STEPS_FOR_LEAK = LEAK_FROM_CALL - 1


def _run(backend: str, fault: str, case_id: str, steps: int | None = None) -> Result:
    (case,) = select_cases([case_id])
    cls = planted(BACKENDS[backend], fault)  # type: ignore[arg-type]
    options = RunOptions(steps=steps) if steps else RunOptions(steps=STEPS_FOR_LEAK if "leak" in fault else 3)
    return run_case(case, cls(), options)


@pytest.mark.slow
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("fault", GENERIC)
def test_generic_fault_is_caught(backend: str, fault: str) -> None:
    result = _run(backend, fault, CASE_FOR.get(fault, "mlp-s-train"))
    assert result.status == EXPECTED[fault], f"{fault} on {backend}: {result.status} {result.reason}"
    assert result.reason
    assert result.reason.startswith(NAMES.get(fault, "")), result.reason
    if EXPECTED[fault] == Status.FAIL_PARITY:
        pieces = ("grad", "output", "input", "buffer", "param", "optim")
        assert "rel" in result.reason and any(f"{piece}[" in result.reason for piece in pieces), result.reason
    else:
        assert result.memory.blamed, f"a memory failure must name what explains it: {result.reason}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_leak_after_the_default_steps_needs_more_steps(backend: str) -> None:
    """With the default steps the leak has not started; --steps reaching call N shows it, as growth."""
    fault = f"leak-from-call-{LEAK_FROM_CALL}"
    quiet = _run(backend, fault, "mlp-s-infer", steps=3)
    assert quiet.status == Status.PASS, quiet.reason
    caught = _run(backend, fault, "mlp-s-infer", steps=STEPS_FOR_LEAK)
    assert caught.status == Status.FAIL_RESIDUAL, caught.reason
    residuals = caught.memory.residual_per_step
    assert residuals[:-1] == [0] * (STEPS_FOR_LEAK - 1) and residuals[-1] > 0, residuals
    assert "grows" in caught.reason


@pytest.mark.slow
@pytest.mark.parametrize("fault", INDUCTOR_ONLY)
def test_inductor_codegen_fault_is_caught_in_the_generated_program(fault: str) -> None:
    """A late or missing ``del`` in inductor's own output: the measurement follows the faulty program
    exactly, so only the program model's lifetimes can tell; they must name the reference or buffer."""
    result = _run("inductor", fault, "reg-customop-tuple-free")
    assert result.status == Status.FAIL_PEAK, result.reason
    program = result.check("program")
    assert program is not None and program.failed, [c.to_json() for c in result.checks]
    assert program.figures["timeline"] == "exact"  # the allocator did what the (faulty) program says
    assert program.blamed and program.excess_bytes and program.excess_bytes > 0
    first = program.blamed[0]
    assert first["finding"] in ("late-reference", "late", "outlives-step"), first
    assert "buf" in first["producer"]
    assert first["model_death"].startswith("before ")


@pytest.mark.slow
def test_tuple_fault_names_the_tuple_and_raises_the_peak_by_the_early_item() -> None:
    """The reworked case makes pytorch#163227 observable under fusion: the early item's last use is a
    matmul, so the tuple kept alive holds it across the larger buffer made next."""
    clean = _run("inductor", "none", "reg-customop-tuple-free")
    result = _run("inductor", "inductor-pre-163227-alias", "reg-customop-tuple-free")
    item = 128 * 128 * 4
    assert clean.status == Status.PASS, clean.reason
    assert result.memory.measured_peak_bytes >= clean.memory.measured_peak_bytes + item
    program = result.check("program")
    assert program is not None
    late = [b for b in program.blamed if b.get("finding") == "late"]
    assert any(b["bytes"] == item and "buf1" in b["held_by"] and "accum" in b["op"] for b in late), program.blamed
    refs = [b for b in program.blamed if b.get("finding") == "late-reference"]
    assert refs and refs[0]["producer"] == "buf1" and refs[0]["bytes"] == item
    assert "extern_kernels.mm" in refs[0]["should_die_before"]
