"""Upsampling kernels: every call of the catalogue whose entry is in ``conformance/models/transients/upsampling.py``,
held to what the kernel allocates."""

from __future__ import annotations

import pytest
import torch

from tests.transients.calls import OpCall, assert_measured, calls_of, measured_extra

aten = torch.ops.aten

CALLS = calls_of("upsampling")


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
def test_transient_entry_is_what_the_kernel_allocates(call: OpCall) -> None:
    assert_measured(call)


@pytest.mark.parametrize("op", ["upsample_nearest2d", "upsample_bilinear2d"])
@pytest.mark.parametrize("shape", [(1, 128, 1, 1), (2, 3, 1, 1), (2, 3, 1, 5)])
def test_upsampling_copies_only_what_is_not_already_channels_last(op: str, shape: tuple[int, ...]) -> None:
    """An ``N x C x 1 x 1`` input is channels-last already (common_nn's ``interpolate_nearest_2d_launch_configs``):
    the kernel copies only its result back to NCHW, where a model copying the input too held 512 B it never did."""
    fn = {"upsample_nearest2d": lambda x: aten.upsample_nearest2d.default(x, [2, 2]),
          "upsample_bilinear2d": lambda x: aten.upsample_bilinear2d.default(x, [2, 2], False)}[op]
    measured, modelled = measured_extra(OpCall(op, op, fn, lambda: (torch.randn(shape),)))
    assert measured == modelled
