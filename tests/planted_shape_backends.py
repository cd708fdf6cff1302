"""Backends with faults that only show on a new shape, wrapped around real inductor.

Each is a real adapter (``--backend tests.planted_shape_backends:ClassName``): inductor compiles
and runs the step; the wrapper plants one fault of the kind a compiler's shape handling has.
On a case whose shapes never change none of them shows (each fills or sizes what it keeps at
call 0, before any probed call).
"""

from __future__ import annotations

from typing import Any

import torch

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput
from conformance.backends.inductor import InductorBackend, InductorStep
from conformance.run.shapes import dynamo_graphs


def _shape_key(workload: Workload) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(t.shape) for t in workload.inputs)


class _FirstShapeBufferStep(InductorStep):
    """Copies each call's results into buffers sized at the first call and returns those: right
    while the shape stays, truncated (rows of the new batch lost) once it changes."""

    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload)
        self.buffers: list[torch.Tensor] = []

    def run(self) -> StepOutput:
        out = super().run()
        if not self.buffers:
            self.buffers = [torch.empty_like(t) for t in out.outputs]
        for buf, t in zip(self.buffers, out.outputs):
            rows = tuple(slice(0, min(a, b)) for a, b in zip(buf.shape, t.shape))
            buf[rows].copy_(t[rows])
        return StepOutput(list(self.buffers), out.retained)


class FirstShapeBufferBackend(InductorBackend):
    """A result buffer sized for the first shape and reused for every later one."""

    name = "planted-first-shape-buffer"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _FirstShapeBufferStep(case, workload)


class _ShapeCacheStep(InductorStep):
    """Keeps a copy of every shape's results in a cache keyed by the shapes, never evicted."""

    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload)
        self.cache: dict[Any, list[torch.Tensor]] = {}

    def run(self) -> StepOutput:
        out = super().run()
        key = _shape_key(self.workload)
        if key not in self.cache:  # filled on a miss, never evicted
            self.cache[key] = [t.detach().clone() for t in out.outputs]
        return out


class ShapeCacheBackend(InductorBackend):
    """A graph cache that keeps every shape's buffers (with one dynamic graph for all of them)."""

    name = "planted-shape-cache"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _ShapeCacheStep(case, workload)


class _StaleAfterRecompileStep(InductorStep):
    """On a call that recompiled, hands back the first call's results instead of the new graph's."""

    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload)
        self.first: list[torch.Tensor] = []

    def run(self) -> StepOutput:
        before = dynamo_graphs()
        out = super().run()
        if not self.first:
            self.first = [t.detach() for t in out.outputs]  # kept from call 0, outside every probe
        elif dynamo_graphs() > before:
            return StepOutput(list(self.first), out.retained)
        return out


class StaleAfterRecompileBackend(InductorBackend):
    """Stale results after a recompile: the call that compiled a new graph returns the old results."""

    name = "planted-stale-after-recompile"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _StaleAfterRecompileStep(case, workload)


class _GraphPerShapeStep(_ShapeCacheStep):
    """One static graph per shape (``dynamic=False``), each with a workspace kept while its graph
    lives: memory kept across shapes that grows only with the graphs compiled."""

    follows_compile_mode = False  # dynamic=False: a recompile for every new shape

    def run(self) -> StepOutput:
        before = dynamo_graphs()
        out = InductorStep.run(self)
        if dynamo_graphs() > before:
            self.cache[_shape_key(self.workload)] = [torch.empty_like(t) for t in out.outputs]
        return out


class GraphPerShapeBackend(InductorBackend):
    """Not a fault: a backend that compiles (and keeps a workspace for) one graph per shape."""

    name = "planted-graph-per-shape"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _GraphPerShapeStep(case, workload)
