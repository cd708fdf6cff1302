"""Planted backends for the repro tests: a fault a repro script must show, and remove.

Each fault is on unless ``CONFORMANCE_TEST_FAULT_OFF`` is set, so one written repro
script can be run with the fault and without it (exit 1, then 0).
"""

from __future__ import annotations

import os
from typing import Any

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, Workload
from conformance.backends.eager import EagerBackend, EagerStep
from conformance.models.lifetime import Observation
from conformance.probes.cpu import MemoryTrace
from tests.planted import LeakyEagerBackend

FAULT_OFF = "CONFORMANCE_TEST_FAULT_OFF"
#: saved-activation bytes the planted backward "holds" for its whole call
HELD_BYTES = 4096


def fault_on() -> bool:
    return not os.environ.get(FAULT_OFF)


class _HeldBackwardStep(EagerStep):
    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        if not self.trains or not fault_on():
            return {}
        # what conformance.models.donation.classify reports for a backward that keeps its boxed argument list
        return {"backward_inputs": "held-for-call",
                "backward_inputs_detail": {"saved_bytes": HELD_BYTES, "held_bytes": HELD_BYTES,
                                           "list_cleared": False}}


class HeldBackwardInputsBackend(EagerBackend):
    """Eager (exact peak and residual), with a backward that holds its saved activations for the whole call:
    only the ``backward-inputs`` check fails."""

    name = "planted-held-backward-inputs"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _HeldBackwardStep(case, workload, None)


def _keep_tanh_when_on(label: str, value: Any) -> None:
    if fault_on():
        LeakyEagerBackend.node_hook(label, value)


class ToggleLeakBackend(EagerBackend):
    """``eager-leaky`` (``tanh`` results never die) while the fault is on, plain eager when it is off."""

    name = "planted-toggle-leak"
    node_hook = staticmethod(_keep_tanh_when_on)


class CrashOnShrinkBackend(LeakyEagerBackend):
    """Leaks like ``eager-leaky``, and aborts the process on any shrunk candidate (a compiler that crashes
    on a smaller graph): the candidates crash, the shrink and the run must not."""

    name = "planted-crash-on-shrink"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        if case.id.endswith("-shrunk"):
            os.abort()
        return super().compile(case, workload)


class CrashOnTanhBackend(EagerBackend):
    """Aborts the process on any generated program with a ``tanh`` while the fault is on (a compiler
    crashing on one op): the crash itself is what a repro shrinks and shows."""

    name = "planted-crash-on-tanh"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        program = case.program
        if fault_on() and program is not None and any(op.kind == "tanh" for op in (*program.ops, *program.body)):
            os.abort()
        return super().compile(case, workload)


class _LostBufferStep(EagerStep):
    def run(self):  # type: ignore[no-untyped-def]
        buffers = dict(self.workload.model.named_buffers())
        before = {n: b.clone() for n, b in buffers.items()} if fault_on() else {}
        out = super().run()
        for n, b in before.items():
            buffers[n].copy_(b)
        return out


class ToggleLostBufferBackend(EagerBackend):
    """Eager whose step drops its buffer updates (batch norm's running statistics) while the fault is on."""

    name = "planted-toggle-lost-buffer"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _LostBufferStep(case, workload, None)
