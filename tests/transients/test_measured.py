"""Kernels measured on stand-ins (LAPACK's queried workspace, sub-op kernels): every call of the catalogue whose entry
is in ``conformance/models/transients/measured.py``, held to what the kernel allocates."""

from __future__ import annotations

import pytest
import torch

from conformance.models.transients import LAPACK_QUERIED, SUB_OP_KERNELS, kernel_transient_bytes
from conformance.probes import workspace
from conformance.probes.cpu import CpuAllocatorProbe
from tests.transients.calls import OpCall, assert_measured, calls_of, node_of

aten = torch.ops.aten

CALLS = calls_of("measured")


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
def test_transient_entry_is_what_the_kernel_allocates(call: OpCall) -> None:
    assert_measured(call)


@pytest.mark.parametrize("name", ["_linalg_svd-5x2-torch.float32-fullTrue-uvTrue",
                                  "multinomial-(10,)-3-False-torch.float32"])  # a random kernel: its own generator
def test_the_workspace_meter_leaves_the_callers_window_and_generators_alone(name: str) -> None:
    """The meter runs the kernel in a thread of its own: a probe window open on the modelling thread
    records none of it, and the caller's random draws are the ones it would have made anyway."""
    call = next(c for c in CALLS if c.name == name)
    node = node_of(call)
    assert node.target.overloadpacket.__name__ in LAPACK_QUERIED | SUB_OP_KERNELS
    torch.manual_seed(7)
    expected_draw = torch.rand(3)
    torch.manual_seed(7)
    workspace._measured.cache_clear()  # measured now, inside the window, not earlier in this module
    with CpuAllocatorProbe() as probe:
        bytes_ = kernel_transient_bytes(node)
        mine = torch.empty(1000, dtype=torch.uint8)  # the window still records its own thread
    assert workspace._measured.cache_info().misses == 1
    assert torch.equal(torch.rand(3), expected_draw)
    assert bytes_ > 0 and probe.trace.peak_bytes == 1000 and [a.nbytes for a in probe.trace.allocations] == [1000]
    del mine
