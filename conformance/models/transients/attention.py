"""CPU flash attention: its per-thread query/key blocks and accumulators, forward and backward."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import REDUCED_FLOATS, KernelNotModelled, _acc_itemsize, _dense_copies


def _flash_splits(q_len: int, kv_len: int) -> tuple[int, int]:
    """The CPU flash-attention kernel's block sizes (FlashAttentionKernel.cpp's dispatch)."""
    q_split = 256 if q_len >= 768 else 64 if q_len >= 192 else 32
    return min(q_split, q_len), min(512, kv_len)


def flash_attention(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_scaled_dot_product_flash_attention_for_cpu``: one block buffer per intra-op thread
    (``torch.get_num_threads()``): scores ``q_split x kv_split``, row max and row sum, and an
    output block ``q_split x head_dim``, in the accumulation type."""
    q, k = operands[0], operands[1]
    _not_reduced(q, target)
    q_split, kv_split = _flash_splits(q.shape[2], k.shape[2])
    per_thread = q_split * kv_split + 2 * q_split + q_split * q.shape[3]
    return torch.get_num_threads() * per_thread * _acc_itemsize(q)


def flash_attention_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_scaled_dot_product_flash_attention_for_cpu_backward``: per thread, the attention and
    its gradient blocks (``2 x q_split x kv_split``); one row-sum block of ``q_split`` (only
    the calling thread's allocations reach the profiler; the other intra-op threads'
    identical ones do not); and a copy of the output gradient when it is not laid out as the
    kernel reads it (batch, sequence, heads, head_dim)."""
    grad_out, q, k = operands[0], operands[1], operands[2]
    _not_reduced(q, target)
    q_split, kv_split = _flash_splits(q.shape[2], k.shape[2])
    acc = _acc_itemsize(q)
    blocks = torch.get_num_threads() * 2 * q_split * kv_split * acc + q_split * acc
    return blocks + _dense_copies(torch.contiguous_format, grad_out.transpose(1, 2))


def _not_reduced(q: torch.Tensor, target: torch._ops.OpOverload) -> None:
    if q.dtype in REDUCED_FLOATS:  # packed key/value and reduced-precision copies: not measured yet
        raise KernelNotModelled(f"{target} on {q.dtype} is not in the transient table")

