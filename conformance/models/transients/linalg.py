"""Linear algebra on LAPACK: the info checks, LU and Cholesky factorisations and their solves,
whose copies are column-major proxies of the operands."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import KernelNotModelled, _argument, _nbytes
from conformance.models.transients.elementwise import binary_elementwise


def lu_unpack(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``lu_unpack`` (BatchLinearAlgebra.cpp) builds the permutation from ``arange(m)`` (int64), expanded
    to the pivots' batch and made contiguous when there is one, before applying the pivots to it."""
    lu, pivots = operands[0], operands[1]
    m, n = int(lu.shape[-2]), int(lu.shape[-1])
    batch = math.prod(int(d) for d in pivots.shape[:-1])
    batched = pivots.dim() > 1
    # a batched unpacking of the data also makes a k x k temporary per matrix first, k = min(m, n) (measured on
    # three batch geometries, its source line not located; freed before the pivots)
    k = min(m, n)
    data = batch * k * k * lu.element_size() if batched and _argument(target, operands, "unpack_data") else 0
    if not bool(_argument(target, operands, "unpack_pivots")):
        return data
    return max(data, 8 * m + (8 * m * batch if batched else 0))


def _batch(t: torch.Tensor) -> int:
    """``batchCount``: the number of matrices in a (batch of) matrices."""
    return math.prod(int(d) for d in t.shape[:-2])


def _check_errors(infos: int) -> int:
    """``_linalg_check_errors`` (BatchLinearAlgebra.cpp) on ``infos`` int32 codes: ``infos.any()``, a bool
    result beside the codes read through a bool cast (:func:`all_any`: one byte per code, one for a
    single one)."""
    return 1 + infos


def _linalg_dtype(target: torch._ops.OpOverload, t: torch.Tensor) -> None:
    if t.dtype not in (torch.float32, torch.float64):
        raise KernelNotModelled(f"{target} on {t.dtype} is not in the transient table")


def _strides(shape: Sequence[int], f_contig: bool) -> tuple[int, ...]:
    """``batched_matrix_contiguous_strides`` (LinearAlgebraUtils.h): a batch of C- or F-contiguous matrices."""
    n = len(shape)
    if n < 2:
        return (1,) * n
    strides = [0] * n
    strides[n - 2] = max(int(shape[n - 1]), 1)
    for i in range(n - 3, -1, -1):
        strides[i] = strides[i + 1] * max(int(shape[i + 1]), 1)
    strides[n - 1] = max(int(shape[n - 2]), 1) if f_contig else 1
    if f_contig:
        strides[n - 2] = 1
    return tuple(strides)


def _proxy(t: torch.Tensor, f_contig: bool) -> int:
    """A structured kernel's ``out=`` whose strides are not those its meta function sets gets a temporary
    (``maybe_create_proxy``), copied back at the end: alive for the call."""
    return 0 if tuple(int(s) for s in t.stride()) == _strides(t.shape, f_contig) else _nbytes(t)


def cholesky(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``cholesky`` (BatchLinearAlgebra.cpp): an int32 ``info`` per matrix beside the factor, checked by
    :func:`_check_errors`; an empty input returns ``empty_like``."""
    x = operands[0]
    if x.numel() == 0:
        return 0
    return 4 * _batch(x) + _check_errors(_batch(x))


def cholesky_inverse(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``cholesky_inverse``: ``infos = zeros({max(1, batchCount)})`` int32, made before the result, then
    :func:`_check_errors` on them."""
    infos = max(1, _batch(operands[0]))
    return 4 * infos + _check_errors(infos)


def cholesky_solve_helper(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_cholesky_solve_helper_cpu``, which ``cholesky_solve`` calls on its operands broadcast to one
    batch (views): the right side's column-major clone is the result; the factor is cloned column-major
    too; then ``zeros({batchCount})`` int32 infos and :func:`_check_errors`."""
    b, a = operands[0], operands[1]
    batch = torch.broadcast_shapes(tuple(b.shape[:-2]), tuple(a.shape[:-2]))
    infos = math.prod(batch)
    return math.prod(batch) * int(a.shape[-2]) * int(a.shape[-1]) * a.element_size() + 4 * infos + _check_errors(infos)


def cholesky_ex(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``linalg_cholesky_ex`` factors into its result (its ``info`` an output); ``check_errors`` adds
    :func:`_check_errors`."""
    x = operands[0]
    if x.numel() == 0 or not _argument(target, operands, "check_errors"):
        return 0
    return _check_errors(_batch(x))


def lu_factor_ex(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``linalg_lu_factor_ex`` factors into its result; ``check_errors`` adds :func:`_check_errors`."""
    x = operands[0]
    if x.numel() == 0 or not _argument(target, operands, "check_errors"):
        return 0
    return _check_errors(_batch(x))


def _pivot_checks(pivots: torch.Tensor) -> int:
    """``lu_solve_kernel`` (BatchLinearAlgebraKernel.cpp) checks ``pivots.gt(0).all()`` and then
    ``pivots.le(n).all()``: each a comparison with a wrapped int64 scalar cast to int32 into a bool mask
    (:func:`binary_elementwise`), then ``all``'s one byte beside the mask."""
    compare = binary_elementwise(torch.ops.aten.gt.Scalar, [pivots, 0], None)
    return max(compare + pivots.numel(), pivots.numel() + 1)


def _broadcast_indices(lu: torch.Tensor, batch: Sequence[int]) -> int:
    """``apply_lu_solve``'s ``BroadcastLinearIndices`` when the factor's batch is not the result's: an int64
    ``arange`` over the factor's matrices, broadcast to the result's batch and made contiguous (a copy
    unless that is a view: ``get_linear_indices``, LinearAlgebraUtils.h)."""
    own = tuple(int(d) for d in lu.shape[:-2])
    batch = tuple(int(d) for d in batch)
    if own == batch:
        return 0
    spread = torch.empty(own, dtype=torch.int64, device="meta").broadcast_to(batch)
    return 8 * math.prod(own) + (0 if spread.is_contiguous() else 8 * math.prod(batch))


def _lu_solve(lu: torch.Tensor, pivots: torch.Tensor, batch: Sequence[int]) -> int:
    """``linalg_lu_solve_out``'s own copies: the pivots made contiguous, the factor cloned column-major
    unless it is (``borrow_else_clone``), alive with :func:`_pivot_checks` and then with
    :func:`_broadcast_indices` for a result of batch ``batch``."""
    copies = (0 if pivots.is_contiguous() else pivots.numel() * 4) + (0 if lu.mT.is_contiguous() else _nbytes(lu))
    return copies + max(_pivot_checks(pivots), _broadcast_indices(lu, batch))


def lu_solve(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``linalg_lu_solve``: the right side is copied into the result, then :func:`_lu_solve`; an empty
    result returns first."""
    lu, pivots = operands[0], operands[1]
    if not isinstance(out, torch.Tensor) or out.numel() == 0:
        return 0
    return _lu_solve(lu, pivots, out.shape[:-2])


def solve_ex(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_linalg_solve_ex`` (BatchLinearAlgebra.cpp): ``linalg_lu_factor_ex_out`` into its LU, pivots
    and info (outputs; ``check_errors`` then adds :func:`_check_errors`), then ``linalg_lu_solve_out``
    into the result, unsqueezed for a vector right side: a proxy (:func:`_proxy`) where that view's
    strides are not the column-major ones ``linalg_lu_solve``'s meta function sets, beside
    :func:`_lu_solve`."""
    a, b = operands[0], operands[1]
    result, lu, pivots = out[0], out[1], out[2]
    left = bool(_argument(target, operands, "left"))
    check = _check_errors(_batch(a)) if _argument(target, operands, "check_errors") else 0
    if result.numel() == 0:
        return check
    vector = b.dim() == 1 or (a.dim() - 1 == b.dim() and tuple(b.shape) == tuple(a.shape[:-1]))
    view = torch.empty_strided(result.shape, result.stride(), dtype=result.dtype, device="meta")
    view = view.unsqueeze(-1) if vector else view
    return max(check, _proxy(view, left) + _lu_solve(lu, pivots, view.shape[:-2]))


def inv_ex(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``linalg_inv_ex`` solves ``A X = I`` in its result (``linalg_solve_ex_out``): the LU (column-major,
    the input's size) and the int32 pivots that ``_linalg_solve_ex_out`` fills, then :func:`_lu_solve`;
    ``check_errors`` then adds :func:`_check_errors`, the LU freed."""
    a = operands[0]
    if a.numel() == 0:
        return 0
    _linalg_dtype(target, a)
    n = int(a.shape[-1])
    pivots = torch.empty((*a.shape[:-1],), dtype=torch.int32, device="meta")
    check = _check_errors(_batch(a)) if _argument(target, operands, "check_errors") else 0
    return max(_nbytes(a) + 4 * _batch(a) * n + _pivot_checks(pivots), check)


def _lu_det_p(pivots: torch.Tensor) -> int:
    """``lu_det_P`` (LinearAlgebra.cpp): ``arange(1, n + 1)`` int32, ``!= pivots`` (a bool mask),
    ``.sum(-1, dtype=kLong)`` (the int64 result and the mask's int64 cast: :func:`sum_`), then in-place
    ``fmod_``/``mul_``/``add_`` with wrapped int64 scalars, one at a time."""
    n, count = int(pivots.shape[-1]), pivots.numel()
    batch = count // max(n, 1)
    return 4 * n + count + 8 * batch + max(8 * count, 8)


def linalg_det(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_linalg_det`` (LinearAlgebra.cpp): ``linalg_lu_factor_ex_out`` into its LU and pivots with an
    int32 ``info`` per matrix of its own, then ``mul_out(result, lu_det_P(pivots), prod(diag(LU)))``, whose
    arguments this build evaluates right to left: ``prod`` first, alive through :func:`_lu_det_p`, then the
    int64 sign cast to the dtype for the product (:func:`binary_elementwise`)."""
    a = operands[0]
    _linalg_dtype(target, a)
    pivots = out[2]
    batch, item = _batch(a), a.element_size()
    return 4 * batch + batch * item + max(_lu_det_p(pivots), 8 * batch + batch * item)


def linalg_slogdet(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_linalg_slogdet`` (LinearAlgebra.cpp): as :func:`linalg_det`'s factorization, then
    ``mul_out(sign, diag_U.sgn().prod(-1), lu_det_P(pivots))``, right to left: :func:`_lu_det_p`, its
    int64 result alive beside ``sgn`` of the diagonal, its ``prod`` and the sign's cast; then
    ``diag_U.abs().log_()`` summed into ``logabsdet``."""
    a = operands[0]
    _linalg_dtype(target, a)
    pivots = out[3]
    batch, item = _batch(a), a.element_size()
    diag = pivots.numel() * item
    return 4 * batch + max(_lu_det_p(pivots), 8 * batch + diag + 2 * batch * item, diag)


def linalg_lu(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``linalg_lu`` (BatchLinearAlgebra.cpp) factors in place into ``L`` (``m > n``) or ``U``, whose
    row-major strides are not the column-major ones ``linalg_lu_factor_ex``'s meta function sets: a proxy
    (:func:`_proxy`) beside the int32 pivots and info it makes; then :func:`lu_unpack` of that factor."""
    a = operands[0]
    pivot = bool(_argument(target, operands, "pivot"))
    p, l_, u = out[0], out[1], out[2]
    m, n = int(a.shape[-2]), int(a.shape[-1])
    factor = l_ if m > n else u
    batch, k = _batch(a), min(m, n)
    own = 4 * batch * k + 4 * batch
    pivots = torch.empty((*a.shape[:-2], k), dtype=torch.int32, device="meta")
    unpack = lu_unpack(torch.ops.aten.lu_unpack.default, [factor, pivots, True, pivot], (p, l_, u))
    return own + max(_proxy(factor, True), unpack)

