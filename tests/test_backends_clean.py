"""Clean backends pass: eager byte-exact on every built-in case, inductor within its contract."""

from __future__ import annotations

import pytest

from conformance.api.case import all_cases, select_cases
from conformance.backends.eager import EagerBackend
from conformance.backends.inductor import InductorBackend
from conformance.run.engine import run_case
from conformance.run.options import DEFAULT_STEPS
from tests.sweep_sample import swept


@pytest.mark.parametrize(  # every case with CONFORMANCE_TESTS_FULL=1; CI: a fixed sample of mod-* and zoo-*
    "case", swept(c for c in all_cases() if not EagerBackend.capabilities.missing_for(c)), ids=lambda c: c.id
)
def test_eager_is_memory_exact(case) -> None:
    result = run_case(case, EagerBackend())
    assert result.status == "pass", result.reason
    mem = result.memory
    assert mem is not None
    assert mem.measured_peak_bytes == mem.model_peak_bytes
    assert mem.residual_per_step == [mem.model_residual_bytes] * DEFAULT_STEPS
    # every call checked: the first, the timed one and each probed one, results and state alike
    assert result.parity["ok"] and set(result.parity["calls"]) == {str(c) for c in range(2 + DEFAULT_STEPS)}
    assert all(not c.failed for c in result.checks)


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["mlp-s-train", "customop-early-late-s", "reg-customop-tuple-free",
                                     "reg-backward-inputs-released", "gen-early-4933"])
def test_inductor_clean_cases_follow_their_generated_program_exactly(case_id: str) -> None:
    (case,) = select_cases([case_id])
    result = run_case(case, InductorBackend())
    assert result.status == "pass", result.reason
    assert result.memory.model_source == "received-graphs"
    assert result.memory.measured_peak_bytes <= result.memory.model_peak_bytes
    assert result.memory.measured_residual_bytes == result.memory.model_residual_bytes
    program = result.check("program")
    assert program is not None and not program.failed
    assert program.figures["timeline"] == "exact"
    assert program.figures["late_releases"] == program.figures["late_references"] == 0
    assert program.figures["measured_peak_bytes"] == program.figures["program_peak_bytes"]
    assert result.timing["compile_s"] > 0 and result.versions["torch"]


@pytest.mark.slow
def test_inductor_while_loop_host_code_keeps_the_previous_carry_and_the_predicate() -> None:
    """Clean inductor's own while_loop wrapper, as its program shows it: the outer carry list holds the
    previous trip's state while the body runs, and ``should_loop`` holds the last predicate. The
    measurement follows that program exactly; the lifetimes are what fail (a manifest entry)."""
    (case,) = select_cases(["loop-rnn-t3"])
    result = run_case(case, InductorBackend())
    assert result.status == "fail-peak", result.reason
    program = result.check("program")
    assert program is not None and program.figures["timeline"] == "exact"
    held = {(b["producer"].split(":")[-1], b["bytes"], b["held_by"])
            for b in program.blamed if b.get("finding") == "late"}
    assert any(nbytes == 4 * 32 * 4 and holder == "buf1" for _, nbytes, holder in held), held  # the carry list
    assert any(nbytes == 1 and "should_loop" in holder for _, nbytes, holder in held), held
