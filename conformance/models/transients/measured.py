"""Kernels no formula can say: LAPACK's queried workspace and sub-op kernels, measured on
stand-ins by a registered meter, and kernels whose temporaries follow the values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import KernelNotModelled

#: LAPACK-backed kernels whose workspace LAPACK itself sizes: the kernel asks the routine (``lwork = -1``)
#: how much ``work`` / ``rwork`` / ``iwork`` it wants, and the answer is the library's (OpenBLAS's or
#: MKL's blocking, ``ilaenv``), not a function of the shapes this table could write down.  Their entry
#: is a measurement of the kernel on stand-ins of the same shapes, strides and dtypes, made once per
#: layout by the meter :mod:`conformance.probes` registers (the workspace depends on the layout and the
#: flags, not on the values: tests/transients/ measures each on other values than the meter's).
LAPACK_QUERIED = frozenset({
    "_linalg_svd", "linalg_qr", "geqrf", "linalg_eig", "_linalg_eigh", "linalg_householder_product",
    "linalg_ldl_factor_ex", "linalg_ldl_solve", "linalg_lstsq", "ormqr",
})


#: Kernels whose temporaries are the sub-ops they dispatch inside themselves: argument checks reduced to a
#: scalar and read back (``std.min().ge(0).item()``: the reduction, a wrapped Scalar, its cast, the bool),
#: counts (``index_reduce``'s ``mean``), sorted copies and index buffers (``searchsorted``),
#: ``multinomial``'s exponential draws and top-k, the histograms' edges and bin indices.  What they allocate
#: is decided by the layout and the flags, and the sequence is each release's source, so their entry is the
#: meter's measurement on stand-ins (positive increasing floats: valid probabilities, deviations, bins and
#: sorted sequences; zero indices), made once per layout; tests/transients/ holds each to the kernel
#: run on other values.  Kernels whose temporaries follow the values are not here (``isin``: the number of
#: unique elements, as ``_unique2``'s; ``matrix_exp``: the degree its norm picks; a boolean-mask ``index_put``).
SUB_OP_KERNELS = frozenset({
    "normal", "multinomial", "index_reduce", "index_reduce_", "histogram", "_histogramdd_bin_edges",
    "_histogramdd_from_bin_cts",
    "_histogramdd_from_bin_tensors", "searchsorted",
})


#: Kernels whose temporaries follow the operands' values, not only their layout: ``_unique2``'s and
#: ``isin``'s the number of distinct elements (sorted copies, inverse and count buffers), ``matrix_exp``'s
#: the degree of the Padé approximant its norm picks (how many matrix powers it holds), a boolean mask's
#: ``index``/``index_put`` the number of its ``True`` elements (the ``nonzero`` indices it expands to),
#: ``masked_scatter_backward``'s the mask's count.  No table entry and no stand-in can say these: a graph
#: that calls one is traced on the call's own values (:mod:`conformance.api.step`), and the kernel is
#: measured there on copies of those values, once per call (:data:`MEASURED_WORKSPACE`).
VALUE_DEPENDENT_KERNELS = frozenset({
    "_unique", "_unique2", "unique_dim", "isin", "linalg_matrix_exp", "masked_scatter_backward",
})


#: indexing kernels whose temporaries follow the values where an index is a mask (bool or uint8)
MASK_INDEXED_KERNELS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index_put"})


#: node meta key: the bytes the node's kernel allocated beyond its outputs when it ran on the traced call's
#: own values (a kernel of :func:`depends_on_values`); it is the node's entry, in place of the table's
MEASURED_WORKSPACE = "conformance_measured_workspace"


def depends_on_values(target: Any, args: Sequence[Any]) -> bool:
    """Whether the eager kernel of ``target`` called on ``args`` (values or fakes) allocates temporaries
    that follow the values (:data:`VALUE_DEPENDENT_KERNELS`, a mask-indexed :data:`MASK_INDEXED_KERNELS`)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    name = target.overloadpacket.__name__
    if name in VALUE_DEPENDENT_KERNELS:
        return True
    if name not in MASK_INDEXED_KERNELS or len(args) < 2 or not isinstance(args[1], (list, tuple)):
        return False
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])


#: measures one call's workspace on stand-ins: ``meter(target, operands, out)`` -> bytes beyond the outputs
WorkspaceMeter = Callable[[torch._ops.OpOverload, Sequence[Any], Any], int]


_METERS: list[WorkspaceMeter] = []


def register_workspace_meter(meter: WorkspaceMeter) -> None:
    """Set the meter :func:`measured_on_stand_ins` measures with (the probes layer's; models cannot measure)."""
    _METERS[:] = [meter]


def measured_on_stand_ins(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """A kernel of :data:`LAPACK_QUERIED` or :data:`SUB_OP_KERNELS`: what it allocates beyond its outputs,
    measured by the meter."""
    if not _METERS:
        raise KernelNotModelled(f"{target}: its workspace is measured on stand-ins, and no meter is registered "
                                "(import conformance.probes)")
    return _METERS[0](target, operands, out)

