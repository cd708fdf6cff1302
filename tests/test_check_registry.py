"""Checks are one registry: the engine, the verdict's order, the results schema, triage and repro all
follow it.  A throwaway check registered in this process shows up in each, and leaves with its
registration; the built-in loop-scaling check (a module of its own) judges growth with trip counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conformance.api.case import select_cases
from conformance.api.result import Result
from conformance.api.verdict import (
    PRECEDENCE,
    CauseFinding,
    Check,
    CheckName,
    CheckSpec,
    Status,
    check_spec,
    combine,
    register_check,
    registered_checks,
    unregister_check,
)
from conformance.backends.eager import EagerBackend
from conformance.checks.cause import cause_of
from conformance.checks.context import Judging
from conformance.checks.loop_scaling import LoopPoint, judge_growth
from conformance.output.records import check_record, schema
from conformance.run.engine import RunOptions, run_case
from conformance.run.repro import standalone_checks

BUILTIN = ["parity", "outputs", "memory-domains", "residual", "program", "peak", "loop-scaling", "backward-inputs",
           "pool", "baseline"]
NAME = CheckName("throwaway")
SEEN: list[Judging] = []


def _judge(j: Judging) -> Check:
    """Fails a pair whose last probed call left anything alive: a real reading of the pair's evidence."""
    SEEN.append(j)
    left = j.steps[-1].trace.residual_bytes
    return Check(NAME, Status.FAIL_RESIDUAL if left else Status.PASS, f"{left} B left after call 7", {"left": left})


def _words(check: Check, result: Any) -> list[CauseFinding]:
    return [CauseFinding("bytes left after the step", None, check.excess_bytes)]


@pytest.fixture
def throwaway() -> Iterator[CheckSpec]:
    spec = register_check(CheckSpec(NAME, 5, "the last probed call's residual", _judge, _words, standalone=True))
    try:
        yield spec
    finally:
        unregister_check(NAME)
        SEEN.clear()


def _record(name: str) -> dict[str, Any]:
    data = Result("c", "b", Status.FAIL_RESIDUAL, "x", checks=[Check(CheckName(name), Status.FAIL_RESIDUAL)]).to_json()
    return data


def test_the_built_in_checks_in_their_order() -> None:
    assert [s.name for s in registered_checks()] == BUILTIN == list(PRECEDENCE)
    assert schema()["properties"]["checks"]["items"]["properties"]["name"]["enum"] == BUILTIN
    assert standalone_checks() == {"parity", "peak", "residual"}
    assert check_spec("loop-scaling") is not None and check_spec("throwaway") is None


def test_a_registered_check_joins_the_order_the_schema_triage_and_repro(throwaway: CheckSpec) -> None:
    assert list(PRECEDENCE) == ["throwaway", *BUILTIN]  # precedence 5: before parity
    assert schema()["properties"]["checks"]["items"]["properties"]["name"]["enum"][0] == "throwaway"
    assert check_record(_record("throwaway")) is None
    assert "throwaway" in standalone_checks()
    parity = Check(CheckName.PARITY, Status.FAIL_PARITY, "off")
    mine = Check(NAME, Status.FAIL_RESIDUAL, "12 B left after call 3", {}, [], 12)
    assert combine([parity, mine]) is mine
    cause = cause_of(Result("c", "eager", Status.FAIL_RESIDUAL, checks=[parity, mine]))
    assert cause is not None and cause.signature == "throwaway: bytes left after the step"
    assert cause.share("throwaway: bytes left after the step") == 12


def test_an_unregistered_check_leaves_every_reader(throwaway: CheckSpec) -> None:
    unregister_check(NAME)
    assert "throwaway" not in PRECEDENCE and "throwaway" not in standalone_checks()
    problem = check_record(_record("throwaway"))
    assert problem is not None and "name" in problem
    assert check_record(_record("peak")) is None


def test_the_engine_judges_a_registered_check(throwaway: CheckSpec) -> None:
    result = run_case(select_cases(["mlp-s-infer"])[0], EagerBackend(), RunOptions(steps=2))
    assert SEEN and SEEN[0].exact and SEEN[0].parity, "the engine handed the check the pair's evidence"
    mine = result.check(NAME)
    assert mine is not None and mine.figures["left"] == SEEN[0].steps[-1].trace.residual_bytes
    assert [c.name for c in result.checks][:2] == ["throwaway", "parity"]  # judged in precedence order
    assert result.status == (Status.FAIL_RESIDUAL if mine.figures["left"] else Status.PASS)


def test_names_and_precedences_are_unique(throwaway: CheckSpec) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_check(CheckSpec(CheckName.PEAK, 99, "again"))
    with pytest.raises(ValueError, match="precedence 5"):
        register_check(CheckSpec(CheckName("other"), 5, "same place"))


def _point(trips: int, peak: int, residual: int, model_peak: int = 100, model_residual: int = 8) -> LoopPoint:
    return LoopPoint(trips, model_peak, peak, model_residual, residual)


def test_loop_scaling_judges_growth_only_between_trip_counts() -> None:
    assert judge_growth([_point(3, 100, 8), _point(3, 200, 8)], 0) is None  # one trip count: no growth to see
    flat = judge_growth([_point(3, 100, 8), _point(12, 100, 8)], 0)
    assert flat is not None and flat.status == Status.PASS
    leak = judge_growth([_point(3, 100, 8 + 3 * 512), _point(12, 100, 8 + 12 * 512)], 0)
    assert leak is not None and leak.status == Status.FAIL_RESIDUAL and leak.excess_bytes == 9 * 512
    assert "residual grows 4608 B from 3 to 12 trips" in leak.reason
    peak = judge_growth([_point(3, 100, 8), _point(12, 164, 8, model_peak=132)], 16)
    assert peak is not None and peak.status == Status.FAIL_PEAK and peak.excess_bytes == 64 - 32 - 16
    assert judge_growth([_point(3, 100, 8), _point(12, 148, 8, model_peak=132)], 16).status == Status.PASS  # type: ignore[union-attr]
