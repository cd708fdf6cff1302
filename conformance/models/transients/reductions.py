"""Sorting, selection, scans and reductions: the index buffers, sorted copies and casts their
kernels make."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import KernelNotModelled, _argument, _flattens_as_view, _nbytes
from conformance.models.transients.elementwise import _mean_division, binary_elementwise


def sort(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``sort`` (SortingKernel.cpp ``_fill_indices``): the indices are filled from an
    ``arange(size(dim))``, an int64 row alive while they are, whatever the input's dtype; a 0-dim
    input is copied as it is."""
    x = operands[0]
    if x.dim() == 0:
        return 0
    return 8 * int(x.shape[_argument(target, operands, "dim") % x.dim()])


def kthvalue(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``kthvalue`` (Sorting.cpp ``kthvalue_out_impl_cpu``) selects in a contiguous clone of the
    input beside an int64 index buffer of the input's shape; a 0-dim input is copied as it is."""
    x = operands[0]
    return 0 if x.dim() == 0 else x.numel() * (x.element_size() + 8)


def median(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``median``/``nanmedian`` (Sorting.cpp): over all elements, ``nth_element`` in a clone of the
    input; along ``dim``, the input as it is when that dimension's stride is at most 1, else a
    contiguous copy with that dimension moved last (none when the moved view is contiguous)."""
    x = operands[0]
    if target._overloadname == "default":
        return _nbytes(x)
    if x.dim() == 0:
        return 0
    dim = int(operands[1]) % x.dim()
    if int(x.stride(dim)) <= 1:
        return 0
    moved = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    moved = moved.unsqueeze(-1).transpose(dim, -1).squeeze(dim)
    return 0 if moved.is_contiguous() else _nbytes(x)


def std_var(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``std``/``var`` (ReduceOps.cpp ``std_var_out``) to at most one element of a float32/float64
    input take ``std_var_all_cpu``: two passes around ``self.mean()``, whose 0-dim result and
    in-place division are alive meanwhile (see :func:`mean`); any other reduction is one pass."""
    x = operands[0]
    if x.dtype not in (torch.float32, torch.float64) or not isinstance(out, torch.Tensor) or out.numel() > 1:
        return 0
    if x.numel() == 0:
        return 0
    return x.element_size() + _mean_division(x)


def logsumexp(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``logsumexp`` (ReduceOps.cpp ``logsumexp_out_impl``): ``maxes = amax(self, dims, keepdim=True)``
    (alive to the end); ``maxes.abs() == INFINITY`` (the absolute values, a wrapped float64 scalar
    cast to the dtype, a bool mask) to zero infinite maxes, freed before the result is made; then
    ``(self - maxes).exp_()``, input-sized, summed into the result."""
    x = operands[0]
    if x.dtype not in (torch.float32, torch.float64):
        raise KernelNotModelled(f"{target} on {x.dtype} is not in the transient table")
    n_max = out.numel()
    maxes = n_max * x.element_size()
    mask = maxes + 8 + (x.element_size() if x.dtype != torch.float64 else 0) + n_max
    return max(maxes + mask - _nbytes(out), maxes + x.numel() * x.element_size())


def scalar_multiple(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``deg2rad``/``rad2deg`` multiply by a Python float (a wrapped float64 scalar, cast to the
    dtype; see :func:`binary_elementwise`)."""
    return binary_elementwise(target, [operands[0], 1.0], out)


def pow_scalar(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``pow(Scalar self, Tensor exponent)`` (what ``ldexp`` calls) wraps its base into a 0-dim tensor
    and runs as a binary TensorIterator op (:func:`binary_elementwise`); a tensor exponent of
    another dtype is cast.  ``pow(Tensor, Scalar)`` has its own scalar paths and allocates nothing."""
    if target._overloadname != "Scalar":
        return 0
    return binary_elementwise(target, operands[:2], out)


def all_any(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``all``/``any`` (ReduceOps.cpp ``allany_impl``): a single element is read through
    ``self.to(kBool)`` (one byte, none for a bool input); more are reduced by an iterator made with
    ``make_reduction_from_out_ty``, which casts the input to the result's dtype (bool; uint8 for a
    uint8 input, not copied)."""
    x = operands[0]
    if not isinstance(out, torch.Tensor):
        return 0
    if x.numel() == 1:
        return 0 if x.dtype == torch.bool else 1
    return 0 if out.dtype == x.dtype else x.numel() * out.element_size()


def count_nonzero(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``count_nonzero`` over dimensions (ReduceOps.cpp ``count_nonzero_cpu``) is ``(self != 0).sum(dims)``:
    the comparison with a wrapped scalar (:func:`binary_elementwise`) into a bool mask, then the sum's
    int64 copy of that mask (:func:`sum_`); over none it counts in place."""
    x, dims = operands[0], operands[1]
    if target._overloadname != "dim_IntList":  # ``count_nonzero(self, dim=None)`` calls the above with [dim] or []
        dims = [] if dims is None else [dims]
    if not dims:
        return 0
    if x.dtype == torch.bool:  # its own mask: no comparison is made (measured)
        return x.numel() * 8
    mask = x.numel()
    compare = binary_elementwise(torch.ops.aten.ne.Scalar, [x, 0], None)
    return max(compare + mask - _nbytes(out), mask + x.numel() * 8)


def roll(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``roll`` over several dimensions (TensorTransformations.cpp ``roll_common``) rolls the first, then
    the rest of the result, recursively: the ``k - 1`` intermediate results are alive at the last;
    with no dimension it rolls ``self.flatten()``."""
    x, dims = operands[0], operands[2] if len(operands) > 2 and operands[2] is not None else []
    if not dims:  # the flattened input rolled, viewed back: flattening copies a layout that is not flat
        return 0 if _flattens_as_view(x) else _nbytes(x)
    return (len(dims) - 1) * _nbytes(out)


def scatter_gather(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``gather``/``scatter``/``scatter_add`` on the CPU index with int64: an index of another dtype
    (int32, which the ops accept) is converted into an int64 copy first, alive for the op."""
    index = _argument(target, operands, "index")
    return 0 if index.dtype == torch.int64 else index.numel() * 8


def histc(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``histc`` (Histogram.cpp, HistogramKernel.cpp): the ``bins + 1`` bin edges, then one histogram
    per intra-op thread (``torch.get_num_threads()`` x ``bins``, zeroed, summed into the result), all
    in the input's dtype; ``min == max`` takes the input's ``aminmax`` beside the edges first (two 0-dim
    results, freed before the histograms are made: the larger of the two moments counts)."""
    x, bins = operands[0], int(_argument(target, operands, "bins"))
    low, high = _argument(target, operands, "min"), _argument(target, operands, "max")
    range_from_data = 2 if low == high else 0
    return (bins + 1 + max(torch.get_num_threads() * bins, range_from_data)) * x.element_size()


def native_dropout_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``native_dropout_backward`` is ``grad * mask * scale`` (Dropout.cpp): ``grad * mask`` casts the bool
    mask to the gradient's dtype into a temporary (:func:`binary_elementwise`) beside its result, which
    is then scaled by a wrapped float64 scalar into the output."""
    grad, mask = operands[0], operands[1]
    cast = binary_elementwise(torch.ops.aten.mul.Tensor, [grad, mask], out)
    return max(cast, _nbytes(out) + binary_elementwise(torch.ops.aten.mul.Tensor, [out, 1.0], out))


def renorm(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``renorm`` (Normalization.cpp ``renorm_out``): the norms over every dimension but ``dim``
    (``linalg_vector_norm(..., keepdim=True)``, ``size(dim)`` elements), turned into the scale factors in
    place."""
    x = operands[0]
    if x.dtype not in (torch.float32, torch.float64):
        raise KernelNotModelled(f"{target} on {x.dtype} is not in the transient table")
    dim = int(_argument(target, operands, "dim")) % max(x.dim(), 1)
    return (int(x.shape[dim]) if x.dim() else 1) * x.element_size()


def chunk_cat(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_chunk_cat`` (TensorShape.cpp ``_pad_chunk``): a tensor whose size along ``dim`` is not a multiple
    of ``num_chunks`` is copied into zeros padded up to one, alive until the ``cat`` that makes the result."""
    tensors, dim, chunks = operands[0], int(operands[1]), int(operands[2])
    total = 0
    for t in tensors:
        d = dim % t.dim()
        size = int(t.shape[d])
        padded = -(-size // chunks) * chunks
        if padded != size:
            total += t.numel() // size * padded * t.element_size()
    return total


def scatter_reduce(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``scatter_reduce.two`` (TensorAdvancedIndexing.cpp): the index's int64 copy as in
    :func:`scatter_gather`, one at a time; for ``"mean"``, the counts: ``ones_like(src)`` scattered into a result-sized
    count, then ``count.masked_fill_(count == 0, 1)`` (a wrapped int scalar cast to the dtype and a bool
    mask), all alive before the division."""
    src, reduce = _argument(target, operands, "src"), _argument(target, operands, "reduce")
    total = scatter_gather(target, operands, out)
    if reduce != "mean":
        return total
    if not out.dtype.is_floating_point:
        raise KernelNotModelled(f"{target} mean on {out.dtype} is not in the transient table")
    compare = binary_elementwise(torch.ops.aten.eq.Scalar, [out, 0], out)
    # the index's copy is made again by the counts' scatter_add_, freed before the comparison
    return max(total, _nbytes(src) + _nbytes(out) + max(total, compare + out.numel()))


def segment_reduce(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``segment_reduce`` (SegmentReduce.cpp) given ``lengths`` first checks that they sum to the data's
    size along ``axis``: ``lengths.sum()`` (an int64 0-dim), compared with a wrapped int64 into a bool,
    all freed before the result is allocated; given ``offsets``, nothing."""
    lengths = _argument(target, operands, "lengths")
    if lengths is None:
        return 0
    if lengths.dtype != torch.int64:
        raise KernelNotModelled(f"{target} with {lengths.dtype} lengths is not in the transient table")
    return max(8 + 8 + 1 - _nbytes(out), 0)


def vector_norm(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``linalg_vector_norm`` of a 0-dim tensor with ``ord=0`` (the count of non-zeros): a wrapped scalar
    and its cast to the dtype; every other order and shape reduces into the result alone."""
    x = operands[0]
    order = operands[1] if len(operands) > 1 and operands[1] is not None else 2
    return 8 + x.dtype.itemsize if x.dim() == 0 and order == 0 else 0


def repeat_interleave_counts(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``repeat_interleave.Tensor`` (the counts alone, int64): the kernel indexes through their ``cumsum``,
    one int64 per count, whatever the counts are."""
    repeats = operands[0]
    if target._overloadname != "Tensor" or not isinstance(repeats, torch.Tensor):
        return 0
    if repeats.dtype != torch.int64:
        return 0  # int32 counts: a sequence of casts and a cumsum whose sizes follow the counts, not written here
    return repeats.numel() * 8


def cumsum(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``cumsum`` into another dtype (a bool mask summed as int64) scans a cast copy of the input."""
    x = operands[0]
    return x.numel() * out.element_size() if isinstance(out, torch.Tensor) and out.dtype != x.dtype else 0

