"""Where a run's time goes: named phases of each pair and of the run, for ``--profile-harness``.

A pair's engine phases are recorded in its result's ``timing`` as ``phase_<name>_s``; the run
adds what lies outside any pair (start-up, isolation round trips, repros, the report).  The
breakdown is what to read before making the harness faster: the goal is that a run costs
little more than the compiles it cannot avoid.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

#: A pair's engine phases, in the order they run.
PAIR_PHASES = {
    "build": "build the case's module and inputs",
    "compile": "the backend's compile and first call",
    "reference": "float64, eager float32 and perturbed float64 reference calls (once per case, shared by its backends)",
    "parity": "loading a case's shared references, parity of every call against them",
    "model": "lifetime models: user-level, received graphs, generated program",
    "probe": "the timed call and the probed calls (probe windows included)",
    "judge": "checks, blame, the backend's own findings",
    "cleanup": "torch._dynamo.reset and releasing the pair's objects",
}
PREFIX = "phase_"


def key(name: str) -> str:
    return f"{PREFIX}{name}_s"


def cpu_key(name: str) -> str:
    """The timing key of a phase's CPU seconds (this process's, all its threads): on a loaded machine the wall
    seconds say how long a phase waited, the CPU seconds what it cost."""
    return f"{PREFIX}{name}_cpu_s"


@dataclass
class PhaseClock:
    """Seconds (wall and CPU) per named phase; a phase entered twice adds up."""

    seconds: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def timing(self) -> dict[str, float]:
        return {**{key(name): s for name, s in self.seconds.items()},
                **{cpu_key(name): s for name, s in self.cpu.items()}}


def pair_wall_s(timing: dict[str, float]) -> float:
    """A pair's own seconds: the worker round trip where it ran isolated, else its engine phases."""
    if "isolated_wall_s" in timing:
        return timing["isolated_wall_s"]
    if "pair_s" in timing:
        return timing["pair_s"]
    return sum(v for k, v in timing.items() if not k.startswith(PREFIX))


@dataclass(frozen=True)
class Breakdown:
    """Seconds per phase over a whole run, and the run's wall time."""

    wall_s: float
    rows: list[tuple[str, float, str]]  # (phase, seconds, what it covers)
    workers: int = 0  # pytest-xdist workers (pairs overlapped)

    @property
    def accounted_s(self) -> float:
        return sum(s for _, s, _ in self.rows)


def breakdown(timings: Sequence[dict[str, float]], wall_s: float, run_phases: dict[str, float],
              workers: int = 0) -> Breakdown:
    """Pair phases summed over the pairs' ``timing``, the isolation round trips' overhead, then the run's
    own phases, and what none of them covers.

    With pytest-xdist ``workers`` pairs overlap, so pair-seconds can exceed the wall time."""
    totals = {name: 0.0 for name in PAIR_PHASES}
    isolation = 0.0
    for timing in timings:
        for name in PAIR_PHASES:
            totals[name] += timing.get(key(name), 0.0)
        if "isolated_wall_s" in timing and "pair_s" in timing:
            isolation += max(0.0, timing["isolated_wall_s"] - timing["pair_s"])
    rows = [(name, totals[name], what) for name, what in PAIR_PHASES.items()]
    rows.append(("isolation", isolation, "worker start-up and pipe round trips, beyond the pairs' own time"))
    for name, seconds in run_phases.items():
        rows.append((name, seconds, RUN_PHASES.get(name, "")))
    paired = sum(totals.values()) + isolation
    if workers <= 1:
        rows.append(("other", max(0.0, wall_s - paired - sum(run_phases.values())),
                     "pytest, result writing, the summary"))
    return Breakdown(wall_s, rows, workers)


#: The run's own phases, outside any pair.
RUN_PHASES = {
    "startup": "pytest start-up, selection and collection, until the first pair starts",
    "worker start": "waiting for isolation workers to import torch and the backends (what did not overlap)",
    "repro": "repro scripts for failing pairs (shrinking included)",
    "report": "HTML report and run history",
}

#: When the ``conformance`` command started (set by :mod:`conformance.cli.launch`), for its wall time.
STARTED: float | None = None
