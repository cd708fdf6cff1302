"""Parity findings carry typed evidence: a near miss of the noise floor is never one cause (nor one triage group)
with a wrong value, whatever the prose of the verdict says."""

from __future__ import annotations

import torch

from conformance.api.case import Tolerance
from conformance.api.result import Result
from conformance.checks.cause import cause_of
from conformance.checks.parity import Miss, Noise, ParityReport, compare, parity_check
from conformance.output.triage import group_failures

TOL = Tolerance()
EPS = torch.finfo(torch.float32).eps


def _report(got: torch.Tensor, ref: torch.Tensor, spread: float = 0.0, name: str = "grad[w]") -> ParityReport:
    return compare({name: got}, {name: ref}, {}, TOL, Noise(EPS, {name: spread}))


def _result(case: str, report: ParityReport) -> Result:
    check = parity_check({0: report})
    return Result(case, "inductor", check.status, check.reason, checks=[check], parity={"calls": check.figures})


def test_a_near_miss_of_the_floor_and_a_wrong_value_are_two_causes_and_two_groups() -> None:
    torch.manual_seed(0)
    zero = torch.randn(8, dtype=torch.float64) * 1e-17  # a gradient 0 in exact arithmetic
    scaled = torch.randn(8, dtype=torch.float64)
    near = [_report((zero + k * 3e-9).float(), zero, spread=1e-9) for k in (1, 2)]  # 1.5 and 3 floors over
    wrong = [_report((scaled * (1 + k * 1e-2)).float(), scaled) for k in (1, 2)]  # 1% and 2% off a real gradient
    far = _report((zero + 1e-3).float(), zero, spread=1e-9)  # a gradient 0 in exact arithmetic, 1e-3 off: a bug
    assert all(not r.ok for r in (*near, *wrong, far))
    assert [t.miss for r in near for t in r.tensors] == [Miss.NEAR_NOISE_FLOOR] * 2
    assert [t.miss for r in (*wrong, far) for t in r.tensors] == [Miss.WRONG_VALUE] * 3
    assert all(1 < t.over_floor < 10 for r in near for t in r.tensors)
    results = [_result(f"near-{i}", r) for i, r in enumerate(near)] + \
        [_result(f"wrong-{i}", r) for i, r in enumerate(wrong)] + [_result("far", far)]
    causes = {r.case: cause_of(r) for r in results}
    assert all(c is not None for c in causes.values())
    signatures = {case: c.signature for case, c in causes.items() if c is not None}
    assert signatures["near-0"] == signatures["near-1"] == "parity: first bad gradient: near the noise floor"
    wrong_value = "parity: first bad gradient: wrong value"
    assert signatures["wrong-0"] == signatures["wrong-1"] == signatures["far"] == wrong_value
    for r in results:
        cause = causes[r.case]
        assert cause is not None
        r.cause, r.cause_parts = cause.signature, list(cause.parts)
    groups = {g.signature: sorted(x.case for x in g.results) for g in group_failures(results)}
    assert groups == {"parity: first bad gradient: near the noise floor": ["near-0", "near-1"],
                      "parity: first bad gradient: wrong value": ["far", "wrong-0", "wrong-1"]}


def test_a_pair_with_a_wrong_value_anywhere_is_a_wrong_value() -> None:
    """A call with a near miss on one tensor and a wrong value on another: the cause is the wrong value."""
    zero = torch.full((4,), 1e-18, dtype=torch.float64)
    scaled = torch.ones(4, dtype=torch.float64)
    report = compare({"grad[a]": (zero + 3e-9).float(), "grad[b]": (scaled * 1.01).float()},
                     {"grad[a]": zero, "grad[b]": scaled}, {}, TOL, Noise(EPS, {"grad[a]": 1e-9, "grad[b]": 0.0}))
    assert [t.miss for t in report.tensors] == [Miss.NEAR_NOISE_FLOOR, Miss.WRONG_VALUE]
    cause = cause_of(_result("both", report))
    assert cause is not None and cause.signature == "parity: first bad gradient: wrong value"
