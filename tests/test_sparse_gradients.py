"""Sparse gradients (``Embedding``/``EmbeddingBag`` with ``sparse=True``): programs plain PyTorch runs.

A sparse COO gradient is compared as the dense tensor it stands for (summed at its indices, on the NumPy side),
and modelled as its two dense tensors, indices and values, each in its own storage (the indices are the input's,
a view).  Eager is exact on both modules' training steps, and the sparse path still catches a wrong gradient
value and bytes a backend keeps.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from conformance.api.adapter import CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput, host_copies
from conformance.backends.eager import EagerBackend, EagerStep
from conformance.run.engine import run_case
from tests.planted_backends import _KeepingStep


class _Loss(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        out = self.module(*inputs)
        return out.square().mean() + out.mean()


MODULES = {
    "embedding": (lambda: nn.Embedding(10, 3, sparse=True), lambda: (torch.randint(0, 10, (2, 4)),)),
    "embedding-bag": (lambda: nn.EmbeddingBag(10, 3, mode="mean", sparse=True),
                      lambda: (torch.randint(0, 10, (2, 4)),)),
    "embedding-bag-sum": (lambda: nn.EmbeddingBag(10, 3, mode="sum", sparse=True),
                          lambda: (torch.randint(0, 10, (9,)), torch.tensor([0, 3, 5]))),
}


def _case(name: str) -> Case:
    make, inputs = MODULES[name]
    return Case(f"sparse-{name}-train", "train_step", "tests", 0, lambda seed: Workload(_Loss(make()), inputs()),
                trains=True, optimizer="none", requires=frozenset({"training"}), in_default=False)


def test_a_sparse_gradient_is_copied_as_the_dense_tensor_it_stands_for() -> None:
    """Repeated indices add (an uncoalesced gradient), as ``to_dense`` does; nothing is coalesced in torch."""
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2, 0]]), torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
                                     (4, 2))
    (copy,) = host_copies({"g": sparse}).values()
    assert copy.layout == torch.strided and torch.equal(copy, sparse.to_dense())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_eager_is_exact_on_a_sparse_gradient_step(name: str) -> None:
    result = run_case(_case(name), EagerBackend())
    assert result.status == "pass", result.reason


class _WrongSparseGradStep(EagerStep):
    def run(self) -> StepOutput:
        out = super().run()
        grad = next(g for g in out.retained.values() if g.layout == torch.sparse_coo)
        with torch.no_grad():
            grad._values()[0, 0] += 1e-2  # in place: no byte moves, the value is wrong
        return out


class WrongSparseGradBackend(EagerBackend):
    name = "planted-sparse-grad"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _WrongSparseGradStep(case, workload, None)


class KeepsEmbeddingBackend(EagerBackend):
    """Keeps the forward's looked-up rows after the step: a residual the model does not have."""

    name = "planted-sparse-keep"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _KeepingStep(case, workload, "embedding", release_at_end=False)


def test_a_wrong_sparse_gradient_fails_parity() -> None:
    result = run_case(_case("embedding"), WrongSparseGradBackend())
    assert result.status == "fail-parity", result.reason
    assert "grad[module.weight]" in result.reason


def test_bytes_kept_beside_a_sparse_gradient_fail_residual() -> None:
    result = run_case(_case("embedding"), KeepsEmbeddingBackend())
    assert result.status == "fail-residual", result.reason
    kept: Any = result.excess_bytes
    assert kept == 2 * 4 * 3 * 4  # the looked-up rows: batch 2 x 4 indices x 3 features, float32
