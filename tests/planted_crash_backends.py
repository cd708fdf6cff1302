"""Adapters that crash or hang in one chosen case, to prove crash isolation works.

Selected as ``tests.planted_crash_backends:SegfaultBackend`` etc.; importable by the
isolation worker because ``spawn`` hands the worker the parent's ``sys.path``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput
from conformance.backends.eager import EagerBackend, EagerStep

TARGET_CASE = "mlp-s-infer"


class _FaultingStep(EagerStep):
    def __init__(self, case: Case, workload: Workload, fault: str) -> None:
        super().__init__(case, workload, None)
        self.fault = fault

    def run(self) -> StepOutput:
        if self.fault == "segv":
            ctypes.string_at(0)  # a real invalid read: SIGSEGV in native code
        elif self.fault == "abort":
            os.kill(os.getpid(), signal.SIGABRT)
        elif self.fault == "hang":
            while True:  # a backend stuck in its runtime
                time.sleep(1)
        return super().run()


class _Planted(EagerBackend):
    fault = ""

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _FaultingStep(case, workload, self.fault if case.id == TARGET_CASE else "")


class SegfaultBackend(_Planted):
    """Eager, except that running ``mlp-s-infer`` reads address 0."""

    name = "planted-segfault"
    fault = "segv"


class AbortBackend(_Planted):
    name = "planted-abort"
    fault = "abort"


class HangBackend(_Planted):
    """Eager, except that ``mlp-s-infer`` never returns."""

    name = "planted-hang"
    fault = "hang"


class WarmUpSegfaultBackend(EagerBackend):
    """Eager, except that its warm-up (``Backend.warm_up``, in a run's first worker) reads address 0."""

    name = "planted-warm-up-segfault"

    def warm_up(self) -> None:
        ctypes.string_at(0)


class ForkPoisoningBackend(EagerBackend):
    """Eager, with a preload module that leaves this process as one whose forked children torch refuses
    the GPU (what an import that initialises CUDA does on a GPU machine)."""

    name = "planted-fork-poisoning"
    preload_modules = ("tests.planted_fork_poison",)
