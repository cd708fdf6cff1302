"""Cases whose input shapes change on every call: a serving batch that grows, a sequence length.

Each call ``k`` of the step draws its inputs at ``shapes.size(k)`` (batch 4, 7, 10, 13, 16;
sequence length 5, 8, 11, 14, 17), so every probed call is modelled at its own shapes and a
compiler recompiles (then goes dynamic) as it would for a user.  The ``-dynamic`` and
``-marked`` variants compile as users who ask for it do: ``dynamic=True``, and
``torch._dynamo.mark_dynamic`` on the changing dimension.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch._higher_order_ops.while_loop import while_loop

from conformance.api.case import Case, CaseKind, CompileMode, ShapeSchedule, Workload, register

BATCHES = (4, 7, 10, 13, 16)
SEQ_LENS = (5, 8, 11, 14, 17)
D = 16

InputsAt = Callable[[int], tuple[torch.Tensor, ...]]


class BatchMLP(nn.Module):
    def __init__(self, loss: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(D, 32)
        self.fc2 = nn.Linear(32, 8)
        self.loss = loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(torch.relu(self.fc1(x)))
        return (y * y).mean() if self.loss else y


class SeqAttention(nn.Module):
    """One head of self-attention over a sequence whose length changes: scores are (L, L)."""

    def __init__(self, loss: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.loss = loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = torch.softmax(q @ k.transpose(-1, -2) / D**0.5, dim=-1)
        y = self.out(scores @ v)
        return (y * y).mean() if self.loss else y


class BatchRecurrence(nn.Module):
    """h <- tanh(h @ W + b), a data-dependent number of trips, over a batch that changes."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(D, D) / D**0.5)
        self.b = nn.Parameter(torch.zeros(D))

    def forward(self, h: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        def cond(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < steps

        def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(h @ self.w + self.b)

        _, out = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h))
        return out


def _register(case_id: str, kind: CaseKind, model: Callable[[bool], nn.Module], inputs: InputsAt,
              schedule: ShapeSchedule, description: str) -> None:
    trains = kind == "train_step"

    def build(seed: int) -> Workload:
        return Workload(model(trains), inputs(schedule.size(0)))

    register(Case(case_id, kind, "changing-shapes", 0, build, trains=trains,
                  requires=frozenset({"training"} if trains else set()) | ({"while_loop"} if kind == "loop" else set()),
                  description=description, make_inputs=lambda call: inputs(schedule.size(call)), shapes=schedule))


def _batch(n: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(n, D),)


def _seq(n: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, n, D),)


def _loop(n: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(n, D), torch.tensor(3))


_MODES: dict[CompileMode, str] = {"default": "", "dynamic": "-dynamic", "mark_dynamic": "-marked"}

for _mode, _suffix in _MODES.items():
    _register(f"shape-batch-infer{_suffix}", "inference", BatchMLP, _batch,
              ShapeSchedule("batch", BATCHES, ((0, 0),), _mode),
              f"MLP, batch {'/'.join(map(str, BATCHES))} call by call, forward only (compile: {_mode})")
    _register(f"shape-batch-train{_suffix}", "train_step", BatchMLP, _batch,
              ShapeSchedule("batch", BATCHES, ((0, 0),), _mode),
              f"MLP training step, batch {'/'.join(map(str, BATCHES))} call by call (compile: {_mode})")
_register("shape-seq-infer", "inference", SeqAttention, _seq, ShapeSchedule("seq", SEQ_LENS, ((0, 1),)),
          f"self-attention, sequence length {'/'.join(map(str, SEQ_LENS))} call by call, forward only")
_register("shape-seq-train", "train_step", SeqAttention, _seq, ShapeSchedule("seq", SEQ_LENS, ((0, 1),)),
          f"self-attention training step, sequence length {'/'.join(map(str, SEQ_LENS))} call by call")
_register("shape-loop-batch", "loop", lambda _: BatchRecurrence(), _loop,
          ShapeSchedule("batch", BATCHES, ((0, 0),)),
          f"while_loop recurrence (3 trips), batch {'/'.join(map(str, BATCHES))} call by call")
