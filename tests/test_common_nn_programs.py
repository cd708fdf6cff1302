"""Eager is exact on the programs of common_nn (``tests/common_nn_cases.py``) that the harness used to miss.

Each is the collection's own module and input, built here (importing the ``--cases`` file would register its
562 cases in this process): a convolution of a batch of 0 (ATen's ``Empty`` backend), a dilated 3-D
convolution's backward on a batch of two (``SlowDilated3d``), a grouped 3-D convolution (``Slow3d``'s columns
over every group), an unbatched ``SoftMarginLoss`` with an integer label, and upsampling an ``N x C x 1 x 1``
input.  Before the table knew them, the first two were ``fail-run`` and the others ``fail-peak``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from conformance.api.case import Case, Workload
from conformance.backends.eager import EagerBackend
from conformance.run.engine import run_case


class _Loss(nn.Module):
    def __init__(self, module: nn.Module, scaled: torch.Size | None = None) -> None:
        super().__init__()
        self.module = module
        self.scale = nn.Parameter(torch.ones(scaled)) if scaled is not None else None

    def forward(self, x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        out = self.module(x * self.scale if self.scale is not None else x, *rest)
        return out.square().mean() + out.mean()


PROGRAMS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor, ...]], str]] = {
    "Conv2d_zero_batch": (lambda: nn.Conv2d(3, 4, (3, 2)), lambda: (torch.randn(0, 3, 7, 5),), "sgd-momentum"),
    "Conv1d_zero_batch": (lambda: nn.Conv1d(4, 5, 3), lambda: (torch.randn(0, 4, 10),), "sgd-momentum"),
    "Conv3d_dilated": (lambda: nn.Conv3d(3, 4, kernel_size=2, dilation=2), lambda: (torch.randn(2, 3, 5, 5, 5),),
                       "sgd-momentum"),
    "Conv3d_groups": (lambda: nn.Conv3d(2, 4, kernel_size=3, groups=2), lambda: (torch.randn(1, 2, 4, 5, 4),),
                      "sgd-momentum"),
    "SoftMarginLoss_no_batch_dim": (
        lambda: _Loss(nn.SoftMarginLoss(), torch.Size([9])),
        lambda: (torch.randn(9), torch.tensor([-1, 1, 1, -1, 1, 1, -1, 1, 1])), "none"),
    "interpolate_nearest_2d_launch_configs": (
        lambda: _Loss(nn.Upsample(size=(2, 2), mode="nearest"), torch.Size([1, 128, 1, 1])),
        lambda: (torch.randn(1, 128, 1, 1),), "none"),
}


def _case(name: str, trains: bool) -> Case:
    make, inputs, optimizer = PROGRAMS[name]

    def build(seed: int) -> Workload:
        module = make()
        if trains and not isinstance(module, _Loss):
            module = _Loss(module)
        return Workload(module, inputs())

    if trains:
        return Case(f"common-nn-{name}-train", "train_step", "tests", 0, build, trains=True, optimizer=optimizer,
                    requires=frozenset({"training"}), in_default=False)
    return Case(f"common-nn-{name}-infer", "inference", "tests", 0, build, in_default=False)


@pytest.mark.parametrize("trains", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_eager_is_exact_on_a_common_nn_program(name: str, trains: bool) -> None:
    result = run_case(_case(name, trains), EagerBackend())
    assert result.status == "pass", result.reason
