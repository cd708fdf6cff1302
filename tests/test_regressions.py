"""Regression cases: each documents the real bug it reproduces, passes on eager (skips where it needs
CUDA), fails on a planted copy of its bug where the tests have one, and the loop scaling check catches a leak."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, Workload, select_cases
from conformance.api.step import StepOutput
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend, EagerStep
from conformance.run.engine import RunOptions, run_case
from tests.loops import scaling
from tests.planted import KEPT, LeakyEagerBackend

REGRESSIONS = select_cases(["reg-*"])
#: ``owner/repo#number``: where a bug is public (an issue or pull request anyone can read)
PUBLIC_REF = re.compile(r"\b[\w.-]+/[\w.-]+#\d+\b")


@pytest.mark.parametrize("case", REGRESSIONS, ids=lambda c: c.id)
def test_regression_case_on_eager(case: Case) -> None:
    result = run_case(case, EagerBackend())
    if "cuda_graphs" in case.requires:
        assert result.status == "skip" and "cuda_graphs" in result.reason
    else:
        assert result.status == "pass", result.reason


def _sections(doc: str) -> dict[str, str]:
    """A regression docstring's ``Label: text`` sections (What went wrong, Public, What the harness checks)."""
    text = " ".join(doc.split())
    labels = ("What went wrong:", "Public:", "What the harness checks:")
    marks = sorted((text.find(label), label) for label in labels if label in text)
    return {label[:-1]: text[at + len(label):(marks[i + 1][0] if i + 1 < len(marks) else len(text))].strip()
            for i, (at, label) in enumerate(marks)}


@pytest.mark.parametrize("case", REGRESSIONS, ids=lambda c: c.id)
def test_regression_case_documents_its_bug(case: Case) -> None:
    """The case says what it checks, and its model's own docstring names the real bug: what went wrong,
    where it is public (``owner/repo#N``), and what the harness checks."""
    assert case.description.startswith("regression") and len(case.description.split()) >= 5, case.description
    model = type(case.build().model)
    doc = vars(model).get("__doc__") or ""  # the model's own, not a base class's
    sections = _sections(doc)
    assert set(sections) == {"What went wrong", "Public", "What the harness checks"}, (model.__name__, doc)
    assert len(sections["What went wrong"].split()) >= 15, (model.__name__, sections["What went wrong"])
    assert PUBLIC_REF.search(sections["Public"]), (model.__name__, sections["Public"])
    assert "github" not in doc.lower(), "cite owner/repo#N, not a URL"
    assert len(sections["What the harness checks"].split()) >= 10, (model.__name__, sections)


class _HoldMatmulsStep(EagerStep):
    """Keeps every matmul result until the step returns: activations held through the whole backward."""

    def __init__(self, case: Case, workload: Workload) -> None:
        self.kept: list[Any] = []
        super().__init__(case, workload, self._keep)

    def _keep(self, label: str, value: Any) -> None:
        if label.split(":")[-1].startswith("mm"):
            self.kept.append(value)

    def run(self) -> StepOutput:
        try:
            return super().run()
        finally:
            self.kept.clear()


class HoldActivationsBackend(EagerBackend):
    """The first regression's bug planted in eager: what the forward made stays referenced until the end."""

    name = "planted-hold-activations"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _HoldMatmulsStep(case, workload)


#: regression case -> (a backend with its bug planted, the verdict that bug must get)
PLANTED = {
    "reg-backward-inputs-released": (HoldActivationsBackend, Status.FAIL_PEAK),
    "reg-loop-carried-t2": (LeakyEagerBackend, Status.FAIL_RESIDUAL),
    "reg-loop-carried-t8": (LeakyEagerBackend, Status.FAIL_RESIDUAL),
    # reg-customop-tuple-free: inductor with pytorch#163227 planted, in test_fault_matrix (slow)
    # reg-cudagraph-shared-pool: needs CUDA graph trees
}


@pytest.mark.parametrize("case_id", sorted(PLANTED))
def test_regression_case_fails_on_its_planted_bug(case_id: str) -> None:
    (case,) = select_cases([case_id])
    backend, expected = PLANTED[case_id]
    try:
        result = run_case(case, backend(), RunOptions(steps=3))
    finally:
        KEPT.clear()
    assert result.status == expected, result.reason
    assert result.memory.blamed, result.reason


def test_loop_scaling_flat_on_eager() -> None:
    _, check = scaling("reg-loop-carried", EagerBackend(), (2, 8))
    assert check is not None and check.status == "pass", check
    assert check.figures["measured_residual_growth"] == check.figures["model_residual_growth"] == 0


def test_loop_scaling_catches_a_per_trip_leak() -> None:
    """The planted backend keeps each trip's tanh: residual grows with the trip count."""
    try:
        _, check = scaling("reg-loop-carried", LeakyEagerBackend(), (2, 8))
    finally:
        KEPT.clear()
    assert check is not None and check.status == "fail-residual", check
    assert check.figures["measured_residual_growth"] > 0 == check.figures["model_residual_growth"]
    assert "residual grows" in check.reason


def test_loop_scaling_on_a_generated_loop() -> None:
    _, check = scaling("gen-loop-663", EagerBackend(), (1, 4))
    assert check is not None and check.status == "pass", check
    assert check.figures["trips"] == [1, 4]
