"""Loop scaling: run a loop case at two trip counts and compare memory growth with the model's.

The loop contract (docs/design.md, "Contracts"): peak must not grow with the trip count beyond what the
lifetime model predicts, and residual must not grow at all beyond it.  One run
cannot show growth; two trip counts can.  A leaked carried buffer (the
``scf.while`` bug) makes measured residual grow by a buffer per trip while the
model's stays flat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from conformance.api.adapter import Backend
from conformance.api.case import Case, CaseError
from conformance.api.result import MemoryFigures
from conformance.run.engine import run_case


def _loop_family(case_family: str) -> Callable[[int], Case]:
    """A function building the family's case at a given trip count."""
    from conformance.cases import generated, regressions, while_loops

    if case_family == "reg-loop-carried":
        return regressions.carried_state_case
    if case_family in ("loop-rnn", "loop-rnn-train"):
        trains = case_family.endswith("-train")

        def rnn(trips: int) -> Case:
            return Case(f"loop-rnn-t{trips}{'-train' if trains else ''}", "loop", "loop", 0,
                        while_loops._build(32, trips, trains), trains=trains,
                        requires=frozenset({"while_loop", *(("training",) if trains else ())}))

        return rnn
    base = generated.case_from_id(case_family)
    program = base.program if base is not None and isinstance(base.program, generated.Program) else None
    if base is not None and program is not None and program.family == "loop":

        def gen(trips: int) -> Case:
            return generated.case_from_program(dataclasses.replace(program, trips=trips),
                                               f"{case_family}@t{trips}", base.seed)

        return gen
    raise CaseError(f"{case_family!r} is not a loop family "
                    "(reg-loop-carried, loop-rnn[-train], gen-loop-<seed>[-train])")


def loop_scaling(case_family: str, backend: Backend, trips: tuple[int, int] = (2, 8)) -> dict[str, Any]:
    """Measured vs modelled peak and residual at two trip counts; ``ok`` when growth matches the model.

    Peak may grow no more than the model's peak grows (plus the backend's
    documented slack); residual must grow exactly as the model's does.
    """
    make = _loop_family(case_family)
    a, b = trips
    results = [run_case(make(t), backend) for t in (a, b)]
    mem = [r.memory or MemoryFigures() for r in results]
    out: dict[str, Any] = {
        "family": case_family,
        "backend": backend.name,
        "trips": [a, b],
        "statuses": [r.status for r in results],
        "model_peak_bytes": [m.model_peak_bytes for m in mem],
        "measured_peak_bytes": [m.measured_peak_bytes for m in mem],
        "model_residual_bytes": [m.model_residual_bytes for m in mem],
        "measured_residual_bytes": [m.measured_residual_bytes for m in mem],
    }
    if any(m.measured_peak_bytes is None for m in mem):
        out.update(ok=False, reason="no memory measurement: " + "; ".join(r.reason for r in results if r.reason))
        return out
    mp, xp = out["model_peak_bytes"], out["measured_peak_bytes"]
    mr, xr = out["model_residual_bytes"], out["measured_residual_bytes"]
    out["model_peak_growth"], out["measured_peak_growth"] = mp[1] - mp[0], xp[1] - xp[0]
    out["model_residual_growth"], out["measured_residual_growth"] = mr[1] - mr[0], xr[1] - xr[0]
    problems = []
    if out["measured_peak_growth"] > out["model_peak_growth"] + backend.peak_slack_bytes:
        problems.append(f"peak grows {out['measured_peak_growth']} B from {a} to {b} trips; "
                        f"the model grows {out['model_peak_growth']} B")
    if out["measured_residual_growth"] != out["model_residual_growth"]:
        problems.append(f"residual grows {out['measured_residual_growth']} B from {a} to {b} trips; "
                        f"the model grows {out['model_residual_growth']} B")
    out["ok"] = not problems
    out["reason"] = "; ".join(problems)
    return out
