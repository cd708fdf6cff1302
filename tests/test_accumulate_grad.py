"""The autograd engine's AccumulateGrad in the models, held to the real engine.

A compiled backward that returns a gradient in another layout than its parameter's (inductor's
layout optimisation gives a channels-last convolution weight gradient) costs a copy the engine
makes; the models must say so, and the program check must follow a multi-result fallback whose
results come in another order than the program names them.
"""

from __future__ import annotations

import pytest
import torch

from conformance.checks.timeline import compare
from conformance.models.lifetime import LifetimeModel, Storage
from conformance.models.lifetime.accumulate import obeys_layout_contract
from conformance.probes.cpu import Allocation, MemoryTrace

SHAPE = (8, 4, 3, 3)
CONTIGUOUS = (36, 9, 3, 1)
CHANNELS_LAST = (36, 1, 12, 4)


#: the address of the gradient the last backward returned (an address only: a reference would stop the
#: engine from stealing the tensor, whose test counts references)
_RETURNED: list[int] = []


class _ReturnsGrad(torch.autograd.Function):
    """Identity whose backward hands the engine a gradient of the given strides."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:  # type: ignore[override]
        ctx.stride = stride  # type: ignore[attr-defined]
        return x.view_as(x)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        out = torch.empty_strided(grad.shape, ctx.stride)  # type: ignore[attr-defined]
        out.copy_(grad)
        _RETURNED.append(out.data_ptr())
        return out, None


def _engine_copies(leaf_stride: tuple[int, ...], grad_stride: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether the real engine stored a copy (not the tensor the backward returned) as ``.grad``."""
    leaf = torch.empty_strided(shape, leaf_stride).normal_().requires_grad_()
    _RETURNED.clear()
    _ReturnsGrad.apply(leaf, grad_stride).sum().backward()
    assert leaf.grad is not None and len(_RETURNED) == 1
    return leaf.grad.data_ptr() != _RETURNED[0]


@pytest.mark.parametrize(("shape", "leaf_stride", "grad_stride"), [
    (SHAPE, CONTIGUOUS, CONTIGUOUS),
    (SHAPE, CONTIGUOUS, CHANNELS_LAST),
    (SHAPE, CHANNELS_LAST, CHANNELS_LAST),
    (SHAPE, CHANNELS_LAST, CONTIGUOUS),
    ((8, 1, 3, 3), (9, 9, 3, 1), (9, 1, 3, 1)),  # a size-1 dimension's stride does not count
    ((6,), (1,), (1,)),
])
def test_layout_contract_is_the_engines(shape: tuple[int, ...], leaf_stride: tuple[int, ...],
                                        grad_stride: tuple[int, ...]) -> None:
    contract = obeys_layout_contract((shape, grad_stride), (shape, leaf_stride))
    assert contract is not _engine_copies(leaf_stride, grad_stride, shape)


def _storage(sid: int, nbytes: int, birth: int, death: int | None) -> Storage:
    return Storage(sid, nbytes, f"buf{sid}", "op", (), "float32", birth=birth, death=death)


def _trace(*sizes_and_frees: tuple[int, int | None]) -> MemoryTrace:
    allocations = []
    for seq, (nbytes, order_free) in enumerate(sizes_and_frees):
        allocations.append(Allocation(seq, nbytes, seq, order_free, seq=seq, order_alloc=seq, order_free=order_free))
    return MemoryTrace("torch-cpu", allocations)


def test_one_ops_results_match_in_the_order_it_allocated_them() -> None:
    # convolution_backward's [weight grad, bias grad], both born at event 1; the kernel allocates the bias's first
    model = LifetimeModel(["a", "b", "c"], [8, 896, 896], [_storage(0, 8, 0, 2), _storage(1, 864, 1, None),
                                                          _storage(2, 24, 1, None)])
    diff = compare(model, _trace((8, 5), (24, None), (864, None)))
    assert diff.exact, diff.sentence()


def test_two_ops_results_in_the_wrong_order_still_depart() -> None:
    # born at two events: the order is the program's, and a measurement in the other order departs from it
    model = LifetimeModel(["a", "b", "c"], [8, 872, 896], [_storage(0, 8, 0, 2), _storage(1, 864, 1, None),
                                                          _storage(2, 24, 2, None)])
    diff = compare(model, _trace((8, 5), (24, None), (864, None)))
    assert not diff.exact


@pytest.mark.parametrize("case_id", ["mod-Conv2d-train", "mod-Conv2d-GroupNorm-block-train"])
def test_inductor_convolution_training_follows_its_program_with_the_engines_copy(case_id: str) -> None:
    """Inductor returns a channels-last weight gradient here (its layout optimisation); the engine copies it
    into the parameter's layout.  The program model says so and the measured timeline follows it exactly."""
    from conformance.api.case import select_cases
    from conformance.api.verdict import Status
    from conformance.backends.inductor import InductorBackend
    from conformance.run.engine import run_case

    (case,) = select_cases([case_id])
    result = run_case(case, InductorBackend())
    assert result.status == Status.PASS, f"{case_id}: {result.status}: {result.reason}"
    program = next(c for c in result.checks if c.name.value == "program")
    assert program.figures["timeline"] == "exact"
    assert result.memory is not None and result.memory.program_timeline is not None
    assert any("AccumulateGrad" in event for event, _ in result.memory.program_timeline)


def _copy_block_model() -> LifetimeModel:
    """Two gradients (100 B, 200 B) returned by a backward, then the engine's two layout copies."""
    from conformance.models.lifetime.accumulate import COPY_OP

    small, big = _storage(0, 100, 0, 2), _storage(1, 200, 1, 3)
    small_copy = Storage(2, 100, "bw:AccumulateGrad[0]", COPY_OP, (), "float32", birth=2, death=None, copy_of=0)
    big_copy = Storage(3, 200, "bw:AccumulateGrad[1]", COPY_OP, (), "float32", birth=3, death=None, copy_of=1)
    return LifetimeModel(["a", "b", "copy 0", "copy 1"], [100, 300, 400, 500], [small, big, small_copy, big_copy])


def test_the_engines_copies_match_in_the_order_the_engine_made_them() -> None:
    """The engine's ready queue, not the program, orders the AccumulateGrad nodes: copies made in the
    other order (each original freed right after its copy) follow the model."""
    model = _copy_block_model()
    same = compare(model, _trace((100, 4), (200, 6), (100, None), (200, None)))
    # order_free is a position among allocations and frees: the big copy first, its original freed at once
    swapped = MemoryTrace("torch-cpu", [Allocation(0, 100, 0, 6, seq=0, order_alloc=0, order_free=6),
                                        Allocation(1, 200, 1, 4, seq=1, order_alloc=1, order_free=4),
                                        Allocation(2, 200, 3, None, seq=2, order_alloc=3),
                                        Allocation(3, 100, 5, None, seq=3, order_alloc=5)])
    assert compare(model, swapped).exact, compare(model, swapped).sentence()
    assert not same.unmodelled and not same.missing


def test_a_copy_the_engine_did_not_make_departs() -> None:
    model = _copy_block_model()
    diff = compare(model, _trace((100, 4), (200, None), (100, None)))
    assert not diff.exact and [s.nbytes for s in diff.missing] == [200]


def _permuted_grad_graphs() -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The forward and backward AOTAutograd partitions of a step whose backward returns a gradient computed from a
    permuted view (as op-tensordot-1-train's does): its fake value keeps the permuted strides, which break the
    parameter's layout contract."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_function

    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, _: object) -> object:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def step(a: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        out = (s * a).permute(2, 0, 1)  # its gradient comes back permuted: s's is mul(permuted grad, a)
        return out.square().mean() + out.mean()

    aot_function(step, fw_compiler=keep, bw_compiler=keep)(torch.randn(3, 2, 4),
                                                           torch.ones(3, 2, 4, requires_grad=True)).backward()
    return graphs[0], graphs[1]


def test_a_backend_returning_dense_results_gives_the_engine_nothing_to_copy() -> None:
    """IREE returns every result as a dense buffer of its own, whatever strides the graph's fake value has: the
    engine steals each gradient, so the model of that convention (``results_at_start``) keeps the result's own
    64-byte slot as the parameter's .grad, with no layout copy; the ideal executor's model, which returns the
    graph's permuted strides, still has the engine copy it."""
    from conformance.models.lifetime import model_forward_backward
    from conformance.models.lifetime.accumulate import COPY_OP

    fw, bw = _permuted_grad_graphs()
    iree = model_forward_backward(fw, bw, staged=True, results_at_start=64)
    assert not [s for s in iree.storages if s.op == COPY_OP]
    assert iree.residual_bytes == 96  # the gradient (96 B) the engine steals: the backward's only result
    ideal = model_forward_backward(fw, bw)
    assert [s for s in ideal.storages if s.op == COPY_OP]
