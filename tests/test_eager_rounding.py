"""A parity failure that is the backend's documented rounding, told from a wrong kernel by running the pair again.

Inductor keeps a fused kernel's bfloat16/float16 values in float32 between ops, where eager rounds after every
op; a training step then drifts from eager's by an ulp a step.  The engine runs a pair that fails parity again
under the backend's eager rounding (:meth:`conformance.api.adapter.Backend.eager_rounding`), compiled afresh:
only where every call then matches is the failure ``reduced-precision-rounding``.  A wrong kernel (a planted
gradient error) fails the second run too and stays unexpected, on the same case.
"""

from __future__ import annotations

import pytest

from conformance.api.case import select_cases
from conformance.api.verdict import Status
from conformance.backends.inductor import InductorBackend
from conformance.checks.manifest import apply, load_manifest
from conformance.checks.mechanism import EAGER_ROUNDING
from conformance.run.engine import RunOptions, run_case
from tests.faults import planted

pytest.importorskip("expecttest", reason="the op family needs expecttest (the [ops] extra)")

#: Tensor.bfloat16() in a training step: the cast value read back by the loss and the SGD update
CASE = "op-bfloat16-0-train"


@pytest.mark.slow
def test_inductors_bfloat16_drift_is_its_rounding_proven_by_the_pair_run_again_rounded() -> None:
    (case,) = select_cases([CASE])
    raw = run_case(case, InductorBackend(), RunOptions())
    assert raw.status == Status.FAIL_PARITY, raw.reason
    assert raw.parity is not None and raw.parity[EAGER_ROUNDING] == {"outcome": "pass"}, raw.parity
    judged = apply(raw, load_manifest("inductor"))
    assert judged.status == Status.XFAIL and judged.cause_parts == ["parity: reduced-precision-rounding"], judged.reason


@pytest.mark.slow
def test_a_wrong_gradient_on_the_same_step_is_not_rounding() -> None:
    (case,) = select_cases([CASE])
    raw = run_case(case, planted(InductorBackend, "grad-rel-1e-3")(), RunOptions())
    assert raw.status == Status.FAIL_PARITY, raw.reason
    assert raw.parity is not None and raw.parity[EAGER_ROUNDING]["outcome"] == "fail", raw.parity
    judged = apply(raw, load_manifest("inductor"))
    assert judged.status == Status.FAIL_PARITY and "parity: reduced-precision-rounding" not in judged.cause_parts, \
        judged.cause_parts


def test_only_a_step_computing_in_bfloat16_or_float16_is_run_again() -> None:
    """The second run costs a compile: a float32 step (whose failure no rounding explains) does not get one."""
    from conformance.run.engine import _reduced_precision

    (cast,), (plain,) = select_cases([CASE]), select_cases(["mlp-s-train"])
    assert _reduced_precision(cast, cast.build())
    assert not _reduced_precision(plain, plain.build())
