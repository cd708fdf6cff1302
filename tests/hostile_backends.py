"""Adapters a careless or hostile vendor could ship, for tests/test_bad_inputs.py.

Each is a real adapter (or a real non-adapter), selected as
``--backend tests.hostile_backends:Name`` like any ad hoc backend.
"""

from __future__ import annotations

import time
from typing import Any

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


class _BadNotesStep(EagerStep):
    def notes(self) -> list[str]:
        return ["fine", 42]  # type: ignore[list-item]  # the fault: a note that is not a str


class NonStringNotesBackend(EagerBackend):
    """Its step's ``notes()`` holds an int: the record must not carry it (the schema's reader rejects it)."""

    name = "hostile-non-string-notes"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _BadNotesStep(case, workload, None)


class _ClobberingStep(EagerStep):
    def memory_findings(self, observation: Any, traces: Any) -> dict[str, Any]:
        return {"timeline": "not a list", "measured_peak_bytes": 0}  # the harness's own figures


class ClobberFindingsBackend(EagerBackend):
    """Its findings are named like the engine's figures: they must never replace them."""

    name = "hostile-clobber-findings"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _ClobberingStep(case, workload, None)


class BadVersionsBackend(EagerBackend):
    name = "hostile-bad-versions"

    def versions(self) -> dict[str, str]:
        return {"torch": ["2", "13"]}  # type: ignore[dict-item]


class _BadModelStep(EagerStep):
    def program_model(self, observation: Any) -> Any:
        return "a model"


class BadModelBackend(EagerBackend):
    name = "hostile-bad-model"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _BadModelStep(case, workload, None)


#: where the spawning adapters below write the pid of the process they leave running
PIDFILE_ENV = "CONFORMANCE_TEST_PIDFILE"


def _leave_a_daemon() -> None:
    """A ``sleep`` in a new session whose parent has exited (a double fork): an orphan from the start."""
    import os
    import subprocess

    pidfile = os.environ[PIDFILE_ENV]
    subprocess.run(["setsid", "sh", "-c", f'sleep 300 >/dev/null 2>&1 & echo $! > "{pidfile}"'], check=True)


class SetsidChildBackend(EagerBackend):
    """Starts a daemon in a new session in ``compile`` and leaves it running."""

    name = "hostile-setsid-child"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        _leave_a_daemon()
        return super().compile(case, workload)


class ExitWithChildBackend(EagerBackend):
    """Starts a daemon, then the worker exits mid-pair: the daemon must not outlive it."""

    name = "hostile-exit-with-child"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        import os

        _leave_a_daemon()
        os._exit(3)


class ImpostorEagerBackend(EagerBackend):
    """A second adapter under the installed ``eager``'s name: its verdicts would pass for eager's."""

    name = "eager"


class EmptyNameBackend(EagerBackend):
    """A name the results reader refuses (``minLength: 1``): its records would be lost after the run."""

    name = ""


class InterruptingBackend(EagerBackend):
    """Its compile raises KeyboardInterrupt although nobody pressed Ctrl-C (a vendor's misplaced 'abort')."""

    name = "hostile-keyboard-interrupt"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        raise KeyboardInterrupt("vendor runtime aborted the compile")


class HangAlwaysBackend(EagerBackend):
    """Eager, except that every step never returns: a run can be interrupted before its first verdict."""

    name = "hostile-hang-always"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _HangingStep(case, workload, None)
