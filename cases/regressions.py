"""Regression cases: one per real lifetime bug listed in docs/design.md ("The problem"), each small and named.

Every case here passes on a backend that frees tensors when the lifetime model
says they die, and fails (``fail-peak`` / ``fail-residual``) on one with the
bug.  The docstrings say what went wrong, where it is public, and what the
harness checks.
"""

from __future__ import annotations

import torch
from torch import nn
from torch._higher_order_ops.while_loop import while_loop

from conformance.api.case import Case, Workload, register
from conformance.cases import gen_ops  # noqa: F401  (registers conformance_gen::accum)


class SavedActivations(nn.Module):
    """Backward inputs released early (aot_autograd backends).

    What went wrong: an IREE backend built on ``aot_autograd`` received the saved
    activations as backward inputs and unpacked them (``*args``); the boxed list
    AOTAutograd passes stayed referenced, so every activation lived through the
    whole backward whatever the wrapper ``del``-ed.  Inductor takes ``args``
    boxed, ``args.clear()``-s it and frees each input after its last use.
    Public: iree-org/iree#20798 ("Does iree-runtime support free input arguments
    of a function?": backward inputs never deallocated), and the boxed calling
    convention that fixes it, pytorch/pytorch#83137 (list clearing in AOTAutograd).
    What the harness checks: a stack of ``tanh(x @ W)`` layers on a tall batch, so
    the forward saves large activations per layer (matmuls are not recomputed by
    the partitioner) and the step's peak is dominated by them; the backward must
    free each saved activation at its last use, so the measured peak stays at the
    model of the received forward/backward graphs.
    Keeping them all is ``fail-peak`` by about ``depth x activation`` bytes for an
    executor whose memory is close to its graphs' model (eager-like, IREE).
    Limit: inductor's measured peak is well below that model (fusion and buffer
    reuse: 0.93 MB vs 1.18 MB here), and inductor with the fault planted (its
    compiled backward called with the boxed list copied and held) measured
    1.13 MB, still under the bound, so on inductor this case cannot tell.
    """

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(width, width) / width**0.5) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w in self.weights:  # mm saves its input, tanh its output: both large, both until backward
            x = torch.tanh(x @ w)
        return x.square().mean()


class TupleFreedEarly(nn.Module):
    """A multi-output custom op's tuple freed right after its items are taken.

    What went wrong: for a custom op with mutated arguments returning two tensors,
    inductor emitted ``del buf1`` (the op's tuple) only after both ``buf3 =
    buf1[0]`` and ``buf4 = buf1[1]`` died, because
    ``FallbackKernel.get_inputs_that_alias_output`` reported aliasing for a
    mutating, auto-functionalized op; the tuple kept the early item's storage
    alive.  Public: pytorch/pytorch#163227 ("[Graph Partition] improve custom op
    output alias"), fixed for PyTorch 2.9; background pytorch/pytorch#166014.
    What the harness checks: ``accum`` mutates a buffer and returns ``(early,
    late)``; ``early`` is last used by a matmul (an extern kernel, so fusion cannot
    carry it to the end), then a large intermediate is built while only ``late``
    should survive.  Holding the tuple keeps ``early`` (``n x n`` floats) live at
    the peak, and keeps inductor from reusing ``late`` in place in the last
    kernel: the model of the generated program names the tuple (``fail-peak``).
    """

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w_early = nn.Parameter(torch.randn(n, 1) / n**0.5)
        self.w = nn.Parameter(torch.randn(n, 4 * n) / n**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.zeros_like(x)
        early, late = torch.ops.conformance_gen.accum(x, acc)
        e = early @ self.w_early  # the last use of `early`: an extern kernel
        big = torch.relu(x @ self.w + e)  # the peak, after e (it needs it): `early` must be gone by now
        return big.sum(1, keepdim=True) * late + acc


class CarriedState(nn.Module):
    """A while-loop's carried buffers freed every trip, not leaked.

    What went wrong: MLIR's buffer-deallocation pass never freed the loop-carried
    ``%arg1`` of an ``scf.while``: alias analysis lost the link between the value
    forwarded by ``scf.condition`` and the region arguments, so each trip's
    carried buffer stayed allocated and residual memory grew with the trip count.
    Public: the closest public report of the same analysis gap (buffers forwarded
    through ``scf.condition`` mis-tracked by ``--buffer-deallocation``) is
    llvm/llvm-project#86467, where it shows as a double free instead of a leak.
    What the harness checks: three carried tensors, each replaced by a fresh
    buffer every trip, with temporaries built and dropped in the body.  At every
    trip count residual equals the model's (nothing of the loop survives but its
    outputs), and :mod:`conformance.checks.loop_scaling`'s rule holds that measured
    peak and residual grow with the trip count exactly as the model's do (not at
    all).  A leak of one carried buffer per trip is ``fail-residual`` and a
    residual growth of ``trips x buffer`` bytes.
    """

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n) / n**0.5)

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, steps: torch.Tensor):  # type: ignore[no-untyped-def]
        def cond(i, a, b, c):  # type: ignore[no-untyped-def]
            return i < steps

        def body(i, a, b, c):  # type: ignore[no-untyped-def]
            t = a @ self.w  # a temporary, dropped within the trip
            return i + 1, torch.tanh(t + b), torch.tanh(a - c), torch.sigmoid(b + t)

        _, a, b, c = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), a, b, c))
        return a, b, c


class SharedPoolGraphs(nn.Module):
    """Graphs sharing one memory pool (CUDA graph trees).

    What went wrong: CUDA graph trees replay graphs A then B (or A then B') from
    one private pool; outputs of A still alive when B runs must not be
    overwritten, and the pool should hold ``max(mem(A, B), mem(A, B'))``, not the
    sum.  Public: pytorch/pytorch#89146 (cudagraph trees: one pool, checkpointed
    pool state per recording) and pytorch/pytorch#166975 (when sharing a pool
    across graphs is safe).
    What the harness checks: a graph break splits the step into A and B; A's
    output is alive while B runs and is returned.  Needs a backend with the
    ``cuda_graphs`` capability (CUDA only), so CPU backends skip it.
    """

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n) / n**0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.tanh(x @ self.w)
        torch._dynamo.graph_break()
        b = torch.relu(a @ self.w + x)
        return a, b


LOOP_N = 32


def carried_state_case(trips: int) -> Case:
    """The carried-state loop at ``trips`` trips (built at two trip counts by the loop-scaling tests)."""

    def build(seed: int) -> Workload:
        a, b, c = (torch.randn(8, LOOP_N) for _ in range(3))
        return Workload(CarriedState(LOOP_N), (a, b, c, torch.tensor(trips)))

    return Case(f"reg-loop-carried-t{trips}", "loop", "reg-loop-carried", 0, build,
                requires=frozenset({"while_loop"}),
                description=f"regression: 3 carried buffers replaced every trip, {trips} trips; residual stays flat")


register(Case("reg-backward-inputs-released", "train_step", "regression", 0,
              lambda seed: Workload(SavedActivations(64, 6), (torch.randn(512, 64),)),
              trains=True, requires=frozenset({"training"}),
              description="regression: 6 tanh(x @ W) layers, batch 512 x 64; peak dominated by saved activations"))
register(Case("reg-customop-tuple-free", "inference", "regression", 0,
              lambda seed: Workload(TupleFreedEarly(128), (torch.randn(128, 128),)),
              requires=frozenset({"custom_ops"}),
              description="regression: mutating two-output custom op; early item must die before the peak"))
for _trips in (2, 8):
    register(carried_state_case(_trips))
register(Case("reg-cudagraph-shared-pool", "inference", "regression", 0,
              lambda seed: Workload(SharedPoolGraphs(64), (torch.randn(16, 64),)),
              requires=frozenset({"cuda_graphs"}),
              description="regression (CUDA graph trees only): graphs A and B share one pool"))
