"""Adapters a careless or hostile vendor could ship, for tests/test_bad_inputs.py.

Each is a real adapter (or a real non-adapter), selected as
``--backend tests.hostile_backends:Name`` like any ad hoc backend.
"""

from __future__ import annotations

import time

from conformance.api.adapter import Backend, CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput
from conformance.backends.eager import EagerBackend, EagerStep

HANG_CASE = "mlp-m-infer"  # after mlp-s-infer and mlp-s-train in registry order: those finish first


class _HangingStep(EagerStep):
    def run(self) -> StepOutput:
        while True:  # a runtime that never returns (sleeps: the GIL is free, signals are seen)
            time.sleep(1)


class HangLaterBackend(EagerBackend):
    """Eager, except that ``mlp-m-infer`` never returns: a run can be interrupted mid-way."""

    name = "hostile-hang-later"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        if case.id == HANG_CASE:
            return _HangingStep(case, workload, None)
        return super().compile(case, workload)


class _NoneStep(EagerStep):
    def run(self) -> StepOutput:
        super().run()
        return None  # type: ignore[return-value]  # the fault: a step that forgets its output


class NoneStepBackend(EagerBackend):
    """Its step returns None: the harness must still give the pair a verdict."""

    name = "hostile-none-step"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _NoneStep(case, workload, None)


class RaisingInitBackend(EagerBackend):
    name = "hostile-raising-init"

    def __init__(self) -> None:
        raise RuntimeError("licence server unreachable")


class NonStringNameBackend(EagerBackend):
    name = 42  # type: ignore[assignment]


class AbstractBackend(Backend):  # compile() left abstract
    name = "hostile-abstract"


def not_a_class() -> str:
    return "a function, not an adapter"


HOSTILE_NAME = '<img src=x onerror="alert(1)" data-injected="name">"\'><script>alert(2)</script>[/bold][red]'


class HostileNameBackend(EagerBackend):
    """A backend whose name is markup: the report must show it as text."""

    name = HOSTILE_NAME


#: clears the screen, retitles the terminal, turns text red, moves the cursor up and erases a line
CONTROL_MESSAGE = "\x1b[2J\x1b]0;pwned\x07\x1b[31mred\x1b[0m\x1b[1A\x1b[2K\rhidden\x9b31m\x08"


class ControlSequenceBackend(EagerBackend):
    """Its compile fails with a message made of terminal control sequences."""

    name = "hostile-control"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        raise RuntimeError(CONTROL_MESSAGE)
