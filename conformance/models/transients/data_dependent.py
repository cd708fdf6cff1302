"""Kernels whose result sizes follow the values: what they allocate before they know the size."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import _argument, _nbytes

#: ``at::internal::GRAIN_SIZE``: below it ATen's CPU kernels run serially
GRAIN_SIZE = 32768


def masked_select(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``masked_select`` on the CPU counts the selected elements first (``mask.sum()``: an int64 copy of
    the broadcast mask and the count, freed before the result is allocated); where the broadcast
    operands are not both contiguous, or the kernel runs in parallel, it then fills the result through
    an int64 copy of the mask and its prefix sum, with the result alive."""
    x, mask = operands[0], operands[1]
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    n = math.prod(shape)
    dense = all(t.shape == shape and t.is_contiguous() for t in (x, mask))
    serial = dense and (n < GRAIN_SIZE or torch.get_num_threads() == 1)
    return max(8 * n + 8 - _nbytes(out), 0 if serial else 16 * n)


def unique_consecutive_storage(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any, t: Any) -> int:
    """``unique_consecutive`` allocates its values and counts as large as the input, then resizes them to
    the number of runs in place: the storages keep the input's element count."""
    x = operands[0]
    if not isinstance(out, (list, tuple)):
        return 0
    values, counts = out[0], out[2] if len(out) > 2 else None
    if t is values:
        return max(x.numel() * t.element_size() - _nbytes(t), 0)
    if counts is not None and t is counts and counts.numel() > 0:
        return max(x.numel() * counts.element_size() - _nbytes(counts), 0)
    return 0


def ctc_loss_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_ctc_loss_backward`` on the CPU computes the backward variables ``log_beta`` in a buffer shaped
    as the forward's ``log_alpha`` (LossCTC.cpp), alive with the gradient it returns."""
    return _nbytes(_argument(target, operands, "log_alpha"))

