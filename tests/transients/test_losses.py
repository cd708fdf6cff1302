"""Pointwise losses and their backward: every call of the catalogue whose entry is in
``conformance/models/transients/losses.py``, held to what the kernel allocates."""

from __future__ import annotations

import pytest
import torch

from tests.transients.calls import OpCall, assert_measured, calls_of, measured_extra

aten = torch.ops.aten

CALLS = calls_of("losses")


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
def test_transient_entry_is_what_the_kernel_allocates(call: OpCall) -> None:
    assert_measured(call)


@pytest.mark.parametrize("op", ["mse_loss", "huber_loss"])
def test_a_loss_target_of_another_dtype_is_refused_where_its_copy_is_not_read(op: str) -> None:
    """A kernel whose cast of an integer target was not read from its source is refused, naming it, rather than
    modelled as if the target were the input's dtype (the measurement shows the cast's bytes)."""
    from conformance.models.transients import KernelNotModelled

    fn = {"mse_loss": lambda a, b: aten.mse_loss.default(a, b, 1),
          "huber_loss": lambda a, b: aten.huber_loss.default(a, b, 1, 1.0)}[op]
    call = OpCall(op, op, fn, lambda: (torch.randn(9), torch.ones(9, dtype=torch.int64)))
    with pytest.raises(KernelNotModelled, match=f"aten.{op}.default with a torch.int64 target"):
        measured_extra(call)
