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


#: where :class:`WorkerFactsBackend` writes what its worker process is made of (JSON)
WORKER_FACTS_ENV = "CONFORMANCE_TEST_WORKER_FACTS"


class WorkerFactsBackend(EagerBackend):
    """Eager, and its compile writes down the facts of the worker process it runs in: its command line,
    its signal handlers, what its descriptors point at, and which of the command's modules it holds."""

    name = "planted-worker-facts"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        import json
        import sys

        fds = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass
        facts = {
            "cmdline": open("/proc/self/cmdline", "rb").read().decode().split("\0"),
            "sigint_is_keyboard_interrupt": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            "sigterm_is_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "fd_targets": sorted(fds.values()),
            "modules": sorted(m for m in sys.modules if m.startswith("conformance.cli")),
            "cwd_on_path": os.getcwd() in sys.path,
        }
        with open(os.environ[WORKER_FACTS_ENV], "w", encoding="utf-8") as out:
            json.dump(facts, out)
        return super().compile(case, workload)
