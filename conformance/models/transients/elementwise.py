"""TensorIterator's kernels: wrapped Python scalars, casts to the common dtype, reduced-precision
accumulators of ``mean`` and ``sum``, complex temporaries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import _WRAPPED_DTYPE, REDUCED_FLOATS

#: TensorIterator ops (binary arithmetic and comparisons) and their in-place forms.
ELEMENTWISE_BINARY_OPS = frozenset({
    "add", "sub", "mul", "div", "rsub", "remainder", "lt", "le", "gt", "ge", "eq", "ne",
    "add_", "sub_", "mul_", "div_",
})


COMPARISON_OPS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})


def binary_elementwise(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """TensorIterator on CPU: a Python number operand is wrapped into a 0-dim tensor (8 bytes: float64 or
    int64; 16 for a complex number, complex128) and, when the op's common dtype differs, cast to it (one
    element); a tensor operand of another dtype than the common one (a bool mask, an int64 count in
    ``amax``'s backward) is cast into a temporary copy."""
    tensors = [t for t in operands if isinstance(t, torch.Tensor)]
    if target.overloadpacket.__name__ in COMPARISON_OPS:
        dims = [t for t in tensors if t.dim()] or tensors
        common = dims[0].dtype
        for t in dims[1:]:
            common = torch.promote_types(common, t.dtype)
    else:
        common = out.dtype if isinstance(out, torch.Tensor) else tensors[0].dtype
    total = 0
    for a in operands[:2]:
        if isinstance(a, (bool, int, float, complex)):
            wrapped = _WRAPPED_DTYPE[type(a)]
            total += wrapped.itemsize + (common.itemsize if common != wrapped else 0)
        elif isinstance(a, torch.Tensor) and a.dtype != common:
            total += a.numel() * common.itemsize
    return total


def mean(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``mean`` divides the sum in place by the element count (an int64 scalar, wrapped and cast to the
    dtype, float64 too: :func:`_mean_division`).  For
    bfloat16/float16 the CPU kernel computes in float32: a float32 copy of the input and a
    float32 result (ReduceOps.cpp ``mean_out``), which dominate."""
    x = operands[0]
    n_out = out.numel() if isinstance(out, torch.Tensor) else 1
    if x.dtype in REDUCED_FLOATS:
        return max(4 * x.numel() + 4 * n_out, 4 * n_out + 8 + 4)
    return _mean_division(x)


def _mean_division(x: torch.Tensor) -> int:
    """``mean_out``'s ``div_`` by the element count, an integer: a wrapped int64 scalar, cast to the dtype."""
    return 8 + x.dtype.itemsize


def sum_(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``sum`` whose result dtype differs from the input's (``sum`` of a bool mask is int64)
    first casts the input into a temporary of the result dtype; ``sum`` over all elements of a
    bfloat16/float16 tensor that TensorIterator cannot walk as one run (ReduceOps.cpp
    ``should_use_acc_buffer``: two or more dimensions left, :func:`_coalesced_ndim`) reduces a float32
    copy of the input into a float32 result, then casts.  A transposed or permuted tensor is one run,
    as is an evenly strided one: no copy, though neither is contiguous."""
    x = operands[0]
    if not isinstance(out, torch.Tensor):
        return 0
    if out.dtype != x.dtype:
        return x.numel() * out.dtype.itemsize
    if target._overloadname == "default" and x.dtype in REDUCED_FLOATS and _coalesced_ndim(x) >= 2:
        return 4 * x.numel() + 4
    return 0


def _coalesced_ndim(x: torch.Tensor) -> int:
    """The dimensions TensorIterator keeps for a reduction over all of ``x``'s: size-1 dimensions
    dropped, the others ordered by stride and merged where one continues the next
    (``reorder_dimensions`` and ``coalesce_dimensions``; the output's strides are all 0 and merge)."""
    kept = 0
    run: tuple[int, int] | None = None  # (stride, size) of the dimension being merged into
    for stride, size in sorted((int(st), int(sz)) for sz, st in zip(x.shape, x.stride(), strict=True) if int(sz) != 1):
        if run is not None and run[0] * run[1] == stride:
            run = (run[0], run[1] * size)
        else:
            kept, run = kept + 1, (stride, size)
    return kept


def clamp_casts(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``clamp``/``clamp_min``/``clamp_max`` with tensor bounds (TensorIterator): a bound of another dtype
    than the result's is cast into a temporary of its own shape (an int32 bound beside a float32 input)."""
    if not isinstance(out, torch.Tensor):
        return 0
    return sum(t.numel() * out.dtype.itemsize for t in operands[1:3]
               if isinstance(t, torch.Tensor) and t.dtype != out.dtype)


def complex_to_real(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``abs`` and ``angle`` of a complex tensor (UnaryOps.cpp ``unary_op_impl_with_complex_to_float_out``):
    the kernel computes into a complex temporary of the input's size and copies its real part into the
    real result."""
    x = operands[0]
    return x.numel() * x.dtype.itemsize if isinstance(x, torch.Tensor) and x.is_complex() else 0


def rrelu_eval(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``rrelu_with_noise``. In eval mode a leaky ReLU of slope ``(lower + upper) / 2``, computed on
    wrapped float64 scalars: six 8-byte tensors. In training the slopes are drawn into ``noise`` and the
    output element by element, over ``self.contiguous()``: a copy only where ``self`` is not contiguous."""
    training = bool(operands[4]) if len(operands) > 4 else False
    if not training:
        return 48
    x = operands[0]
    return 0 if x.is_contiguous() else x.numel() * x.element_size()

