"""A kernel with no CPU kernel of its own runs its composite body: that body's temporaries are its
workspace, modelled by running the body on stand-ins (conformance.models.composite).  What the model
says is held to the real kernel in tests/transients/ (``_trilinear``'s forms, torch 2.8's
``_native_batch_norm_legit_no_training``); here, what the model must not do."""

from __future__ import annotations

import pytest
import torch

from conformance.models.composite import CompositeNotModelled, composite_key, composite_workspace
from conformance.models.transients import op_workspace

LIB = torch.library.Library("conformance_composite_test", "DEF")
LIB.define("counted(Tensor x) -> Tensor")
CALLS: list[torch.Tensor] = []


def _counted(x: torch.Tensor) -> torch.Tensor:
    """A user's op whose body keeps what it is given: running it to model it would change the user's state."""
    CALLS.append(x)
    return x.exp() + 1


LIB.impl("counted", _counted, "CompositeExplicitAutograd")


def test_a_users_custom_op_body_is_never_run_to_model_it() -> None:
    x = torch.randn(4)
    out = torch.ops.conformance_composite_test.counted.default(x)
    CALLS.clear()
    assert composite_key(torch.ops.conformance_composite_test.counted.default) is None
    assert op_workspace(torch.ops.conformance_composite_test.counted.default, [x], out) == 0
    assert CALLS == []


def test_an_op_with_a_cpu_kernel_or_a_view_runs_no_body() -> None:
    assert composite_key(torch.ops.aten.add.Tensor) is None
    assert composite_key(torch.ops.aten.view.default) is None
    assert composite_key(torch.ops.aten.squeeze_.dim) is None
    assert composite_key(torch.ops.aten._trilinear.default) is not None


def test_a_body_that_cannot_run_on_stand_ins_is_taken_to_allocate_nothing_more() -> None:
    """Operands the body rejects (here dimensions that do not fit): the op is modelled as one without an
    entry, and what it allocates beyond its outputs then shows in an exact backend's check."""
    a, b, c = torch.randn(4, 8), torch.randn(5, 8, 6), torch.randn(4, 7)
    dims = ([1, 3], [0], [1, 2], [2, 3])
    with pytest.raises(CompositeNotModelled, match="_trilinear"):
        composite_workspace(torch.ops.aten._trilinear.default, [a, b, c, *dims], torch.empty(4, 5),
                            op_workspace)
    assert op_workspace(torch.ops.aten._trilinear.default, [a, b, c, *dims], torch.empty(4, 5)) == 0


def test_a_random_body_leaves_the_generator_as_it_found_it() -> None:
    """``randn_like`` is a composite body (``empty_like`` + ``normal_``): modelling it must not draw the
    step's random numbers."""
    x = torch.randn(5)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    op_workspace(torch.ops.aten.randn_like.default, [x], torch.empty(5))
    assert torch.equal(torch.rand(3), expected)
