"""FFTs on MKL: the strided copies an FFT makes of an input whose batch dimensions do not collapse
into one."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import _nbytes


def _partition(items: list[int], keep_first: Callable[[int], bool]) -> list[int]:
    """``std::partition`` as libstdc++ does it (not stable: it swaps from both ends), which
    ``_exec_fft`` uses to put the batch dimensions first."""
    items, first, last = list(items), 0, len(items)
    while True:
        while first != last and keep_first(items[first]):
            first += 1
        if first == last:
            return items
        last -= 1
        while first != last and not keep_first(items[last]):
            last -= 1
        if first == last:
            return items
        items[first], items[last] = items[last], items[first]
        first += 1


@dataclass(frozen=True)
class _Strided:
    """A tensor's geometry, all ``_exec_fft`` reads of it."""

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int

    @classmethod
    def of(cls, t: torch.Tensor) -> _Strided:
        return cls(tuple(int(d) for d in t.shape), tuple(int(s) for s in t.stride()), t.element_size())

    def nbytes(self) -> int:
        return math.prod(self.sizes) * self.itemsize


def _by_stride(x: _Strided, dims: Sequence[int]) -> list[int]:
    """``std::sort`` of ``dims`` by decreasing stride: an insertion sort below 17 elements, so ties
    keep their order (Python's stable sort)."""
    return sorted(dims, key=lambda d: -x.strides[d])


def _exec_fft(x: _Strided, out_sizes: Sequence[int], dims: Sequence[int], out_itemsize: int) -> tuple[int, _Strided]:
    """``_exec_fft`` (mkl/SpectralOps.cpp): the input, its batch dimensions first in stride order and
    the transformed ones last, is reshaped to ``(batch, *signal)``: a contiguous copy where that is
    not a view.  Returns the copy's bytes and the output's geometry (a contiguous batched buffer
    strided back to the input's dimension order)."""
    ndim = len(x.sizes)
    transformed = set(int(d) for d in dims)
    perm = _partition(list(range(ndim)), lambda d: d not in transformed)
    batch_dims = ndim - len(transformed)
    perm = _by_stride(x, perm[:batch_dims]) + [int(d) for d in dims]
    meta = torch.empty_strided(x.sizes, x.strides, device="meta").permute(perm)
    signal = [int(d) for d in meta.shape[batch_dims:]]
    try:
        meta.view([-1, *signal])
        copy = 0
    except RuntimeError:  # not a view: reshape clones
        copy = x.nbytes()
    batched_out = [math.prod(int(out_sizes[d]) for d in perm[:batch_dims]), *(int(out_sizes[d]) for d in dims)]
    contiguous = [math.prod(batched_out[i + 1:]) for i in range(len(batched_out))]
    out_strides = [0] * ndim
    numel = 1
    for i in range(batch_dims - 1, -1, -1):
        out_strides[perm[i]] = numel * contiguous[0]
        numel *= int(out_sizes[perm[i]])
    for i in range(batch_dims, ndim):
        out_strides[perm[i]] = contiguous[1 + i - batch_dims]
    return copy, _Strided(tuple(int(d) for d in out_sizes), tuple(out_strides), out_itemsize)


def fft_r2c(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_fft_r2c`` on MKL: the transform dimensions but the last sorted by stride, then
    :func:`_exec_fft`'s copy of the input where its batch dimensions do not collapse to one."""
    x, dim = operands[0], [int(d) for d in operands[1]]
    geo = _Strided.of(x)
    dims = _by_stride(geo, dim[:-1]) + dim[-1:]
    return _exec_fft(geo, out.shape, dims, out.element_size())[0]


def fft_c2c(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_fft_c2c`` on MKL: the transform dimensions sorted by stride, then :func:`_exec_fft`'s copy."""
    x, dim = operands[0], [int(d) for d in operands[1]]
    geo = _Strided.of(x)
    return _exec_fft(geo, geo.sizes, _by_stride(geo, dim), geo.itemsize)[0]


def fft_c2r(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_fft_c2r`` on MKL: over several dimensions, a ``_fft_c2c`` over all but the last first (its
    result, the size of the input, is alive to the end, beside its own copy), then the 1-d
    complex-to-real transform of that, with :func:`_exec_fft`'s copy of it (the c2c result is laid
    out in its batch-first order, which rarely collapses)."""
    x, dim = operands[0], [int(d) for d in operands[1]]
    geo = _Strided.of(x)
    first = 0
    if len(dim) > 1:
        copy, geo = _exec_fft(geo, geo.sizes, _by_stride(geo, dim[:-1]), geo.itemsize)
        first = geo.nbytes() + copy - _nbytes(out)  # before the result is allocated
    held = geo.nbytes() if len(dim) > 1 else 0
    copy = _exec_fft(geo, out.shape, dim[-1:], out.element_size())[0]
    return max(first, held + copy)

