"""Kernels whose temporaries follow the values: measured on each call's own values.

``unique`` allocates by the number of distinct elements, ``matrix_exp`` by the degree its norm
picks, a boolean mask's ``index_put`` by the mask's count.  Two calls of the same layout differ
in memory, so no table entry and no stand-in measurement can say them: the step is traced on
the call's values and the kernel measured there
(:data:`conformance.models.transients.VALUE_DEPENDENT_KERNELS`).  Eager must be exact on every
value set here; without the measurement (the meter refusing) it is not, so the tests can fail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from conformance.api.case import Case, Workload
from conformance.api.step import trace_step
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend
from conformance.models.transients import MEASURED_WORKSPACE, KernelNotModelled, depends_on_values
from conformance.run.engine import run_case


class Unique(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        return values.sum() + inverse.sum() + counts.sum()


class MatrixExp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x)


class MaskedAssign(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[mask] = torch.zeros(x.shape[1:])  # a row per True element: indexed through the mask's ``nonzero``
        return y


class IsIn(nn.Module):
    def forward(self, x: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
        return torch.isin(x, test)


def _few(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32) % 2


def _many(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32)


#: per module, two inputs of one layout whose values make the kernel allocate differently
VALUE_SETS: dict[str, tuple[Callable[[], nn.Module], tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = {
    "unique": (Unique, (_few(64),), (_many(64),)),
    "matrix_exp": (MatrixExp, (torch.eye(6) * 1e-3,), (torch.full((6, 6), 3.0),)),
    "index_put-mask": (MaskedAssign, (torch.ones(40, 3), torch.arange(40) % 7 == 0),
                       (torch.ones(40, 3), torch.arange(40) % 7 != 0)),
    "isin": (IsIn, (_few(200), _few(150)), (_many(200), _many(150) + 0.5)),
}


def _case(name: str, which: int) -> Case:
    make, *inputs = VALUE_SETS[name]
    given = inputs[which]
    return Case(f"test-values-{name}-{which}", "inference", "mine", 0,
                lambda seed: Workload(make(), tuple(t.clone() for t in given)),
                make_inputs=lambda call: tuple(t.clone() for t in given))


def _measured(case: Case) -> list[int]:
    gm, _, _ = trace_step(case.build(), case.trains)
    return [n.meta[MEASURED_WORKSPACE] for n in gm.graph.nodes if MEASURED_WORKSPACE in n.meta]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_each_call_is_measured_on_its_own_values(name: str) -> None:
    """The two value sets have one layout and different kernel temporaries: each trace measures its own."""
    first, second = _measured(_case(name, 0)), _measured(_case(name, 1))
    assert first and second, "no node was measured on its values"
    assert first != second, (first, second)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", VALUE_SETS)
def test_eager_is_exact_on_kernels_whose_temporaries_follow_the_values(name: str, which: int) -> None:
    result = run_case(_case(name, which), EagerBackend())
    assert result.status == Status.PASS, (result.status, result.reason)
    memory = result.memory
    assert memory is not None and memory.measured_peak_bytes == memory.model_peak_bytes


def test_without_the_measurement_eager_is_not_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: with the meter refusing, the node keeps the table's (layout-only) entry and
    the value set with many distinct elements is held to a model that misses its temporaries."""

    def refuse(*args: object, **kwargs: object) -> int:
        raise KernelNotModelled("refused for this test")

    monkeypatch.setattr("conformance.api.step.measure_on_values", refuse)
    result = run_case(_case("unique", 1), EagerBackend())
    assert result.status == Status.FAIL_PEAK, (result.status, result.reason)


def test_only_mask_indexing_depends_on_values() -> None:
    x = torch.zeros(4)
    assert depends_on_values(torch.ops.aten.index_put.default, [x, [torch.tensor([True, False, True, False])], x])
    assert not depends_on_values(torch.ops.aten.index_put.default, [x, [torch.tensor([0, 2])], x])
    assert depends_on_values(torch.ops.aten._unique2.default, [x])
    assert not depends_on_values(torch.ops.aten.add.Tensor, [x, x])
