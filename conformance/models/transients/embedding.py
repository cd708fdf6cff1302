"""Embeddings and embedding bags: the offset and index buffers their kernels build, dense and
sparse gradients."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import KernelNotModelled, _argument, _dense_copies, _flattens_as_view, _nbytes
from conformance.models.transients.measured import _METERS, measured_on_stand_ins


def embedding_bag_offset2bag(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any, t: Any) -> int:
    """``offset2bag`` is the ``cumsum`` of ``n + 1`` elements resized to ``n``: one int64 more."""
    if not isinstance(out, (list, tuple)) or len(out) < 2 or out[1] is not t or t.numel() == 0:
        return 0
    return 8


def sparse_bag_gradient_values(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any, t: Any) -> int:
    """``EmbeddingBag(mode="sum", sparse=True)``'s gradient where the forward kept no ``offset2bag``: the kernel
    rebuilds it and gathers one gradient row per index (``n`` rows), where the meta function gathers by the empty
    ``offset2bag`` it was given (no row): the values' storage is the kernel's ``n x D``."""
    if not (isinstance(out, torch.Tensor) and out.layout == torch.sparse_coo and isinstance(t, torch.Tensor)):
        return 0
    values = out._values()
    if t.untyped_storage()._cdata != values.untyped_storage()._cdata:
        return 0
    grad, indices, offset2bag = operands[0], operands[1], operands[3]
    if int(_argument(target, operands, "mode")) != 0 or offset2bag.numel() != 0:
        return 0
    return int(indices.numel()) * int(grad.shape[-1]) * grad.element_size()


def embedding(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``embedding`` is ``index_select`` on the flattened indices: a copy of them when they do not
    flatten as a view (token-type ids expanded from one row)."""
    indices = operands[1]
    return 0 if indices.dim() <= 1 or _flattens_as_view(indices) else _nbytes(indices)


def embedding_dense_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``embedding_dense_backward`` makes the indices and the gradient contiguous first."""
    return _dense_copies(torch.contiguous_format, operands[0], operands[1])


#: EmbeddingBag's ``mean`` divides by ``bag_size.clamp_min(1)`` (torch 2.15 on), not ``maximum(bag_size, ones)``
_MEAN_DIVISOR_CLAMPS = torch.torch_version.TorchVersion(torch.__version__) >= "2.15"


def embedding_bag(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_embedding_bag`` / ``_embedding_bag_forward_only`` on CPU (EmbeddingBag.cpp), 1-D indices.

    ``sum`` is measured on stand-ins (float32's fast path allocates nothing beyond its outputs; other
    dtypes' paths are a sequence of sub-ops whose sizes the layout decides).  Otherwise the
    kernel builds ``offset2bag`` from ``n + 1`` zeros and their ``cumsum`` (both int64, alive
    together beside the result), keeps the cumsum as the output (a storage of ``n + 1``
    elements: 8 bytes more than the ``n`` its shape says), and then, for ``mean``, divides by
    ``max(bag_size, 1)`` (a copy of the bag sizes, the maximum, and a divisor per bag in the
    weight's dtype), or, for ``max``, keeps a scratch index per bag while ``max_indices`` is
    made.  The op's peak is the larger of the two moments.  From torch 2.15 the divisor is
    ``bag_size.clamp_min(1)``: no tensor of ones beside the maximum (one bag-sized int64 less)."""
    weight, indices, offsets = operands[:3]
    mode = int(operands[4]) if len(operands) > 4 else 0
    per_sample = operands[6] if len(operands) > 6 else None
    last_offset = bool(operands[7]) if len(operands) > 7 else False
    if not isinstance(out, (list, tuple)) or indices.dim() != 1:
        return 0
    if mode == 0:  # float32 takes the fast path (its outputs only); other dtypes, and bfloat16/float16 with
        # per-sample weights, build offset2bag and scale through sub-ops whose sizes the layout decides
        return measured_on_stand_ins(target, operands, out) if _METERS or per_sample is not None else 0
    n, bags = int(indices.numel()), int(offsets.numel()) - int(last_offset)
    index = 8
    result, offset2bag, bag_size, max_indices = (_nbytes(t) for t in out[:4])
    zeros_and_cumsum = result + 2 * (n + 1) * index
    if mode == 1:
        divisor_copies = 1 if _MEAN_DIVISOR_CLAMPS else 2
        after = (result + (n + 1) * index + bag_size + max_indices + divisor_copies * bags * index
                 + bags * weight.element_size())
    elif mode == 2:
        after = result + (n + 1) * index + bag_size + bags * index + max_indices
    else:
        return 0
    kept = offset2bag + (index if offset2bag else 0)  # the model's offset2bag: see STORAGE_SLACK
    return max(zeros_and_cumsum, after) - (result + kept + bag_size + max_indices)


def embedding_bag_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_embedding_bag_backward`` (dense) on CPU: ``sum`` and ``mean`` sort the indices (sorted
    values and their order) and gather the bag of each, three int64 copies of the ``n`` indices
    alive at once (``sum``, whose forward kept no ``offset2bag``, first rebuilds it: ``n + 1``
    elements), and ``sum`` with ``per_sample_weights`` also gathers those weights in sorted order
    (``n`` of their dtype); ``max`` gathers the rows of the nonempty bags' max indices (int64) and their
    gradients, and the nonempty bags' positions."""
    grad, indices, _offsets, offset2bag = operands[:4]
    mode = int(_argument(target, operands, "mode"))
    sparse = bool(_argument(target, operands, "sparse"))
    if not isinstance(grad, torch.Tensor) or indices.dim() != 1:
        return 0
    n, index = int(indices.numel()), 8
    if sparse:
        return _embedding_bag_sparse_backward(target, operands, n, mode)
    if mode in (0, 1):
        rebuilt = (n + 1) * index if offset2bag.numel() == 0 else 0
        weights = operands[10] if len(operands) > 10 else None
        sorted_weights = n * weights.element_size() if isinstance(weights, torch.Tensor) else 0
        return rebuilt + 3 * n * index + sorted_weights
    if mode == 2:
        bags = int(grad.shape[0])
        return bags * int(grad.shape[1]) * (index + grad.element_size()) + bags * index
    return 0


def _embedding_bag_sparse_backward(target: torch._ops.OpOverload, operands: Sequence[Any], n: int, mode: int) -> int:
    """``_embedding_bag_backward`` with ``sparse=True`` (``_embedding_bag_sparse_backward``): the gradient's rows
    gathered per index are the sparse result's values (its indices are the input's, a view); ``mean`` first
    scales them by their bags' sizes (two casts of the ``bags`` sizes to the gradient's dtype, and one size per
    index, gathered: measured on three geometries), ``sum`` whose forward kept no ``offset2bag`` rebuilds it
    (``n + 1`` int64, resized to ``n``, alive past the gather)."""
    grad, offset2bag, bag_size = operands[0], operands[3], operands[4]
    weights = _argument(target, operands, "per_sample_weights")
    if isinstance(weights, torch.Tensor) or mode not in (0, 1):
        weighted = " and per-sample weights" if weights is not None else ""
        raise KernelNotModelled(f"{target} sparse with mode {mode}{weighted} is not in the transient table")
    if mode == 1:
        return (2 * int(bag_size.numel()) + n) * grad.element_size()
    return (n + 1) * 8 if offset2bag.numel() == 0 else 0

