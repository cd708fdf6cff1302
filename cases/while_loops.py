"""``torch.while_loop`` cases: a data-dependent trip count, with and without autograd."""

from __future__ import annotations

import torch
from torch import nn
from torch._higher_order_ops.while_loop import while_loop

from conformance.api.case import Case, Tolerance, Workload, register


class Recurrence(nn.Module):
    """h <- tanh(h @ W + b) for as many trips as the ``steps`` input says."""

    def __init__(self, n: int, loss: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n) / n**0.5)
        self.b = nn.Parameter(torch.zeros(n))
        self.loss = loss

    def forward(self, h: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        def cond(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < steps

        def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(h @ self.w + self.b)

        _, out = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h))
        return out.square().mean() if self.loss else out


def _build(n: int, trips: int, trains: bool):
    def build(seed: int) -> Workload:
        return Workload(Recurrence(n, trains), (torch.randn(4, n), torch.tensor(trips)))

    return build


for _trips in (3, 6):
    register(Case(f"loop-rnn-t{_trips}", "loop", "loop", 0, _build(32, _trips, False),
                  requires=frozenset({"while_loop"}),
                  description=f"while_loop recurrence, {_trips} trips, no autograd"))
    register(Case(f"loop-rnn-t{_trips}-train", "loop", "loop", 0, _build(32, _trips, True),
                  trains=True, requires=frozenset({"while_loop", "training"}),
                  tolerance=Tolerance(rtol=1e-4, atol=1e-5),
                  description=f"while_loop recurrence, {_trips} trips, under autograd"))
