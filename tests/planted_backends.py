"""Backends with planted faults, to prove the harness fails them (and names the culprit).

They are real adapters, selectable as ``--backend tests.planted_backends:ClassName``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput
from conformance.backends.eager import EagerBackend, EagerStep


class _KeepingStep(EagerStep):
    """Keeps the value of one node; ``release_at_end`` drops it when the step returns."""

    def __init__(self, case: Case, workload: Workload, target: str, release_at_end: bool) -> None:
        self.kept: list[Any] = []
        self.target = target
        self.release_at_end = release_at_end
        super().__init__(case, workload, self._hook)

    def _hook(self, label: str, value: Any) -> None:
        if label == self.target:
            self.kept.append(value)

    def run(self) -> StepOutput:
        if not self.release_at_end:
            self.kept.clear()  # the previous step's leak is freed; this step leaks anew
        out = super().run()
        if self.release_at_end:
            self.kept.clear()
        return out


class LeakIntermediateBackend(EagerBackend):
    """Keeps one intermediate alive after the step: a residual leak."""

    name = "planted-leak"
    target: ClassVar[str] = "tanh"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _KeepingStep(case, workload, self.target, release_at_end=False)


class HoldActivationBackend(EagerBackend):
    """Holds one activation past its last use until the step ends: a peak fault."""

    name = "planted-hold"
    target: ClassVar[str] = "addmm"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _KeepingStep(case, workload, self.target, release_at_end=True)


class _PerturbingStep(EagerStep):
    def run(self) -> StepOutput:
        out = super().run()
        name = next(iter(out.retained))
        with torch.no_grad():
            out.retained[name][0] += 1e-2  # in place, so the parameter's .grad sees it too
        return out


class PerturbGradBackend(EagerBackend):
    """Adds 0.01 to one gradient element: numerically wrong, memory-perfect."""

    name = "planted-grad"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _PerturbingStep(case, workload, None)


#: what :class:`LossLogBackend` keeps: one float64 copy of the loss per step, never dropped (the leak)
LOSS_LOG: list[torch.Tensor] = []


class _LossLogStep(EagerStep):
    def run(self) -> StepOutput:
        out = super().run()
        LOSS_LOG.append(out.outputs[0].detach().to(torch.float64))  # 8 B kept in a global list each step
        return out


class LossLogBackend(EagerBackend):
    """Logs each step's loss as a float64 tensor in a module-level list: an 8 B leak per step, the size of
    the optimizer's own wrapped scalars (a stand-in blame must not name)."""

    name = "planted-loss-log"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _LossLogStep(case, workload, None)


class _SharedOutputStep(EagerStep):
    """Writes every call's results into tensors it owns and returns those, one buffer per output for every call
    (OpenVINO's ``share_outputs=True``): the output a caller kept from one call becomes the next call's."""

    def __init__(self, case: Case, workload: Workload) -> None:
        self.buffers: list[torch.Tensor] = []
        super().__init__(case, workload, None)

    def run(self) -> StepOutput:
        out = super().run()
        with torch.no_grad():
            if not self.buffers:
                self.buffers = [torch.empty_like(t) for t in out.outputs]
            for buffer, value in zip(self.buffers, out.outputs):
                buffer.copy_(value)
        return StepOutput(list(self.buffers), out.retained)


class SharedOutputBackend(EagerBackend):
    name = "planted-shared-output"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _SharedOutputStep(case, workload)
