"""Regression cases pass on eager, skip where they need CUDA, and the loop scaling check catches a leak."""

from __future__ import annotations

import pytest
from conformance.backends.eager import EagerBackend

from conformance.case import select_cases
from conformance.engine import run_case
from conformance.scaling import loop_scaling
from tests.planted import LeakyEagerBackend


@pytest.mark.parametrize("case", select_cases(["reg-*"]), ids=lambda c: c.id)
def test_regression_case_on_eager(case) -> None:  # type: ignore[no-untyped-def]
    assert case.__doc__ or case.description
    result = run_case(case, EagerBackend())
    if "cuda_graphs" in case.requires:
        assert result.status == "skip" and "cuda_graphs" in result.reason
    else:
        assert result.status == "pass", result.reason


def test_regressions_are_documented() -> None:
    from conformance.cases import regressions

    for cls in (regressions.SavedActivations, regressions.TupleFreedEarly, regressions.CarriedState,
                regressions.SharedPoolGraphs):
        doc = cls.__doc__ or ""
        assert ("What went wrong" in doc and "Public:" in doc and "github" not in doc.lower()) or "#" in doc


def test_loop_scaling_flat_on_eager() -> None:
    report = loop_scaling("reg-loop-carried", EagerBackend(), (2, 8))
    assert report["ok"], report
    assert report["measured_residual_growth"] == report["model_residual_growth"] == 0


def test_loop_scaling_catches_a_per_trip_leak() -> None:
    """The planted backend keeps each trip's tanh: residual grows with the trip count."""
    report = loop_scaling("reg-loop-carried", LeakyEagerBackend(), (2, 8))
    assert not report["ok"]
    assert report["measured_residual_growth"] > 0 == report["model_residual_growth"]
    assert "residual grows" in report["reason"]


def test_loop_scaling_on_a_generated_loop() -> None:
    report = loop_scaling("gen-loop-663", EagerBackend(), (1, 4))
    assert report["ok"], report
    assert report["trips"] == [1, 4]
