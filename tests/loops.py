"""A loop case at two trip counts, judged by the loop-scaling check over the two runs' records.

The check runs on every loop verdict (its probed calls, where their trip counts differ); these
helpers hold a case's two runs to the same rule (:func:`conformance.checks.loop_scaling.judge_growth`),
building each family's case at a trip count here, where naming case families belongs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from conformance.api.adapter import Backend
from conformance.api.case import Case, CaseError
from conformance.api.result import Result
from conformance.api.verdict import Check
from conformance.checks.loop_scaling import LoopPoint, judge_growth
from conformance.run.engine import run_case


def loop_family(family: str) -> Callable[[int], Case]:
    """A function building the family's case at a given trip count."""
    from conformance.cases import generated, regressions, while_loops

    if family == "reg-loop-carried":
        return regressions.carried_state_case
    if family in ("loop-rnn", "loop-rnn-train"):
        trains = family.endswith("-train")

        def rnn(trips: int) -> Case:
            return Case(f"loop-rnn-t{trips}{'-train' if trains else ''}", "loop", "loop", 0,
                        while_loops._build(32, trips, trains), trains=trains,
                        requires=frozenset({"while_loop", *(("training",) if trains else ())}))

        return rnn
    base = generated.case_from_id(family)
    program = base.program if base is not None and isinstance(base.program, generated.Program) else None
    if base is not None and program is not None and program.family == "loop":

        def gen(trips: int) -> Case:
            return generated.case_from_program(dataclasses.replace(program, trips=trips), f"{family}@t{trips}",
                                               base.seed)

        return gen
    raise CaseError(f"{family!r} is not a loop family")


def scaling(family: str, backend: Backend, trips: tuple[int, int]) -> tuple[list[Result], Check | None]:
    """The family's case run at each trip count, and the loop-scaling check over the two records."""
    make = loop_family(family)
    results = [run_case(make(t), backend) for t in trips]
    points = [LoopPoint.of_record(t, r.memory) for t, r in zip(trips, results, strict=True)]
    assert all(p is not None for p in points), [r.reason for r in results]
    return results, judge_growth([p for p in points if p is not None], backend.peak_slack_bytes)
