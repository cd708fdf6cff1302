"""Shapes that change between calls: the graphs each call compiled, and the memory kept across shapes.

A case with a :class:`~conformance.api.case.ShapeSchedule` (or whose inputs simply come with
new shapes) calls the step with new shapes; a compiler answers with recompiles (a graph per
shape, then a dynamic one).  This module counts the graphs each call compiled (Dynamo's own
count of the graphs it produced, so it holds for every backend compiled through
``torch.compile``) and sums the figures the record
carries under ``shapes``: the sizes, the compiles per call, the recompiles, and the bytes
each probed call kept past its model (memory kept across shapes, which the residual
contract allows only on a call that compiled a new graph: see
:func:`conformance.checks.judge.judge_residual`).  A probed call that compiles is run again at
the same shapes, and that settled run is the one the contracts judge: the compiler's own
allocations are not the step's (the compiling run's peak is reported).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

from conformance.api.aot import graph_breaks
from conformance.api.case import Case
from conformance.checks.judge import ProbedStep
from conformance.probes.cpu import MemoryTrace


def dynamo_graphs() -> int:
    """How many graphs Dynamo has produced in this process so far (recompiles included); none before it is
    imported (an eager run never imports it: 0.7 s a process)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


InputShapes = tuple[tuple[int, ...], ...]


def input_shapes(inputs: Sequence[Any]) -> InputShapes:
    """The shapes of a call's input tensors, those inside containers (a list of tensors) included."""
    leaves = pytree.tree_leaves(tuple(inputs))
    return tuple(tuple(int(n) for n in t.shape) for t in leaves if isinstance(t, torch.Tensor))


@dataclass
class Calls:
    """A pair's calls, as far as shapes go: each call's input shapes, the graphs it compiled, and
    which run of the step the contracts judge for it.

    Shapes change when the case says so (a :class:`~conformance.api.case.ShapeSchedule`) or
    when a call's inputs simply come with other shapes than call 0's (``make_inputs`` alone):
    from then on every call is checked for parity and modelled at its own shapes.

    Call ``k`` is the step's run ``k`` until a probed call compiles: that call is run twice
    (the compiling run, then the settled one the contracts judge), and every later call shifts by
    one.  A backend's dispatch log numbers runs, so its models are looked up by run."""

    case: Case
    inputs: dict[int, InputShapes] = field(default_factory=dict)
    compiles: list[int] = field(default_factory=list)
    compiling: dict[int, list[MemoryTrace]] = field(default_factory=dict)
    _graphs: int = field(default_factory=dynamo_graphs)
    _breaks: dict[str, int] = field(default_factory=graph_breaks)
    _not_step: dict[str, int] = field(default_factory=dict)  # breaks made outside the step (its optimizer)
    _extra: int = 0
    _run_of: dict[int, int] = field(default_factory=dict)

    @property
    def changing(self) -> bool:
        return self.case.shapes is not None or len(set(self.inputs.values())) > 1

    def graph_breaks(self) -> list[str]:
        """The reasons of the graph breaks Dynamo made in the step since the pair began (none for a backend
        that does not compile through ``torch.compile``): there eager PyTorch runs part of the step.  Breaks
        in the optimizer's compiled step (``torch.compile(opt.step)``) are not the step's: its program is a
        segment of its own (:meth:`not_the_step`)."""
        before = self._breaks
        return [reason for reason, n in graph_breaks().items()
                if n - self._not_step.get(reason, 0) > before.get(reason, 0)]

    def not_the_step(self, run: Callable[[], None]) -> None:
        """Run ``run`` (the optimizer's step), its graph breaks not counted as the step's."""
        before = graph_breaks()
        try:
            run()
        finally:
            for reason, n in graph_breaks().items():
                if n > before.get(reason, 0):
                    self._not_step[reason] = self._not_step.get(reason, 0) + n - before.get(reason, 0)

    def see(self, call: int, inputs: Sequence[Any]) -> None:
        """The inputs ``call`` runs with (before it runs)."""
        self.inputs[call] = input_shapes(inputs)

    def end(self) -> int:
        """Close the call that just ran: the graphs compiled since the last one ended."""
        now = dynamo_graphs()
        self.compiles.append(now - self._graphs)
        self._graphs = now
        return self.compiles[-1]

    def compiled(self, call: int, traces: list[MemoryTrace]) -> None:
        """``call`` compiled while probed: it is run again, and that run is judged."""
        self.compiling[call] = traces
        self._extra += 1

    def settled(self, call: int) -> None:
        """The run judged for ``call`` has ended (after a compiling run, what it compiled still counts)."""
        if call in self.compiling:
            now = dynamo_graphs()
            self.compiles[-1] += now - self._graphs
            self._graphs = now
        self._run_of[call] = call + self._extra

    def run_of(self, call: int) -> int:
        return self._run_of.get(call, call)

    def new_graphs(self, call: int) -> int:
        return self.compiles[call] if self.changing and call < len(self.compiles) else 0

    def label(self, call: int) -> str:
        """The call's shapes in a reason (``batch=10``), or "" when shapes do not change."""
        if self.case.shapes is not None:
            return f"{self.case.shapes.name}={self.case.shapes.size(call)}"
        if self.changing:
            return "inputs " + ", ".join(str(s) for s in self.inputs.get(call, ()))
        return ""


@dataclass(frozen=True)
class ShapeFigures:
    """What ``Result.shapes`` records of a case whose shapes change."""

    dimension: str
    compile: str
    sizes: list[int]
    input_shapes: list[list[list[int]]]
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
            "input_shapes": self.input_shapes,
            "compiles_per_call": self.compiles_per_call,
            "graphs": sum(self.compiles_per_call),
            "recompiles": self.recompiles,
            "kept_bytes_per_call": {str(c): n for c, n in self.kept_bytes_per_call.items()},
            "kept_bytes": sum(self.kept_bytes_per_call.values()),
            "compiling_peak_bytes": {str(c): n for c, n in self.compiling_peak_bytes.items()},
        }


def figures(calls: Calls, steps: Sequence[ProbedStep]) -> ShapeFigures | None:
    """The record's ``shapes`` figures; None for a case whose shapes do not change."""
    if not calls.changing:
        return None
    schedule = calls.case.shapes
    n = len(calls.compiles)
    return ShapeFigures(schedule.name if schedule else "inputs", schedule.compile if schedule else "default",
                        [schedule.size(call) for call in range(n)] if schedule else [],
                        [[list(s) for s in calls.inputs.get(call, ())] for call in range(n)],
                        list(calls.compiles), {s.call: s.kept_bytes for s in steps},
                        {s.call: s.compile_trace.peak_bytes for s in steps if s.compile_trace is not None})
