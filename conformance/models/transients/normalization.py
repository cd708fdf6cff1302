"""Batch, layer, weight and group normalisation: per-channel accumulators, per-thread buffers
and the copies a layout the kernel cannot read takes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import REDUCED_FLOATS, _acc_itemsize, _argument, _dense_copies, _nbytes


def batch_norm(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``native_batch_norm`` (training or not): the CPU kernel applies ``x * alpha + beta`` with
    per-channel ``alpha`` and ``beta`` it computes first (two ``C``-element buffers of the
    accumulation type); in training the batch statistics are its outputs, and on the
    channels-last path (see :func:`_channels_last`) they are reduced through a
    ``threads x C`` buffer when there are more rows (``numel / C``) than threads."""
    return _batch_norm_transients(operands[0], bool(_argument(target, operands, "training")))


def batch_norm_with_update(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_batch_norm_with_update`` (what ``batch_norm`` in training with running statistics decomposes to,
    torch >= 2.4): the CPU kernel is ``native_batch_norm``'s in training (:func:`batch_norm`); its
    ``reserve`` output is empty."""
    return _batch_norm_transients(operands[0], True)


def batch_norm_no_update(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_batch_norm_no_update``: ``native_batch_norm``'s kernel outside training (:func:`batch_norm`)."""
    return _batch_norm_transients(operands[0], False)


def _batch_norm_transients(x: torch.Tensor, train: bool) -> int:
    channels, acc = x.shape[1], _acc_itemsize(x)
    threads = torch.get_num_threads()
    stats = threads * channels * acc if train and _channels_last(x) and x.numel() // channels > threads else 0
    return 2 * channels * acc + stats


def batch_norm_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``native_batch_norm_backward``: a temporary the size of the input while computing the
    input's gradient.  An input whose layout is channels-last (also every ``N x C x 1 x 1``
    one) takes the channels-last kernel instead, which also reduces into a ``2 x threads x C``
    buffer, preceded outside training by the ``C`` inverse standard deviations of the running
    variance; the larger of the two phases is the op's peak."""
    x, train, mask = operands[1], operands[7], operands[9]
    temporary = _nbytes(x) if mask[0] else 0
    if not _channels_last(x):
        return temporary
    channels, acc = x.shape[1], _acc_itemsize(x)
    reduce = 2 * torch.get_num_threads() * channels * acc + (0 if train else channels * acc)
    return max(temporary, reduce)


def layer_norm(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``native_layer_norm`` reads its input, weight and bias contiguous (``expect_contiguous``): a copy
    of each that is not (an encoder's features transposed from a convolution's channels, as Whisper's
    and Wav2Vec2's are)."""
    return _dense_copies(torch.contiguous_format, *operands[:1], *operands[2:4])


def layer_norm_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``native_layer_norm_backward``: the gradient, the input, weight and bias are read contiguous (a
    copy of each that is not), and the weight and bias gradients are reduced through a
    ``2 x threads x N`` buffer (``N`` the normalized size) when either is asked for."""
    grad, x, normalized_shape, weight, bias, mask = (operands[i] for i in (0, 1, 2, 5, 6, 7))
    copies = _dense_copies(torch.contiguous_format, grad, x, weight, bias)
    if not (mask[1] or mask[2]):
        return copies
    return copies + 2 * torch.get_num_threads() * math.prod(normalized_shape) * x.element_size()


def _weight_norm_last_dim(v: torch.Tensor, g: torch.Tensor, dim: int) -> int | None:
    """The size of ``v``'s last dimension where the weight-norm kernel normalises along it (``dim``
    is its last dimension and not its first), which it reduces through a per-thread ``rows x N``
    buffer of the norm's dtype; ``None`` on the first-dimension kernel, which allocates nothing."""
    dim = dim % max(v.dim(), 1)
    if dim == 0:
        return None
    return int(v.shape[-1]) * (4 if g.dtype in REDUCED_FLOATS else g.element_size())


def weight_norm(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_weight_norm_interface`` along the last dimension (a convolution's kernel taps, Wav2Vec2's
    positional convolution): a ``threads x N`` buffer of partial sums."""
    row = _weight_norm_last_dim(operands[0], operands[1], operands[2])
    return 0 if row is None else torch.get_num_threads() * row


def weight_norm_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_weight_norm_interface_backward`` along the last dimension: a ``max(3, threads) x N`` buffer
    (the kernel keeps ``sum``, ``a`` and ``b`` in its rows after the per-thread reduction, so at
    least three)."""
    row = _weight_norm_last_dim(operands[1], operands[2], operands[4])
    return 0 if row is None else max(3, torch.get_num_threads()) * row


def group_norm_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``native_group_norm_backward``: the per-sample, per-channel sums ``ds`` and ``db`` (``N x C`` each,
    in the accumulation dtype), whatever the mask and layout."""
    x, n, c = operands[1], operands[5], operands[6]
    return 2 * int(n) * int(c) * _acc_itemsize(x)


def _channels_last(x: torch.Tensor) -> bool:
    """Whether the batch-norm kernels take their channels-last path: a channels-last input, or
    one with a single element per channel and sample ("NC11 is also channels last": an ``N x C``
    input too)."""
    if x.dim() < 2:
        return False
    if math.prod(x.shape[2:]) == 1:
        return True
    return x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)

