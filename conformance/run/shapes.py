"""Shapes that change between calls: the graphs each call compiled, and the memory kept across shapes.

A case with a :class:`~conformance.api.case.ShapeSchedule` calls the step with new shapes;
a compiler answers with recompiles (a graph per shape, then a dynamic one).  This module
counts the graphs each call compiled (Dynamo's own count of the graphs it produced, so it
holds for every backend compiled through ``torch.compile``) and sums the figures the record
carries under ``shapes``: the sizes, the compiles per call, the recompiles, and the bytes
each probed call kept past its model (memory kept across shapes, which the residual
contract allows only on a call that compiled a new graph: see
:func:`conformance.checks.judge.judge_residual`).  A probed call that compiles is run again at
the same shapes, and that settled run is the one the contracts judge: the compiler's own
allocations are not the step's (the compiling run's peak is reported).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.api.case import Case
from conformance.checks.judge import ProbedStep
from conformance.probes.cpu import MemoryTrace


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


    def settle(self) -> None:
        """The last call was run again (after it compiled): what that compiled counts for the call."""
        now = dynamo_graphs()
        self.per_call[-1] += now - self._last
        self._last = now


@dataclass
class Runs:
    """Which run of the step each probed call's judged trace comes from.

    Call ``k`` is the step's run ``k`` until a call compiles: that call is run twice (the
    compiling run, then the settled one the contracts judge), and every later call shifts by one.
    A backend's dispatch log numbers runs, so its models are looked up by run."""

    compiling: dict[int, list[MemoryTrace]] = field(default_factory=dict)
    _extra: int = 0
    _run_of: dict[int, int] = field(default_factory=dict)

    def compiled(self, call: int, traces: list[MemoryTrace]) -> None:
        self.compiling[call] = traces
        self._extra += 1

    def probed(self, call: int) -> None:
        self._run_of[call] = call + self._extra

    def run_of(self, call: int) -> int:
        return self._run_of.get(call, call)


@dataclass(frozen=True)
class ShapeFigures:
    """What ``Result.shapes`` records of a case whose shapes change."""

    dimension: str
    compile: str
    sizes: list[int]
    compiles_per_call: list[int]
    #: probed call -> bytes it kept past its model's residual (0 for a backend that keeps nothing)
    kept_bytes_per_call: dict[int, int]
    #: probed call that compiled -> the peak of its compiling run (compiler's allocations included)
    compiling_peak_bytes: dict[int, int]

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
            "compiling_peak_bytes": {str(c): n for c, n in self.compiling_peak_bytes.items()},
        }


def figures(case: Case, counter: GraphCounter, steps: Sequence[ProbedStep]) -> ShapeFigures | None:
    """The record's ``shapes`` figures; None for a case whose shapes do not change."""
    if case.shapes is None:
        return None
    return ShapeFigures(case.shapes.name, case.shapes.compile,
                        [case.shapes.size(call) for call in range(len(counter.per_call))],
                        list(counter.per_call), {s.call: s.kept_bytes for s in steps},
                        {s.call: s.compile_trace.peak_bytes for s in steps if s.compile_trace is not None})
