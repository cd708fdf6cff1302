"""The optimizer step's model (:mod:`conformance.models.optimizer`): recorded from the real optimizer,
held against torch's real CPU allocator, and appended to the step's model in the probes' window."""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch

from conformance.api.case import select_cases
from conformance.api.step import optimizer_segment
from conformance.backends.eager import EagerBackend
from conformance.models.lifetime import LifetimeModel, Storage
from conformance.models.optimizer import (
    OPTIMIZER_PREFIX,
    ZERO_GRAD_EVENT,
    OptimizerSegment,
    record_optimizer_step,
    with_optimizer_step,
)
from conformance.probes.cpu import CpuAllocatorProbe
from conformance.run.engine import run_case
from conformance.run.options import DEFAULT_STEPS


def _stepped(make: type[torch.optim.Optimizer], sizes: tuple[int, ...], dtype: torch.dtype = torch.float32,
             **kwargs: float) -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer]:
    """Parameters with gradients, and an optimizer whose state one step already made (the steady state)."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen, dtype=dtype)) for n in sizes]
    optimizer = make(params, **kwargs)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=dtype)
        if not optimizer.state:
            optimizer.step()
    return params, optimizer


def _measured(make: type[torch.optim.Optimizer], sizes: tuple[int, ...], dtype: torch.dtype = torch.float32,
              **kwargs: float) -> int:
    """The real step's peak, measured by the harness's CPU allocator probe."""
    _params, optimizer = _stepped(make, sizes, dtype, **kwargs)
    gc.collect()
    with CpuAllocatorProbe() as probe:
        optimizer.step()
    assert probe.trace.residual_bytes == 0
    return probe.trace.peak_bytes


def _recorded(make: type[torch.optim.Optimizer], sizes: tuple[int, ...], dtype: torch.dtype = torch.float32,
              **kwargs: float) -> OptimizerSegment:
    params, optimizer = _stepped(make, sizes, dtype, **kwargs)
    return record_optimizer_step(params, optimizer)


#: what torch's argument parser wraps a Python float in (a double), and its cast to a float32 step
WRAPPED, CAST = 8, 4


def test_adam_keeps_the_previous_denominator_alive_as_the_real_optimizer_does() -> None:
    """Eager Adam's ``denom`` is a local of its per-parameter loop: the first parameter's is still held
    while the second's ``sqrt`` and ``div`` are made.  The peak is there, and equals the allocator's."""
    small, big = 64, 128
    segment = _recorded(torch.optim.Adam, (small, big), lr=1e-3)
    held_denominator = small * 4
    sqrt_and_div = 2 * big * 4
    assert segment.peak_bytes == held_denominator + sqrt_and_div + WRAPPED + CAST
    assert segment.peak_bytes == _measured(torch.optim.Adam, (small, big), lr=1e-3)
    # a model freeing each temporary at its last use (an ideal graph's) would miss the held denominator
    assert segment.peak_bytes - held_denominator == sqrt_and_div + WRAPPED + CAST
    assert segment.residual_bytes == 0
    denominators = [s for s in segment.storages if s.op == "aten.div.Tensor"]
    assert [s.nbytes for s in denominators] == [small * 4, big * 4]
    first, second = denominators
    assert first.death is not None and first.death > second.birth  # alive across the next iteration


@pytest.mark.parametrize(("dtype", "expected"), [(torch.float32, WRAPPED + CAST), (torch.float64, WRAPPED)])
def test_sgd_momentum_allocates_only_its_wrapped_scalars(dtype: torch.dtype, expected: int) -> None:
    """``buf.mul_(momentum)`` wraps the float in a double tensor (8 B, before the op) that a float32
    step casts to its dtype inside the op (4 B); a float64 step needs no cast."""
    segment = _recorded(torch.optim.SGD, (32, 8), dtype, lr=0.01, momentum=0.9)
    assert segment.peak_bytes == expected == _measured(torch.optim.SGD, (32, 8), dtype, lr=0.01, momentum=0.9)
    wrapped = [s for s in segment.storages if s.op == "wrapped scalar"]
    assert wrapped and all(s.nbytes == WRAPPED and s.death == s.birth for s in wrapped)


@pytest.mark.parametrize("name", ["sgd-momentum", "adam", "adamw"])
@pytest.mark.parametrize("case_id", ["mlp-s-train", "bn-mlp-s-train", "loop-rnn-t3-train"])
def test_case_segments_equal_the_real_step(case_id: str, name: str) -> None:
    (case,) = select_cases([case_id])
    case = dataclasses.replace(case, optimizer=name)
    segment = optimizer_segment(case)
    assert segment is not None
    workload = case.build()
    optimizer = case.make_optimizer(workload.model)
    assert optimizer is not None
    params = [p for p in workload.model.parameters() if p.requires_grad]
    for _ in range(2):
        for p in params:
            p.grad = torch.randn_like(p)
        if not optimizer.state:
            optimizer.step()
    gc.collect()
    with CpuAllocatorProbe() as probe:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    assert segment.peak_bytes == probe.trace.peak_bytes
    assert segment.residual_bytes == 0 == probe.trace.residual_bytes
    assert all(s.producer.startswith(OPTIMIZER_PREFIX) and s.op for s in segment.storages)


def test_appending_drops_the_outputs_first_and_frees_the_gradients_at_zero_grad() -> None:
    out = Storage(0, 100, "loss", "aten.sum", (), "float32", "output", birth=0)
    grad = Storage(1, 40, "mm", "aten.mm", (10,), "float32", "retained", birth=0)
    temp = Storage(2, 1000, "relu", "aten.relu", (250,), "float32", "intermediate", birth=0, death=0)
    step = LifetimeModel(["relu", "sum"], [1140, 140], [out, grad, temp])
    seg = OptimizerSegment([f"{OPTIMIZER_PREFIX}aten.sqrt.default", f"{OPTIMIZER_PREFIX}step returned"],
                           [Storage(0, 16, f"{OPTIMIZER_PREFIX}aten.sqrt.default", "aten.sqrt.default", (4,),
                                    "float32", birth=0, death=0)], [4, 0])
    model = with_optimizer_step(step, seg)
    assert model.events[-1] == ZERO_GRAD_EVENT
    assert model.live_bytes == [1140, 140, 40 + 16 + 4, 40, 40]
    assert model.residual_bytes == 0 and step.residual_bytes == 40  # pure: the step's model is unchanged
    assert out.death is None and grad.death is None
    appended = model.storages[-1]
    assert (appended.birth, appended.death, appended.sid) == (2, 2, 3)


@pytest.mark.parametrize("case_id", ["mlp-s-train", "adam-mlp-s-train", "bn-mlp-s-train"])
def test_eager_steps_the_optimizer_in_the_window_byte_exact(case_id: str) -> None:
    """Every probed call holds the optimizer's step and zero_grad: peak equal to the model, residual 0
    (the gradients are freed by ``zero_grad(set_to_none=True)``)."""
    (case,) = select_cases([case_id])
    result = run_case(case, EagerBackend())
    assert result.status == "pass", result.reason
    memory = result.memory
    assert memory is not None
    assert memory.measured_peak_bytes == memory.model_peak_bytes
    assert memory.residual_per_step == [0] * DEFAULT_STEPS and memory.model_residual_bytes == 0
    events = [event for event, _ in memory.model_timeline]
    assert events[-1] == ZERO_GRAD_EVENT and any(e.startswith(OPTIMIZER_PREFIX) for e in events)


def test_without_an_optimizer_the_gradients_are_the_residual() -> None:
    (case,) = select_cases(["mlp-s-train"])
    result = run_case(dataclasses.replace(case, optimizer="none"), EagerBackend())
    assert result.status == "pass", result.reason
    memory = result.memory
    assert memory is not None and memory.model_residual_bytes > 0
    assert memory.residual_per_step == [memory.model_residual_bytes] * DEFAULT_STEPS
    assert all(not event.startswith(OPTIMIZER_PREFIX) for event, _ in memory.model_timeline)


class _UnmodelledOptimizerBackend(EagerBackend):
    """Eager, but its step says it cannot model its optimizer step (as a compiled one with no program)."""

    name = "eager-unmodelled-optimizer"

    def compile(self, case, workload):  # type: ignore[no-untyped-def]
        step = super().compile(case, workload)
        step.optimizer_model = lambda eager: None  # type: ignore[method-assign]
        return step


def test_an_optimizer_step_the_backend_does_not_model_runs_outside_the_window_with_a_note() -> None:
    (case,) = select_cases(["adam-mlp-s-train"])
    result = run_case(case, _UnmodelledOptimizerBackend())
    assert result.status == "pass", result.reason
    assert any("optimizer step ran outside the probes' window" in n for n in result.notes), result.notes
    memory = result.memory
    assert memory is not None and memory.model_residual_bytes > 0  # the gradients, as before the optimizer
    assert memory.residual_per_step == [memory.model_residual_bytes] * DEFAULT_STEPS
    assert result.parity["ok"] and "optim[fc1.weight].exp_avg" in result.parity["calls"]["0"]["compared"]
