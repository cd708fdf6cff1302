"""Ops with no entry of their own, modelled through their composite body (``conformance/models/composite.py``): every
call of the catalogue for them, held to what the kernel allocates."""

from __future__ import annotations

import pytest
import torch

from tests.transients.calls import OpCall, assert_measured, calls_of

aten = torch.ops.aten

CALLS = calls_of("composite")


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
def test_transient_entry_is_what_the_kernel_allocates(call: OpCall) -> None:
    assert_measured(call)
