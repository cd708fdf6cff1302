"""iree-boxed: an adapter holding the previous step's outputs fails.

The HAL domain is statistics: each step frees the previous step's outputs (allocated before its window) as it
keeps its own, so its live bytes end where they started, and the planted adapter got residual 0 and the same peak
as its control.  The dropped outputs' storages, still alive when the window closes, show it in any domain."""

from __future__ import annotations

import pytest

from conformance.api.case import select_cases
from conformance.backends.iree import IreeBoxedBackend
from conformance.run.engine import run_case
from tests.planted_iree_backends import HoldsPreviousOutputsBackend

pytestmark = pytest.mark.skipif(IreeBoxedBackend().unavailable_reason() is not None, reason="IREE not installed")


def test_holding_the_previous_steps_outputs_fails_residual_on_iree_boxed() -> None:
    (case,) = select_cases(["mlp-s-infer"])
    control = run_case(case, IreeBoxedBackend())
    planted = run_case(case, HoldsPreviousOutputsBackend())
    assert control.status == "pass", control.reason
    assert planted.status == "fail-residual", planted.reason
    residual = next(c for c in planted.checks if c.name == "residual")
    assert residual.figures["outputs_held_per_step"] == [8 * 8 * 4] * 3  # the one 8x8 float32 output, every step
    assert residual.excess_bytes == 8 * 8 * 4
    assert "result buffer" in planted.reason  # named by the buffer IREE holds it in
    clean = next(c for c in control.checks if c.name == "residual")
    assert "outputs_held_per_step" not in clean.figures
