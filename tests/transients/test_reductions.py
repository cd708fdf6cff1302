"""Sorting, selection, scans and reductions: every call of the catalogue whose entry is in
``conformance/models/transients/reductions.py``, held to what the kernel allocates."""

from __future__ import annotations

import pytest
import torch

from tests.transients.calls import OpCall, _bound, _made, assert_measured, calls_of, measured_extra

aten = torch.ops.aten

CALLS = calls_of("reductions")


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
def test_transient_entry_is_what_the_kernel_allocates(call: OpCall) -> None:
    assert_measured(call)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc_with_its_range_from_the_data_on_one_thread(dtype: torch.dtype) -> None:
    """One thread, one bin: the two 0-dim ``aminmax`` results beside the edges outweigh the histograms."""
    call = OpCall("histc-1-0-0-one-thread", "histc", _bound(aten.histc.default, 1, 0.0, 0.0), _made((), dtype=dtype))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        measured, modelled = measured_extra(call)
    finally:
        torch.set_num_threads(threads)
    assert measured == modelled == 4 * dtype.itemsize
