"""The shipped ``openvino`` and ``onnxrt`` adapters with one fault planted in the runtime's own memory.

Selectable as ``--backend tests.planted_runtime_backends:ClassName``.  Each keeps something alive from one
call to the next, outside torch's allocator, as a careless wrapper of a runtime does: only the native domain
sees it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput
from conformance.backends.onnxrt import OnnxRtBackend, OnnxRtStep
from conformance.backends.openvino import OpenVinoBackend, OpenVinoStep

#: the bytes each planted step keeps alive after it returns
HELD_BYTES = 1 << 18


class _HoldsBufferStep(OpenVinoStep):
    """OpenVINO's step, keeping a numpy buffer of ``HELD_BYTES`` from each call until the next."""

    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload)
        self.held: list[np.ndarray] = []

    def run(self) -> StepOutput:
        self.held = [np.ones(HELD_BYTES // 8)]  # the previous call's goes, this call's stays
        return super().run()


class OpenVinoHoldsBufferBackend(OpenVinoBackend):
    name = "planted-openvino-holds-buffer"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _HoldsBufferStep(case, workload)


class _HoldsOutputsStep(OnnxRtStep):
    """ONNX Runtime's step, keeping each call's outputs (numpy memory) until the next call."""

    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload)
        self.held: list[Any] = []

    def run(self) -> StepOutput:
        out = super().run()
        self.held = [t.detach().numpy().copy() for t in out.outputs]
        return out


class OnnxRtHoldsOutputsBackend(OnnxRtBackend):
    name = "planted-onnxrt-holds-outputs"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _HoldsOutputsStep(case, workload)
