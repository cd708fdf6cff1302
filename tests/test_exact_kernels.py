"""The float64 reference runs the eager kernels that compute below float64 precision as their formulas
(:mod:`conformance.checks.exact_kernels`): each entry must still be needed, and must be the kernel's own math."""

from __future__ import annotations

import pytest
import torch

from conformance.api.case import resolve
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend
from conformance.backends.inductor import InductorBackend
from conformance.checks.exact_kernels import EXACT, exact_op, hardsigmoid_backward
from conformance.run.engine import RunOptions, run_case

aten = torch.ops.aten
#: one sample per entry: the op's float64 arguments, with values where the kernel rounds
SAMPLES = {
    aten.hardsigmoid_backward.default: lambda: (torch.linspace(-2, 2, 9, dtype=torch.float64),
                                                torch.linspace(-4, 4, 9, dtype=torch.float64)),
}


def test_every_entry_has_a_sample() -> None:
    assert set(SAMPLES) == set(EXACT)


@pytest.mark.parametrize("op", list(EXACT), ids=str)
def test_the_eager_kernel_is_below_float64_precision_and_the_formula_is_not(op: object) -> None:
    """Eager at float64 is off by far more than float64 rounding, and by no more than float32's: once torch
    computes the kernel in float64, this fails and the entry goes."""
    args = SAMPLES[op]()
    eager = op(*args)  # type: ignore[operator]
    exact = exact_op(op, args, {})(*args)
    assert exact.dtype == torch.float64 and not torch.equal(exact, eager)
    rel = ((exact - eager).abs().max() / exact.abs().max()).item()
    assert 1e3 * torch.finfo(torch.float64).eps < rel <= torch.finfo(torch.float32).eps, rel
    assert torch.equal(op(*(a.float() for a in args)).double(), eager.float().double())  # float32's math


def test_hardsigmoids_gradient_is_grad_over_six_inside_and_zero_outside() -> None:
    x = torch.tensor([-3.0, -2.5, 0.0, 2.5, 3.0, 7.0], dtype=torch.float64)
    grad = torch.full_like(x, 3.0)
    assert hardsigmoid_backward(grad, x).tolist() == [0.0, 0.5, 0.5, 0.5, 0.0, 0.0]
    op = aten.hardsigmoid_backward.default
    assert exact_op(op, (grad.float(), x.float()), {}) is op  # float32: eager's own kernel


def test_a_backend_exact_in_float64_passes_and_so_does_eager_by_its_own_error() -> None:
    """The op sweep's hardsigmoid in float64: inductor computes the gradient with a float64 1/6 and now matches
    the reference; eager, whose kernel multiplies by float32's 1/6, is 2.98e-8 relative off it and passes by the
    rule that holds a backend to eager's own error at the case's dtype (eager's run keeps its kernel)."""
    case = resolve("op-nn.functional.hardsigmoid-0-float64-train")
    inductor = run_case(case, InductorBackend(), RunOptions(steps=1))
    assert inductor.status == Status.PASS, inductor.reason
    eager = run_case(case, EagerBackend(), RunOptions(steps=1))
    assert eager.status == Status.PASS, eager.reason
