"""The harness fails backends with planted lifetime and numeric faults, naming the culprit."""

from __future__ import annotations

from conformance.api.case import select_cases
from conformance.run.engine import run_case
from tests.planted_backends import HoldActivationBackend, LeakIntermediateBackend, PerturbGradBackend


def _case(case_id: str):
    (case,) = select_cases([case_id])
    return case


def test_leaked_intermediate_is_fail_residual_naming_it() -> None:
    result = run_case(_case("mlp-s-train"), LeakIntermediateBackend())
    assert result.status == "fail-residual", result.reason
    blamed = result.memory.blamed
    assert blamed, "a residual failure must name what is still alive"
    top = blamed[0]
    assert top["producer"] == "tanh"
    assert top["op"] == "aten.tanh.default"
    assert top["shape"] == [8, 32] and top["bytes"] == 8 * 32 * 4
    assert top["measured_death"] == "still alive after the step"
    assert top["model_death"].startswith("after ")
    assert result.memory.measured_residual_bytes == result.memory.model_residual_bytes + 8 * 32 * 4
    assert "tanh" in result.reason


def test_activation_held_past_last_use_is_fail_peak_naming_it() -> None:
    result = run_case(_case("mlp-s-train"), HoldActivationBackend())
    assert result.status == "fail-peak", result.reason
    assert result.memory.measured_peak_bytes > result.memory.model_peak_bytes
    assert result.memory.measured_residual_bytes == result.memory.model_residual_bytes
    producers = [b["producer"] for b in result.memory.blamed]
    assert "addmm" in producers, producers
    held = next(b for b in result.memory.blamed if b["producer"] == "addmm")
    assert held["shape"] == [8, 32] and held["op"] == "aten.addmm.default"
    assert "addmm" in result.reason


def test_perturbed_gradient_is_fail_parity() -> None:
    result = run_case(_case("mlp-s-train"), PerturbGradBackend())
    assert result.status == "fail-parity", result.reason
    assert result.parity["ok"] is False
    failing = result.parity["failures"][0]
    assert failing["name"].startswith("grad[")
    assert failing["max_abs_err"] >= 1e-2 * 0.99
    # memory is untouched by the fault: the numbers still came out right
    assert result.memory.measured_peak_bytes == result.memory.model_peak_bytes


def test_leak_in_inference_case_also_caught() -> None:
    result = run_case(_case("mlp-m-infer"), LeakIntermediateBackend())
    assert result.status == "fail-residual", result.reason
    assert result.memory.blamed[0]["producer"] == "tanh"
