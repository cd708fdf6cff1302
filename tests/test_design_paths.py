"""The contributor paths docs/design.md's "Where things go" names, each taken here as a contributor would.

A tiny memory domain (a toy device allocator) added through ``CompiledStep.extra_probes``,
a backend built by subclassing a shipped one, a generated op kind added as one table entry, and
the one combining rule for checks: each is exercised end to end through the real engine, and the
domain's faults must be caught.
"""

from __future__ import annotations

import time
from itertools import permutations

import pytest

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, Workload, select_cases
from conformance.api.result import DomainFigures, MemoryFigures
from conformance.api.step import StepOutput
from conformance.api.verdict import PRECEDENCE, Check, Status, combine
from conformance.backends.eager import EagerBackend
from conformance.models.lifetime import LifetimeModel, Observation
from conformance.probes.cpu import MemoryProbe, MemoryTrace
from conformance.run.engine import run_case

TOY_BYTES = 4096


class ToyDevice:
    """A device allocator outside torch: the domain a vendor's runtime would report."""

    def __init__(self) -> None:
        self.live = 0
        self.samples: list[tuple[int, int]] | None = None  # recording while a probe window is open

    def allocate(self, nbytes: int) -> None:
        self.live += nbytes
        self._sample()

    def free(self, nbytes: int) -> None:
        self.live -= nbytes
        self._sample()

    def _sample(self) -> None:
        if self.samples is not None:
            self.samples.append((time.time_ns(), self.live - self.baseline))

    def open(self) -> None:
        self.baseline, self.samples = self.live, [(time.time_ns(), 0)]


class ToyProbe:
    """The probe protocol (``domain``, ``trace``, a context manager): timeline samples on the
    profiler's clock (``time.time_ns``), live bytes above the window's start."""

    domain = "toy-device"

    def __init__(self, device: ToyDevice) -> None:
        self.device = device
        self.trace = MemoryTrace(self.domain)

    def __enter__(self) -> ToyProbe:
        self.device.open()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.device.samples is not None
        self.trace = MemoryTrace(self.domain, timeline=[*self.device.samples, (time.time_ns(), self.device.live
                                                                                 - self.device.baseline)])
        self.device.samples = None


class ToyStep(CompiledStep):
    """Eager's step, plus what the toy runtime does on the device each call."""

    def __init__(self, inner: CompiledStep, behaviour: str) -> None:
        self.inner, self.behaviour, self.device = inner, behaviour, ToyDevice()

    def run(self) -> StepOutput:
        out = self.inner.run()
        if self.behaviour in ("scratch", "leak"):
            self.device.allocate(TOY_BYTES)  # a staging buffer the user's program never asked for
        if self.behaviour == "scratch":
            self.device.free(TOY_BYTES)
        return out

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        return self.inner.received_model(observation)

    def extra_probes(self) -> list[MemoryProbe]:
        return [ToyProbe(self.device)]


def toy_backend(behaviour: str) -> EagerBackend:
    """A new backend as a contributor writes one: a subclass whose ``compile`` returns its own step."""

    class ToyBackend(EagerBackend):
        name = f"toy-{behaviour}"
        manifest_path = None

        def compile(self, case: Case, workload: Workload) -> CompiledStep:
            return ToyStep(super().compile(case, workload), behaviour)

    return ToyBackend()


@pytest.fixture(scope="module")
def case() -> Case:
    return select_cases(["mlp-s-train"])[0]


def test_a_clean_extra_domain_passes_and_is_measured(case: Case) -> None:
    result = run_case(case, toy_backend("clean"))
    assert result.status == Status.PASS, result.reason
    assert result.memory is not None and result.memory.domains is not None
    toy = result.memory.domains["toy-device"]
    assert isinstance(toy, DomainFigures) and toy.residual_per_step == [0] * len(result.memory.peak_per_step)
    assert MemoryFigures.from_json(result.memory.to_json()) == result.memory  # typed both ways


@pytest.mark.parametrize(("behaviour", "status"), [("scratch", Status.FAIL_PEAK), ("leak", Status.FAIL_RESIDUAL)])
def test_a_fault_in_the_extra_domain_fails_its_contract(case: Case, behaviour: str, status: Status) -> None:
    result = run_case(case, toy_backend(behaviour))
    assert result.status == status, (result.status, result.reason)
    # the buffer comes after the step's own peak: it raises the combined peak by at most its size
    assert result.excess_bytes is not None and 0 < result.excess_bytes <= TOY_BYTES, result.excess_bytes
    if behaviour == "leak":
        figures = result.check("residual").figures  # type: ignore[union-attr]
        assert figures["residual_per_step"][0] - figures["model_residual_per_step"][0] == TOY_BYTES, figures


def test_checks_combine_by_the_documented_precedence() -> None:
    """Whichever order the engine appends them in, the deciding check is the first failing one in
    PRECEDENCE; a passing check never decides."""
    for a, b in permutations(PRECEDENCE, 2):
        first = min(a, b, key=PRECEDENCE.index)
        decided = combine([Check(a, Status.FAIL_PEAK, f"{a} failed"), Check(b, Status.FAIL_PEAK, f"{b} failed")])
        assert decided is not None and decided.name == first, (a, b, decided)
        assert combine([Check(a, Status.PASS), Check(b, Status.FAIL_RESIDUAL, "x")]).name == b  # type: ignore[union-attr]
    assert combine([Check(n, Status.PASS) for n in PRECEDENCE]) is None


def test_a_new_generated_op_kind_is_one_table_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``OpKind`` added to ``OPS`` (and so to the vocabulary) is drawn, written as torch, and run and
    judged like every other kind: eager, memory-exact, passes."""
    from conformance.cases import generated

    exp = generated.OpKind("exp", generated._gen_same_shape, generated._lines("{o} = torch.exp({a[0]})"))
    monkeypatch.setitem(generated.OPS, "exp", exp)
    monkeypatch.setattr(generated, "DAG_VOCAB", (*generated.DAG_VOCAB, "exp"))
    drawn = (generated.gen_program(generated.RandomChooser(seed), "dag", False) for seed in range(500))
    program = next(p for p in drawn if p.dtype == "float32" and any(op.kind == "exp" for op in p.ops))
    assert "torch.exp(" in generated.program_source(program)
    result = run_case(generated.case_from_program(program, "gen-dag-with-exp", 0), EagerBackend())
    assert result.status == Status.PASS, result.reason
    assert result.memory is not None and result.memory.measured_peak_bytes == result.memory.model_peak_bytes
