"""What CUDA graph trees promise about their shared pool (docs/design.md: "Graphs sharing one pool").

Each case is a *scenario*: units (submodules a CUDA graph backend compiles as
separate graphs, i.e. separate nodes of one graph tree) called path by path,
one CUDA-graph step per path (``torch.compiler.cudagraph_mark_step_begin``).
A step's results are copied out of the pool (``clone``) before the next step,
as a caller must.  Tensors are 16 MiB, so a pool that fails to share or reuse
shows a whole tensor more than the documented slack (``conformance.api.pools``).

- ``cudagraph-pool-share``: A->B, then A->B' (another branch of the tree):
  the tree's pool costs ``max(mem(A,B), mem(A,B'))``, not the sum.
- ``cudagraph-pool-reuse``: A returns ``p, q``; the caller drops ``p`` before B:
  B reuses its memory (pool smaller by ``p``'s bytes than when ``p`` is kept).
  B returns two tensors, so that B's recording, not A's, sets the pool's size: A's
  recording also holds the tree's pool copy of its input ``x`` (a non-static input),
  three tensors in all, and with a one-output B both paths' pools were A's three
  (measured on an H200, torch 2.11: 48 MiB each way).
- ``cudagraph-pool-survive``: B recorded with ``p`` dropped, then ``p`` kept while B
  runs: ``p``'s values must survive B (parity on ``p``, copied after B), which
  needs B recorded again for that liveness.
- ``cudagraph-train-mlp``: a training step: forward and backward graphs in one
  tree, replays recording nothing new.

All need a backend with ``cuda_graphs``; others skip them with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from conformance.api.case import Case, Workload, register
from conformance.api.pools import PoolContract, PoolScenario

ROWS, COLS = 1024, 4096  # float32: 16 MiB per tensor
TENSOR_BYTES = ROWS * COLS * 4


def mark_step() -> None:
    """Start a CUDA-graph step; a no-op for everything but CUDA graph trees (pure Python counter)."""
    torch.compiler.cudagraph_mark_step_begin()


class Affine(nn.Module):
    """Elementwise, so a unit's memory is its inputs and outputs: nothing for a compiler to fuse away."""

    def __init__(self, outputs: int, fn: str) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(COLS) * 0.1 + 1.0)
        self.outputs = outputs
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        h = x * self.scale
        first = torch.tanh(h) if self.fn == "tanh" else torch.sigmoid(h)
        if self.outputs == 1:
            return first
        return first, h + 1.0


class PoolScenarioModule(nn.Module):
    """Units run as separate graphs, one CUDA-graph step per path: a :class:`conformance.api.pools.PoolScenario`.

    A backend compiling units separately puts its compiled callables in
    ``unit_calls``; ``active_paths`` lets it measure a subset of the paths in a
    fresh tree (e.g. A->B alone).  A subclass names its units (``compile_units``), its
    paths (``paths``, each a ``path_<name>`` method) and its ``pool_contract``.
    """

    compile_units: ClassVar[tuple[str, ...]] = ()
    paths: ClassVar[tuple[str, ...]] = ()
    pool_contract: ClassVar[PoolContract | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.unit_calls: dict[str, Callable[..., Any]] = {}
        self.active_paths: tuple[str, ...] = self.paths

    def unit(self, name: str, *args: torch.Tensor) -> Any:
        return self.unit_calls.get(name, getattr(self, name))(*args)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        for path in self.active_paths:
            mark_step()
            outs.extend(getattr(self, f"path_{path}")(x))
        return tuple(outs)


class Share(PoolScenarioModule):
    compile_units = ("a", "b", "b_prime")
    paths = ("ab", "ab_prime")
    pool_contract: ClassVar[PoolContract] = PoolContract("share", "A->B and A->B' share one pool: max, not sum")

    def __init__(self) -> None:
        super().__init__()
        self.a = Affine(1, "tanh")
        self.b = Affine(2, "tanh")
        self.b_prime = Affine(2, "sigmoid")

    def path_ab(self, x: torch.Tensor) -> list[torch.Tensor]:
        y, z = self.unit("b", self.unit("a", x))
        return [y.clone(), z.clone()]

    def path_ab_prime(self, x: torch.Tensor) -> list[torch.Tensor]:
        y, z = self.unit("b_prime", self.unit("a", x))
        return [y.clone(), z.clone()]


class KeepOrDrop(PoolScenarioModule):
    """A returns ``p, q``; B reads only ``q`` and returns ``r, s``.  ``drop`` lets ``p`` die before B,
    ``keep`` holds it.

    The pool is the larger of A's recording (the input's pool copy, ``p``, ``q``: three tensors)
    and B's (``q``, ``r``, ``s``, and ``p`` when kept: three or four), so keeping ``p`` costs one
    tensor more only where B can take ``p``'s memory when it is dropped."""

    compile_units = ("a", "b")

    def __init__(self) -> None:
        super().__init__()
        self.a = Affine(2, "tanh")
        self.b = Affine(2, "sigmoid")

    def path_drop(self, x: torch.Tensor) -> list[torch.Tensor]:
        p, q = self.unit("a", x)
        del p  # dead before B runs: B may take its memory
        r, s = self.unit("b", q)
        return [r.clone(), s.clone()]

    def path_keep(self, x: torch.Tensor) -> list[torch.Tensor]:
        p, q = self.unit("a", x)
        r, s = self.unit("b", q)  # p is alive here: B must not write over it
        return [p.clone(), r.clone(), s.clone()]


class Reuse(KeepOrDrop):
    paths = ("drop",)
    pool_contract: ClassVar[PoolContract] = PoolContract(
        "reuse", "an output of A dropped before B is memory B reuses", freed_bytes=TENSOR_BYTES)  # p


class Survive(KeepOrDrop):
    # B must first be *recorded* with p dead (its memory may then overlap p's): the first
    # "drop" only warms A and B up, the second records them, and "keep" then needs B again
    # with p alive.  (Recorded with p alive first, B could safely replay with p dead.)
    paths = ("drop", "drop", "keep")
    pool_contract: ClassVar[PoolContract] = PoolContract(
        "survive", "an output of A kept while B runs survives B (B re-recorded)", rerecorded_unit="b")


class TrainMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(torch.relu(self.fc1(x)))
        return (y * y).mean()


if TYPE_CHECKING:  # the type checker holds the shipped scenarios to the interface the backend reads
    _SCENARIOS: tuple[type[PoolScenario], ...] = (Share, Reuse, Survive)


def _scenario(cls: type[Share | Reuse | Survive]) -> Callable[[int], Workload]:
    def build(seed: int) -> Workload:
        return Workload(cls(), (torch.randn(ROWS, COLS),))

    return build


def _train(seed: int) -> Workload:
    return Workload(TrainMLP(), (torch.randn(128, 256),))


_NEEDS = frozenset({"cuda_graphs"})
for _id, _cls in (("share", Share), ("reuse", Reuse), ("survive", Survive)):
    register(Case(f"cudagraph-pool-{_id}", "inference", "cuda-pools", 0, _scenario(_cls), requires=_NEEDS,
                  description=_cls.pool_contract.description))
register(Case("cudagraph-train-mlp", "train_step", "cuda-pools", 0, _train, trains=True,
              requires=_NEEDS | {"training"},
              description="training step: forward and backward graphs in one tree and one pool"))
