"""Clean backends pass: eager byte-exact on every built-in case, inductor within its contract."""

from __future__ import annotations

import pytest
from conformance.backends.eager import EagerBackend
from conformance.backends.inductor import InductorBackend

from conformance.case import all_cases, select_cases
from conformance.engine import run_case


@pytest.mark.parametrize(
    "case", [c for c in all_cases() if not EagerBackend.capabilities.missing_for(c)], ids=lambda c: c.id
)
def test_eager_is_memory_exact(case) -> None:
    result = run_case(case, EagerBackend())
    assert result.status == "pass", result.reason
    mem = result.memory
    assert mem["measured_peak_bytes"] == mem["model_peak_bytes"]
    assert mem["residual_per_step"] == [mem["model_residual_bytes"]] * 2
    assert result.parity["ok"]


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["mlp-s-train", "customop-early-late-s", "loop-rnn-t3"])
def test_inductor_clean_cases_pass_against_received_graphs(case_id: str) -> None:
    (case,) = select_cases([case_id])
    result = run_case(case, InductorBackend())
    assert result.status == "pass", result.reason
    assert result.memory["model_source"] == "received-graphs"
    assert result.memory["measured_peak_bytes"] <= result.memory["model_peak_bytes"]
    assert result.memory["measured_residual_bytes"] == result.memory["model_residual_bytes"]
    assert result.timing["compile_s"] > 0 and result.versions["torch"]
