"""Backends whose memory lives outside torch's allocator, as a third-party runtime's does (numpy, malloc).

Selectable as ``--backend tests.planted_native_backends:ClassName``.  ``NumpyRuntimeBackend`` runs the
case's step eagerly and hands its results over in numpy memory, as an ONNX Runtime wrapper does
(``torch.from_numpy`` of the session's outputs); the others plant one fault each in that memory.
"""

from __future__ import annotations

import ctypes
from typing import Any, ClassVar

import numpy as np
import torch

from conformance.api.adapter import Capabilities, CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput
from conformance.backends.eager import EagerBackend, EagerStep

#: the bytes each leaking step keeps alive
LEAK_BYTES = 1 << 20


def _in_numpy(t: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(t.detach().numpy().copy())


class _NumpyStep(EagerStep):
    """The eager step with its outputs and gradients moved into numpy memory before it returns."""

    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload, None)
        self.kept: list[Any] = []

    def run(self) -> StepOutput:
        out = super().run()
        outputs = [_in_numpy(t) for t in out.outputs]
        retained = {name: _in_numpy(g) for name, g in out.retained.items()}
        del out
        for name, g in retained.items():
            self.state[name].grad = g
        return StepOutput(outputs, retained)


class NumpyRuntimeBackend(EagerBackend):
    """Results in numpy memory: held on the native domain (no fault)."""

    name = "planted-numpy-runtime"
    capabilities = Capabilities(dtypes=("float32", "float64"))

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _NumpyStep(case, workload)


class _NumpyLeakStep(_NumpyStep):
    def run(self) -> StepOutput:
        self.kept.clear()  # the previous step's buffer is freed; this step keeps one anew
        self.kept.append(np.ones(LEAK_BYTES // 8))
        return super().run()


class NumpyLeakBackend(NumpyRuntimeBackend):
    """Keeps a numpy array of ``LEAK_BYTES`` alive after each step: a native residual leak."""

    name = "planted-numpy-leak"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _NumpyLeakStep(case, workload)


class _MallocLeakStep(EagerStep):
    """The eager step, keeping a malloc'd buffer (through the process's own malloc) alive after it."""

    libc: ClassVar[Any] = None

    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload, None)
        if _MallocLeakStep.libc is None:
            libc = ctypes.CDLL(None)  # the process's malloc, as a runtime linked against it calls it
            libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
            libc.free.argtypes = [ctypes.c_void_p]
            _MallocLeakStep.libc = libc
        self.kept: list[int] = []

    def run(self) -> StepOutput:
        for ptr in self.kept:
            self.libc.free(ptr)
        self.kept = [self.libc.malloc(LEAK_BYTES)]
        return super().run()


class MallocLeakBackend(EagerBackend):
    """Declares the native domain and keeps a malloc'd buffer of ``LEAK_BYTES`` after each step."""

    name = "planted-malloc-leak"
    capabilities = Capabilities(memory_domains=("torch-cpu", "native"), dtypes=("float32", "float64"))

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _MallocLeakStep(case, workload)


class _SharedBufferStep(EagerStep):
    """Returns its outputs in numpy buffers made once, at compile time (a runtime's own output buffers)."""

    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload, None)
        self.buffers: dict[int, np.ndarray] = {}

    def run(self) -> StepOutput:
        out = super().run()
        outputs = []
        for i, t in enumerate(out.outputs):
            buffer = self.buffers.get(i)
            if buffer is None or buffer.shape != tuple(t.shape):
                buffer = self.buffers[i] = np.empty(tuple(t.shape), dtype=t.detach().numpy().dtype)
            buffer[...] = t.detach().numpy()
            outputs.append(torch.from_numpy(buffer))
        return StepOutput(outputs, out.retained)


class SharedBufferBackend(EagerBackend):
    """Outputs in buffers allocated before the probed calls: memory no probe saw allocated."""

    name = "planted-shared-buffer"
    capabilities = Capabilities(training=False, dtypes=("float32", "float64"))

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _SharedBufferStep(case, workload)


class UnprobedDomainBackend(EagerBackend):
    """Eager, declaring a memory domain (an accelerator's) that no probe observes."""

    name = "planted-unprobed-domain"
    capabilities = Capabilities(memory_domains=("torch-cpu", "vendor-npu"), dtypes=("float32", "float64"))
