"""ATen's native CPU convolutions and im2col/col2im: every call of the catalogue whose entry is in
``conformance/models/transients/convolution.py``, held to what the kernel allocates."""

from __future__ import annotations

import pytest
import torch

from tests.transients.calls import OpCall, assert_measured, calls_of, measured_extra

aten = torch.ops.aten

CALLS = calls_of("convolution")


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
def test_transient_entry_is_what_the_kernel_allocates(call: OpCall) -> None:
    assert_measured(call)


def test_an_entry_that_is_wrong_fails() -> None:
    """The comparison can fail: a convolution without its columns buffer is caught."""
    call = next(c for c in CALLS if c.name == "conv-3x3-bias1")
    measured, modelled = measured_extra(call)
    assert modelled > 0 and measured != 0


def test_a_grouped_3d_convolution_counts_every_groups_columns() -> None:
    """``Slow3d`` runs groups itself, over one columns buffer of all input channels: a model of one group's
    columns (the 2-D kernels' per-group buffer) is short by the other groups', which the measurement shows."""
    (call,) = [c for c in CALLS if c.name == "conv-conv3d-grouped-bias1"]
    measured, modelled = measured_extra(call)
    one_group = 2 * 2 * 27 * 6 ** 3 * 4  # batch x C_in/groups x kernel x output positions x float32
    assert measured == modelled == 2 * one_group
