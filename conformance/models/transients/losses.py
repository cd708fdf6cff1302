"""Pointwise losses and their backward: the input-sized buffer reduced into the result, the
casts of a target of another dtype."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import KernelNotModelled, _nbytes
from conformance.models.transients.elementwise import _mean_division

MEAN, SUM = 1, 2  # at::Reduction


def _reduction(operands: Sequence[Any], position: int) -> int:
    return int(operands[position]) if len(operands) > position and operands[position] is not None else MEAN


def _mean_scalar(x: torch.Tensor) -> int:
    """``mean`` divides in place by the element count: a wrapped float64 scalar, cast to the dtype."""
    return 8 + (x.element_size() if x.dtype != torch.float64 else 0)


def pointwise_loss(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """Losses computed elementwise into a buffer of the input's size, then reduced (Loss.cpp):
    ``mse_loss`` and ``smooth_l1_loss`` reduce a temporary into their result (whose storage is
    the input-sized buffer: :data:`STORAGE_SLACK`); ``huber_loss`` reduces a temporary into a
    fresh scalar; ``binary_cross_entropy_with_logits`` builds two temporaries (the log-sigmoid
    terms) before its elementwise loss; ``soft_margin_loss`` and ``binary_cross_entropy``
    compute into their result's buffer and reduce into a scalar they copy back."""
    x = operands[0]
    name = target.overloadpacket.__name__
    position = {"binary_cross_entropy": 3, "binary_cross_entropy_with_logits": 4}.get(name, 2)
    reduction = _reduction(operands, position)
    elements = _nbytes(x)
    if name == "soft_margin_loss":  # ``neg_out(output, input).mul_(target)``: a target of another dtype is cast
        cast = _loss_target_cast(target, x, operands[1])
        return max(cast, x.element_size() + (_mean_division(x) if reduction == MEAN else 0)
                   if reduction in (MEAN, SUM) else 0)
    _loss_target_cast(target, x, operands[1], modelled=False)
    mean = _mean_division(x) if reduction == MEAN else 0  # the reduction's ``mean``: an int64 count, cast
    if name == "binary_cross_entropy_with_logits":
        return elements if reduction not in (MEAN, SUM) else 2 * elements + mean
    if reduction not in (MEAN, SUM):
        return 0
    if name in ("soft_margin_loss", "binary_cross_entropy"):
        return x.element_size() + mean
    return elements + mean  # mse_loss, smooth_l1_loss, huber_loss


def pointwise_loss_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``soft_margin_loss_backward``: ``-y * exp(-y x) / (1 + exp(-y x))`` through two input-sized
    temporaries at once, then a scale by the incoming gradient (a wrapped scalar and its cast);
    ``binary_cross_entropy_backward`` scales by ``1 / numel`` for ``mean``."""
    name = target.overloadpacket.__name__
    x = operands[1]
    reduction = _reduction(operands, 4 if name == "binary_cross_entropy_backward" else 3)
    if name == "soft_margin_loss_backward":
        # Loss.cpp: ``z = exp(-target * input)``: ``-target`` (the target's dtype) is alive to the statement's end,
        # beside the product (and, for a target of another dtype, its cast) and then ``z``; then
        # ``mul_out(grad_input, target, z)`` (the target cast again beside ``z``), and the scales in place (a
        # wrapped scalar and its cast beside ``z``)
        y = operands[2]
        cast = _loss_target_cast(target, x, y)
        return max(_nbytes(y) + _nbytes(x), _nbytes(x) + cast, _nbytes(x) + _mean_scalar(x))
    _loss_target_cast(target, x, operands[2], modelled=False)
    return _mean_scalar(x) if reduction == MEAN else 0


def _loss_target_cast(target: torch._ops.OpOverload, x: torch.Tensor, y: Any, modelled: bool = True) -> int:
    """A loss target of another dtype than the input (an integer ``-1``/``1`` label, as ``SoftMarginLoss`` takes):
    TensorIterator casts it into a temporary of the input's dtype where an elementwise step reads it.  Only
    the kernels whose steps are read from Loss.cpp (``modelled``) say how long that copy lives; a target that
    would promote the computation past the input's dtype is not modelled either."""
    if not isinstance(y, torch.Tensor) or y.dtype == x.dtype:
        return 0
    if not modelled or torch.promote_types(x.dtype, y.dtype) != x.dtype:
        raise KernelNotModelled(f"{target} with a {y.dtype} target for a {x.dtype} input is not in the "
                                "transient table")
    return y.numel() * x.element_size()


def multilabel_margin(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``multilabel_margin_loss_forward``/``_backward`` on CPU: a 0-dim int64 scratch, made twice in
    turn (one alive at a time), whatever the shapes and reduction."""
    return 8


def reduced_loss_storage(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any, t: Any) -> int:
    """A reduced loss whose kernel computed it in an input-sized buffer and resized that to a
    scalar in place: the scalar keeps the whole buffer (``mse_loss``, ``smooth_l1_loss``,
    ``soft_margin_loss``, ``binary_cross_entropy``)."""
    name = target.overloadpacket.__name__
    position = 3 if name == "binary_cross_entropy" else 2
    if out is not t or _reduction(operands, position) not in (MEAN, SUM):
        return 0
    return max(_nbytes(operands[0]) - _nbytes(t), 0)

