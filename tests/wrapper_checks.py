"""A check written in Python and imported by a wrapper, as torch 2.15's wrappers import
``assert_tensor_metadata`` from ``torch._inductor.runtime.runtime_utils`` (tests/test_program.py)."""

from __future__ import annotations

from typing import Any

import torch


def assert_tensor_metadata(t: torch.Tensor, size: Any = None, stride: Any = None, dtype: Any = None) -> None:
    assert size is None or tuple(t.shape) == tuple(size)
    assert stride is None or tuple(t.stride()) == tuple(stride)
    assert dtype is None or t.dtype == dtype
