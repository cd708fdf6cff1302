"""A kernel with no CPU kernel of its own runs its composite body: that body's temporaries are its
workspace, modelled by running the body on stand-ins (conformance.models.composite) and held here
to what the real kernel allocates."""

from __future__ import annotations

import pytest
import torch

from conformance.models.composite import CompositeNotModelled, composite_key, composite_workspace
from conformance.models.transients import op_workspace, reference_kernels
from conformance.probes.cpu import CpuAllocatorProbe

LIB = torch.library.Library("conformance_composite_test", "DEF")
LIB.define("scratchy(Tensor x, int rounds) -> Tensor")
LIB.define("picky(Tensor x) -> Tensor")


def _scratchy(x: torch.Tensor, rounds: int) -> torch.Tensor:
    """Two temporaries per round, one kept across rounds: a body whose workspace is not its output's."""
    out = torch.zeros_like(x)
    kept = x.exp()
    for _ in range(rounds):
        tmp = x * 2.0
        out.add_(tmp.sin() + kept)
    return out


def _picky(x: torch.Tensor) -> torch.Tensor:
    if x.numel() and float(x.flatten()[0]) == 0.0:
        raise ValueError("zero first element")
    return x + 1


LIB.impl("scratchy", _scratchy, "CompositeExplicitAutograd")
LIB.impl("picky", _picky, "CompositeExplicitAutograd")
OPS = torch.ops.conformance_composite_test


def _measured_workspace(fn, *args) -> int:  # type: ignore[no-untyped-def]
    """Peak bytes inside the call beyond its outputs."""
    with reference_kernels():
        fn(*args)  # warm-up
        with CpuAllocatorProbe() as probe:
            out = fn(*args)
    outputs = out.untyped_storage().nbytes()
    del out
    return probe.trace.peak_bytes - outputs


@pytest.mark.parametrize("shape,rounds", [((4, 8), 1), ((16,), 3), ((3, 5, 7), 2)])
def test_a_composite_body_s_workspace_is_what_the_kernel_allocates(shape: tuple[int, ...], rounds: int) -> None:
    x = torch.randn(shape)
    out = OPS.scratchy.default(x, rounds)
    modelled = op_workspace(OPS.scratchy.default, [x, rounds], out)
    assert modelled > 0
    assert _measured_workspace(OPS.scratchy.default, x, rounds) == modelled


def test_an_op_with_a_cpu_kernel_or_a_view_runs_no_body() -> None:
    assert composite_key(torch.ops.aten.add.Tensor) is None
    assert composite_key(torch.ops.aten.view.default) is None
    assert composite_key(torch.ops.aten.squeeze_.dim) is None
    assert composite_key(torch.ops.aten._trilinear.default) is not None


def test_a_body_that_cannot_run_on_stand_ins_is_taken_to_allocate_nothing_more() -> None:
    """Its values are zeros: a body that checks them fails there, and the op is modelled as one without
    an entry (what it allocates beyond its outputs then shows in an exact backend's check)."""
    x = torch.ones(3)
    with pytest.raises(CompositeNotModelled, match="picky"):
        composite_workspace(OPS.picky.default, [x], OPS.picky.default(x), op_workspace)
    assert op_workspace(OPS.picky.default, [x], OPS.picky.default(x)) == 0


def test_a_random_body_leaves_the_generator_as_it_found_it() -> None:
    """``randn_like`` is a composite body (``empty_like`` + ``normal_``): modelling it must not draw the
    step's random numbers."""
    x = torch.randn(5)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    op_workspace(torch.ops.aten.randn_like.default, [x], torch.empty(5))
    assert torch.equal(torch.rand(3), expected)
