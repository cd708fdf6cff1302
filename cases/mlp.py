"""MLPs at three sizes, for inference and as a training step."""

from __future__ import annotations

import torch
from torch import nn

from conformance.api.case import Case, Workload, register

SIZES = {"s": (8, 16, 32), "m": (32, 64, 128), "l": (64, 256, 512)}  # batch, in, hidden


class MLP(nn.Module):
    def __init__(self, d_in: int, hidden: int, d_out: int, loss: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)
        self.loss = loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        y = self.fc3(h)
        return (y * y).mean() if self.loss else y


def _builder(size: str, trains: bool):
    batch, d_in, hidden = SIZES[size]

    def build(seed: int) -> Workload:
        model = MLP(d_in, hidden, 8, loss=trains)
        return Workload(model, (torch.randn(batch, d_in),))

    return build


for _size in SIZES:
    register(Case(f"mlp-{_size}-infer", "inference", "mlp", 0, _builder(_size, False),
                  description=f"3-layer MLP {SIZES[_size]}, forward only"))
    register(Case(f"mlp-{_size}-train", "train_step", "mlp", 0, _builder(_size, True),
                  requires=frozenset({"training"}),
                  description=f"3-layer MLP {SIZES[_size]}: forward, MSE-style loss, backward, SGD-momentum step"))


class NormMLP(nn.Module):
    """An MLP with batch norm: a training step updates its running statistics and batch counter."""

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(torch.relu(self.bn(self.fc1(x))))
        return (y * y).mean()


def _norm_builder(seed: int) -> Workload:
    batch, d_in, hidden = SIZES["s"]
    return Workload(NormMLP(d_in, hidden, 8), (torch.randn(batch, d_in),))


for _optimizer in ("adam", "adamw"):  # the default training cases step with SGD and momentum
    register(Case(f"{_optimizer}-mlp-s-train", "train_step", "mlp", 0, _builder("s", True),
                  requires=frozenset({"training"}), optimizer=_optimizer,
                  description=f"3-layer MLP {SIZES['s']}: forward, loss, backward, {_optimizer} step"))


register(Case("adam-compiled-mlp-s-train", "train_step", "mlp", 0, _builder("s", True),
              requires=frozenset({"training"}), optimizer="adam", compile_optimizer=True,
              description=f"3-layer MLP {SIZES['s']}: forward, loss, backward, an Adam step compiled with the backend"))


# Selected by id (not in the default set): the example vendor's received-graph model holds 8 bytes more
# than it measures on this case (num_batches_tracked's update), not yet understood.
register(Case("bn-mlp-s-train", "train_step", "mlp", 0, _norm_builder, requires=frozenset({"training"}),
              in_default=False,
              description=f"2-layer MLP {SIZES['s']} with BatchNorm1d: the step updates its running statistics"))
