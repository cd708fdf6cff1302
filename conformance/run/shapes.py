"""Shapes that change between calls: the graphs each call compiled, and the memory kept across shapes.

A case with a :class:`~conformance.api.case.ShapeSchedule` calls the step with new shapes;
a compiler answers with recompiles (a graph per shape, then a dynamic one).  This module
counts the graphs each call compiled (Dynamo's own count of the graphs it produced, so it
holds for every backend compiled through ``torch.compile``) and sums the figures the record
carries under ``shapes``: the sizes, the compiles per call, the recompiles, and the bytes
each probed call kept past its model (memory kept across shapes, which the residual
contract allows only on a call that compiled a new graph: see
:func:`conformance.checks.judge.judge_residual`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.api.case import Case


def dynamo_graphs() -> int:
    """How many graphs Dynamo has produced in this process so far (recompiles included)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@dataclass
class GraphCounter:
    """Graphs compiled during each call of a step, in call order (call 0: compile and first call)."""

    per_call: list[int] = field(default_factory=list)
    _last: int = field(default_factory=dynamo_graphs)

    def end_call(self) -> int:
        """Close a call: the graphs compiled since the last one ended."""
        now = dynamo_graphs()
        self.per_call.append(now - self._last)
        self._last = now
        return self.per_call[-1]


@dataclass(frozen=True)
class ShapeFigures:
    """What ``Result.shapes`` records of a case whose shapes change."""

    dimension: str
    compile: str
    sizes: list[int]
    compiles_per_call: list[int]
    #: probed call -> bytes it kept past its model's residual (0 for a backend that keeps nothing)
    kept_bytes_per_call: dict[int, int]

    @property
    def recompiles(self) -> int:
        """Graphs compiled after the first call's (each a recompile of the frame)."""
        return sum(self.compiles_per_call[1:])

    def to_json(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "compile": self.compile,
            "sizes": self.sizes,
            "compiles_per_call": self.compiles_per_call,
            "graphs": sum(self.compiles_per_call),
            "recompiles": self.recompiles,
            "kept_bytes_per_call": {str(c): n for c, n in self.kept_bytes_per_call.items()},
            "kept_bytes": sum(self.kept_bytes_per_call.values()),
        }


def figures(case: Case, counter: GraphCounter, kept: Sequence[tuple[int, int]]) -> ShapeFigures | None:
    """The record's ``shapes`` figures; None for a case whose shapes do not change."""
    if case.shapes is None:
        return None
    return ShapeFigures(case.shapes.name, case.shapes.compile,
                        [case.shapes.size(call) for call in range(len(counter.per_call))],
                        list(counter.per_call), dict(kept))
