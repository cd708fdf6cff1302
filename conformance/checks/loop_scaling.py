"""Loop scaling: a loop's memory growth with its trip count against the model's growth.

The loop contract (docs/design.md, "Contracts"): a loop's peak must not grow with its trip count
beyond what the lifetime model predicts, and its residual must not grow at all beyond it.  One
call cannot show growth; two calls that ran their loops at different trip counts can: a leaked
carried buffer (the ``scf.while`` bug) makes the measured residual grow by a buffer per trip while
the model's stays flat, and a backend under its bound at few trips may outgrow it at many.

Judged on every pair whose probed calls ran their loops at more than one trip count (each call's
:class:`~conformance.models.lifetime.Observation`); nothing to judge otherwise.  The same rule
holds between two runs of one case at two trip counts (:func:`judge_growth` over their records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conformance.api.result import MemoryFigures
from conformance.api.verdict import CauseFinding, Check, CheckName, CheckSpec, Contract, Status, passed
from conformance.checks.context import Judging
from conformance.checks.judge import ProbedStep

NAME = CheckName("loop-scaling")


@dataclass(frozen=True)
class LoopPoint:
    """One call's (or one run's) loop trips with its measured and modelled peak and residual."""

    trips: int
    model_peak_bytes: int
    measured_peak_bytes: int
    model_residual_bytes: int
    measured_residual_bytes: int
    call: int | None = None

    @classmethod
    def of_step(cls, step: ProbedStep) -> LoopPoint | None:
        """A probed call's point; ``None`` for a call that ran no loop."""
        trips = step.observation.trip_counts if step.observation is not None else []
        if not trips:
            return None
        return cls(sum(trips), step.model.peak_bytes, step.trace.peak_bytes, step.model.residual_bytes,
                   step.trace.residual_bytes, step.call)

    @classmethod
    def of_record(cls, trips: int, memory: MemoryFigures | None) -> LoopPoint | None:
        """A run's point from its record's figures; ``None`` where it measured nothing."""
        if memory is None or None in (memory.measured_peak_bytes, memory.model_peak_bytes,
                                      memory.measured_residual_bytes, memory.model_residual_bytes):
            return None
        return cls(trips, int(memory.model_peak_bytes or 0), int(memory.measured_peak_bytes or 0),
                   int(memory.model_residual_bytes or 0), int(memory.measured_residual_bytes or 0))


def judge_growth(points: Sequence[LoopPoint], slack: int) -> Check | None:
    """Growth from the fewest trips to the most: the measured peak may grow no more than the model's
    (plus the backend's slack), the measured residual exactly as the model's.  ``None`` where the
    points share one trip count (no growth to see)."""
    if not points:
        return None
    low = min(points, key=lambda p: (p.trips, p.call or 0))
    high = max(points, key=lambda p: (p.trips, -(p.call or 0)))
    if low.trips == high.trips:
        return None
    model_peak, peak = high.model_peak_bytes - low.model_peak_bytes, high.measured_peak_bytes - low.measured_peak_bytes
    model_residual = high.model_residual_bytes - low.model_residual_bytes
    residual = high.measured_residual_bytes - low.measured_residual_bytes
    span = f"from {low.trips} to {high.trips} trips"
    figures = {"trips": [low.trips, high.trips], "calls": [low.call, high.call],
               "model_peak_growth": model_peak, "measured_peak_growth": peak,
               "model_residual_growth": model_residual, "measured_residual_growth": residual}
    if residual != model_residual:
        contract = Contract(f"residual growth {span}", residual, model_residual, model_residual,
                            f"residual grows as the model's {model_residual} B {span}; measured {residual} B",
                            high.call)
        return Check(NAME, Status.FAIL_RESIDUAL, f"residual grows {residual} B {span}; the model grows "
                     f"{model_residual} B", figures, [], contract.excess_bytes, contract)
    if peak > model_peak + slack:
        contract = Contract(f"peak growth {span}", peak, None, model_peak + slack,
                            f"peak grows at most the model's {model_peak} B + slack {slack} B {span}; "
                            f"measured {peak} B", high.call)
        return Check(NAME, Status.FAIL_PEAK, f"peak grows {peak} B {span}; the model grows {model_peak} B",
                     figures, [], contract.excess_bytes, contract)
    return passed(NAME, **figures)


def judge(j: Judging) -> Check | None:
    """The pair's probed calls that ran a loop, where their trip counts differ."""
    return judge_growth([p for p in map(LoopPoint.of_step, j.steps) if p is not None], j.slack)


def cause(check: Check, result: object) -> list[CauseFinding]:
    """In shape-free words: which figure outgrew the model with the trip count."""
    what = "residual" if check.status == Status.FAIL_RESIDUAL else "peak"
    return [CauseFinding(f"{what} grows with the trip count beyond the model's growth", None, check.excess_bytes)]


CHECK = CheckSpec(NAME, 45, "each probed call's loop trip counts with its measured and modelled peak and residual",
                  judge, cause)
