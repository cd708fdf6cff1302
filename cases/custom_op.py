"""A custom op that mutates an argument and returns two tensors: one dies early, one late.

This is the shape of a real inductor bug (pytorch/pytorch#163227): inductor once
freed the tuple result of such an op only after *both* items died, so the early
item's storage stayed alive across everything in between.  The early item's last
use here is an extern kernel (a matmul, which inductor never fuses), followed by
a larger buffer: an item (or its result tuple) kept past that use is alive at the
peak under inductor too, not only in the model.  A backend that keeps it longer
gets ``fail-peak``.
"""

from __future__ import annotations

import torch
from torch import nn

from conformance.api.case import Case, Workload, register


@torch.library.custom_op("conformance::split_stats", mutates_args=("acc",))
def split_stats(x: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Accumulates column sums into ``acc``; returns a scaled copy and a shifted magnitude."""
    acc.add_(x.sum(0))
    return x * 2.0, x.abs() + 1.0


@split_stats.register_fake
def _(x: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


class EarlyLate(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.early_proj = nn.Parameter(torch.randn(n, 1) / n**0.5)
        self.proj = nn.Linear(n, 2 * n, bias=False)

    def forward(self, x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        early, late = split_stats(x, acc)
        e = early @ self.early_proj  # the last use of `early`: an extern kernel, never fused away
        big = torch.relu(self.proj(x) + e)  # a larger buffer, made after e: `early` should be gone by then
        return big.sum(1, keepdim=True) * late  # `late` is used last


def _build(n: int):
    def build(seed: int) -> Workload:
        return Workload(EarlyLate(n), (torch.randn(n, n), torch.zeros(n)))

    return build


for _n, _tag in ((64, "s"), (256, "m")):
    register(Case(f"customop-early-late-{_tag}", "inference", "customop", 0, _build(_n),
                  requires=frozenset({"custom_ops"}),
                  description=f"mutating custom op with two outputs, {_n}x{_n}"))
