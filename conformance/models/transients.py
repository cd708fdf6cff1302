"""The kernel transient table: bytes an eager CPU kernel allocates inside one op.

The ``eager`` backend must equal the lifetime model byte for byte, and some ATen CPU
kernels allocate workspace on top of their outputs (a wrapped Python scalar, a
float32 copy of a bfloat16 input, the im2col buffer of a convolution), freed before
the op returns.  That workspace is part of the model, not a tolerance: each entry
here says what the kernel allocates and why, and tests/test_transients.py and
tests/test_generated_eager.py hold every entry to a measurement with
:class:`conformance.probes.cpu.CpuAllocatorProbe`.

The bytes an entry returns are *alive while the op's outputs are*: the op's peak is
everything live before it, plus its outputs, plus the entry.

The reference executor runs convolutions on ATen's native CPU kernels (oneDNN off,
:func:`reference_kernels`): oneDNN computes into a blocked layout it picks at run time
from the CPU's instruction set (``nChw16c`` with AVX-512, ``nChw8c`` with AVX2, channels
padded to the block) and reorders the weights, so its workspace is a property of the
machine, not of the graph.  The native kernels' workspace is a function of the shapes.

Kernels with per-thread buffers (flash attention, normalization reductions) are modelled
with ``torch.get_num_threads()`` of the process that models and runs the step (the same
one); allocations made on the intra-op pool's other threads do not reach the profiler.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten

from conformance.models import composite, onednn_rnn

#: TensorIterator ops (binary arithmetic and comparisons) and their in-place forms.
ELEMENTWISE_BINARY_OPS = frozenset({
    "add", "sub", "mul", "div", "rsub", "remainder", "lt", "le", "gt", "ge", "eq", "ne",
    "add_", "sub_", "mul_", "div_",
})
COMPARISON_OPS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})
_WRAPPED_DTYPE = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}
REDUCED_FLOATS = (torch.bfloat16, torch.float16)


class KernelNotModelled(NotImplementedError):
    """An op whose eager kernel's workspace this table cannot say for these operands."""


@contextlib.contextmanager
def reference_kernels() -> Iterator[None]:
    """Run ops on the kernels this table models: ATen's native CPU convolutions (oneDNN off)."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


#: node meta key: whether autograd recorded the op (``at::GradMode::is_enabled()`` inside its kernel); a
#: kernel that allocates more when it is (oneDNN's LSTM workspace) reads it, and takes True without it
GRAD_ENABLED = "conformance_grad_enabled"


def kernel_transient_bytes(node: torch.fx.Node) -> int:
    """What the eager CPU kernel of ``node`` allocates inside the op beyond its outputs.

    An entry whose bytes depend on the CPU (:class:`~conformance.models.onednn_rnn.Bounds`) gives its
    upper bound here: a model with such an entry bounds a measurement from above (the contract of a
    backend held to ``<=``); :func:`kernel_transient_bounds` gives both ends."""
    bounds = kernel_transient_bounds(node)
    return bounds.high


def kernel_transient_bounds(node: torch.fx.Node) -> onednn_rnn.Bounds:
    """:func:`kernel_transient_bytes` as the least and the most any supported CPU allocates (equal
    for every entry but those of oneDNN's kernels)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return onednn_rnn.Bounds(0, 0)
    measured = node.meta.get(MEASURED_WORKSPACE)
    if isinstance(measured, int):  # a kernel whose temporaries follow the values, measured on this call's
        return onednn_rnn.Bounds(measured, measured)
    name = target.overloadpacket.__name__
    if name in ONEDNN_TABLE:
        try:
            return ONEDNN_TABLE[name]([_val(a) for a in node.args], node.meta.get("val"),
                                      bool(node.meta.get(GRAD_ENABLED, True)))
        except onednn_rnn.NotModelled as exc:
            raise KernelNotModelled(str(exc)) from exc
    exact = _table_bytes(node)
    return onednn_rnn.Bounds(exact, exact)


def _table_bytes(node: torch.fx.Node) -> int:
    target = node.target
    assert isinstance(target, torch._ops.OpOverload)
    operands = composite.schema_operands(target, [_val(a) for a in node.args],
                                         {k: _val(v) for k, v in node.kwargs.items()})
    return op_workspace(target, operands, node.meta.get("val"))


def op_workspace(target: Any, operands: Sequence[Any], out: Any) -> int:
    """The table's bytes for one call of ``target`` (an entry, or a composite kernel's body:
    :mod:`conformance.models.composite`); 0 for an op with neither."""
    if not isinstance(target, torch._ops.OpOverload):
        return 0
    if _math_bits(operands) and _METERS:
        try:  # the kernel reads a lazy conjugate or negation: what it materialises is measured with the rest
            return measured_on_stand_ins(target, operands, out)
        except KernelNotModelled:
            pass  # the stand-ins were refused: the entry's figure, without the materialised copies
    entry = TABLE.get(target.overloadpacket.__name__)
    if entry is not None and any(isinstance(t, torch.Tensor) for t in tree_flatten(list(operands))[0]):
        return entry(target, operands, out)  # tensors in a list operand too (``_chunk_cat``'s)
    if not any(isinstance(t, torch.Tensor) for t in operands):
        return 0
    if _symbolic(operands) or _symbolic([out]):
        return 0
    try:
        return composite.composite_workspace(target, operands, out, op_workspace) or 0
    except composite.CompositeNotModelled:
        # a body that checks its operands' values cannot run on stand-ins: taken to allocate nothing
        # beyond its outputs, as an op without an entry is (an exact backend's check shows it otherwise)
        return 0


def _math_bits(operands: Sequence[Any]) -> bool:
    """Whether a tensor operand is a lazy conjugate or negative view (``x.conj()``, ``_neg_view``).  For a
    kernel that cannot read the bit, the ``Conjugate``/``Negative`` fallback materialises the operand, and a
    trace records that ``clone`` as a node of its own; a kernel registered to read the bit (``bmm``, ``mm``)
    copies it inside itself where its BLAS call cannot take that layout.  Those copies are the layout's:
    measured with the kernel on stand-ins that carry the bits."""
    return any(isinstance(t, torch.Tensor) and (t.is_conj() or t.is_neg()) for t in tree_flatten(list(operands))[0])


def _symbolic(values: Sequence[Any]) -> bool:
    """Whether any size, stride or number in ``values`` is a symbol (a dynamic graph's)."""
    symbols = (torch.SymInt, torch.SymFloat, torch.SymBool)
    for v in tree_flatten(list(values))[0]:
        if isinstance(v, symbols):
            return True
        if isinstance(v, torch.Tensor) and any(isinstance(d, symbols)
                                               for d in (*v.shape, *v.stride(), v.storage_offset())):
            return True
    return False


def kernel_storage_slack(node: torch.fx.Node, t: Any) -> int:
    """Bytes the eager CPU kernel of ``node`` allocates for its output ``t`` beyond what ``t``'s
    storage says (a buffer allocated larger, then resized down in place: the storage keeps its size)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return 0
    if target.overloadpacket.__name__ == "mkldnn_rnn_layer":
        try:
            return mkldnn_rnn_workspace([_val(a) for a in node.args], node.meta.get("val"), t,
                                        bool(node.meta.get(GRAD_ENABLED, True)))
        except onednn_rnn.NotModelled as exc:
            raise KernelNotModelled(str(exc)) from exc
    return storage_slack(target, [_val(a) for a in node.args], node.meta.get("val"), t)


def storage_slack(target: Any, operands: Sequence[Any], out: Any, t: Any) -> int:
    """:func:`kernel_storage_slack` for a call of ``target`` on ``operands`` that returned ``out``
    (``t`` one of its tensors), wherever the call is seen (a graph node, a generated program's
    fallback call)."""
    if not isinstance(target, torch._ops.OpOverload):
        return 0
    entry = STORAGE_SLACK.get(target.overloadpacket.__name__)
    slack = entry(target, operands, out, t) if entry is not None else 0
    if slack and isinstance(t, torch.Tensor):
        # an entry counts beyond the result's own elements; a value that already holds the kernel's storage
        # (a data-dependent result remade from the concrete trace) needs only what is still missing
        storage, elements = t.untyped_storage().nbytes(), _nbytes(t)
        held = storage - elements if isinstance(storage, int) and isinstance(elements, int) else 0  # symbolic: 0
        slack = max(slack - max(held, 0), 0)
    return slack


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


def _argument(target: torch._ops.OpOverload, operands: Sequence[Any], name: str) -> Any:
    """The operand ``name`` of ``target``'s schema (overloads place it differently)."""
    for i, a in enumerate(target._schema.arguments):
        if a.name == name:
            return operands[i] if i < len(operands) else a.default_value
    raise KeyError(f"{target} has no argument {name!r}")


def _val(arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_val(a) for a in arg)
    return arg


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


# --------------------------------------------------------------------------- elementwise and reductions


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


# --------------------------------------------------------------------------- sorting, selection, reductions


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


# --------------------------------------------------------------------------- linalg: info checks, LU and Cholesky


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


# --------------------------------------------------------------------------- convolution


@dataclass(frozen=True)
class ConvGeometry:
    """One group of a convolution, as ATen's native kernels see it (conv1d as conv2d)."""

    batch: int
    groups: int
    c_in: int  # per group
    c_out: int  # per group
    kernel: tuple[int, ...]
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    unit: bool  # 1x1 kernel, stride 1, no padding: no im2col
    itemsize: int

    @classmethod
    def of(cls, x: torch.Tensor, weight: torch.Tensor, out_spatial: Sequence[int], stride: Sequence[int],
           padding: Sequence[int], groups: int) -> ConvGeometry:
        kernel = tuple(int(k) for k in weight.shape[2:])
        unit = all(k == 1 for k in kernel) and all(s == 1 for s in stride) and not any(padding)
        return cls(int(x.shape[0]), groups, int(weight.shape[1]), int(weight.shape[0]) // groups, kernel,
                   tuple(int(d) for d in x.shape[2:]), tuple(int(d) for d in out_spatial), unit, x.element_size())

    def columns(self, samples: int) -> int:
        """The im2col buffer for ``samples`` batch elements (one group's input channels)."""
        return samples * self.c_in * math.prod(self.kernel) * math.prod(self.out_spatial) * self.itemsize

    def all_group_columns(self) -> int:
        """``Slow3d``'s columns (``slow_conv3d_forward_out_cpu``'s ``finput``): the whole batch over every
        input channel, ``groups x C_in/groups`` rows per kernel position; the kernel handles groups itself."""
        return self.groups * self.columns(self.batch)

    def channel_slice(self, channels: int, spatial: Sequence[int]) -> int:
        """A group's slice of an NC... tensor made contiguous: a copy unless the batch is 1."""
        return 0 if self.batch == 1 else self.batch * channels * math.prod(spatial) * self.itemsize


def _conv_backend(x: torch.Tensor, weight: torch.Tensor, bias: Any, stride: Sequence[int], padding: Sequence[int],
                  dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                  groups: int) -> tuple[str, torch.memory_format]:
    """The ``ConvBackend`` ATen's dispatcher picks for these operands under :func:`reference_kernels`,
    and the memory format that backend makes its operands contiguous in."""
    with reference_kernels():
        backend = torch._C._select_conv_backend(
            x, weight, bias, list(stride), list(padding), list(dilation), bool(transposed),
            list(output_padding), int(groups),
        )
        return str(backend.name), torch._C._conv_determine_backend_memory_format(x, weight, backend)


def _transposed_columns(x: torch.Tensor, weight: torch.Tensor, samples: int) -> int:
    """A transposed convolution's columns: ``C_out x prod(kernel)`` rows per input position."""
    return (samples * int(weight.shape[1]) * math.prod(int(k) for k in weight.shape[2:])
            * math.prod(int(d) for d in x.shape[2:]) * x.element_size())


def _transposed_input_slice(x: torch.Tensor, weight: torch.Tensor, groups: int) -> int:
    """A group's input channels of a transposed convolution (``C_in / groups``, the weight's first
    dimension split), made contiguous: a copy unless the batch is 1."""
    if groups == 1 or int(x.shape[0]) == 1:
        return 0
    spatial = math.prod(int(d) for d in x.shape[2:])
    return int(x.shape[0]) * (int(weight.shape[0]) // groups) * spatial * x.element_size()


def _grouped(workspace: int, copies: int, outputs: int, groups: int) -> int:
    """A native kernel without group support runs once per group on contiguous slices, then
    concatenates: at the last group, the earlier groups' results, the slices, the workspace and
    that group's results are alive; then every group's results beside the concatenated ones."""
    return workspace if groups == 1 else max(copies + workspace, outputs)


def convolution(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``aten.convolution`` on ATen's native CPU kernels, by the ``ConvBackend`` ATen selects:

    - ``Slow2d``/``Slow3d`` (im2col + GEMM): a columns buffer of ``batch x C_in/groups x
      prod(kernel) x prod(output spatial)`` elements (``Slow3d``: over all ``C_in`` channels, every
      group's rows in one buffer); none for a 1x1 kernel with stride 1 and no padding, which
      multiplies the input directly.
    - ``Empty`` (a batch of 0, or no channels): nothing beyond the empty output
      (Convolution.cpp ``_convolution``: ``input * weight_view[0]`` on no elements).
    - ``SlowDilated2d``/``SlowDilated3d``: columns for one batch element at a time.
    - ``NnpackSpatial`` (batch >= 16): nothing through the allocator but a zero bias of
      ``C_out`` elements when the convolution has none.
    - ``groups > 1`` (not ``Slow3d``, which handles groups itself): one run per group on a
      contiguous copy of its input channels, then ``cat`` (see :func:`_grouped`).
    - an input or weight not laid out as the backend computes (contiguous, or channels-last
      when either is channels-last) is copied into that layout first, alive for the op.
    """
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = operands[:9]
    if not isinstance(out, torch.Tensor):
        return 0
    backend, layout = _conv_backend(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if backend == "Empty":
        return 0  # nothing to convolve: ``input * weight_view[0]`` on no elements, viewed as the output
    geo = ConvGeometry.of(x, weight, out.shape[2:], stride, padding, groups)
    if backend == "Slow2d":
        workspace = 0 if geo.unit else geo.columns(geo.batch)
    elif backend == "Slow3d":
        workspace = 0 if geo.unit else geo.all_group_columns()
    elif backend in ("SlowDilated2d", "SlowDilated3d"):
        workspace = geo.columns(1)
    elif backend == "NnpackSpatial":
        workspace = geo.c_out * 4 if bias is None else 0
    elif backend in ("SlowTranspose2d", "SlowTranspose3d"):
        # col2im from columns of C_out x prod(kernel) x prod(input spatial) (per group: the weight's
        # second dimension): the whole batch at once in 2d; one sample at a time in 3d, beside a row
        # of ones over the output's positions for the bias
        if backend == "SlowTranspose2d":
            workspace = _transposed_columns(x, weight, geo.batch)
        else:
            workspace = _transposed_columns(x, weight, 1) + (
                math.prod(geo.out_spatial) * geo.itemsize if bias is not None else 0)
        dense = _dense_copies(layout, x, weight)
        return dense + _grouped(workspace, _transposed_input_slice(x, weight, groups), _nbytes(out), groups)
    else:
        raise KernelNotModelled(f"convolution on ATen's {backend} backend is not in the transient table")
    dense = _dense_copies(layout, x, weight)
    if backend == "Slow3d":
        return dense + workspace
    return dense + _grouped(workspace, geo.channel_slice(geo.c_in, geo.in_spatial), _nbytes(out), groups)


def convolution_backward(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``aten.convolution_backward`` on the native CPU kernels (``output_mask`` says which of
    grad input, weight and bias are computed):

    - ``Slow2d``: the columns buffer of the whole batch, only for the weight's gradient (and
      not for a 1x1, stride 1, unpadded kernel); the input's gradient needs none.
    - ``Slow3d``: the columns buffer of the whole batch (all ``C_in`` channels) for either
      gradient, one at a time.
    - ``SlowDilated2d``/``SlowDilated3d``, and ``NnpackSpatial`` (NNPACK has no backward: ATen
      runs the dilated kernel): NaiveDilatedConvolution.cpp ``slow_conv_dilated_all_cpu_template``
      keeps one sample's columns (``C_in/groups x prod(kernel)`` by ``prod(output spatial)``)
      for the whole batch loop when either gradient is asked for, plus ``grad_output_n.sum(dims)``
      (``C_out`` elements, freed by ``grad_bias +=``) per sample for the bias's gradient.
    - ``Empty`` (a batch of 0): ``zeros_like`` the input and weight, ``zeros`` the bias: outputs only.
    - ``groups > 1``: per group, contiguous copies of that group's grad-output and input
      channels, then one ``cat`` per gradient (see :func:`_grouped`).
    - a grad-output, input or weight not in the backend's layout is copied into it first.
    """
    grad_out, x, weight, _bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask = (
        operands[:11])
    backend, layout = _conv_backend(x, weight, None, stride, padding, dilation, transposed, output_padding, groups)
    if backend == "Empty":
        return 0  # ``zeros_like`` the input and weight, ``zeros`` the bias: outputs only
    geo = ConvGeometry.of(x, weight, grad_out.shape[2:], stride, padding, groups)
    want_input, want_weight, want_bias = (bool(m) for m in mask)
    if backend == "Slow2d":
        workspace = geo.columns(geo.batch) if want_weight and not geo.unit else 0
    elif backend == "Slow3d":
        workspace = geo.all_group_columns() if want_input or want_weight else 0
    elif backend in ("SlowDilated2d", "SlowDilated3d", "NnpackSpatial"):
        workspace = (geo.columns(1) if want_input or want_weight else 0) + (
            geo.c_out * geo.itemsize if want_bias else 0)
    elif backend in ("SlowTranspose2d", "SlowTranspose3d"):
        # one sample's columns, for either gradient, one at a time
        workspace = _transposed_columns(x, weight, 1) if want_input or want_weight else 0
        dense = _dense_copies(layout, grad_out, x, weight)
        if groups == 1:
            return dense + workspace
        outputs = sum(_nbytes(t) for t in out) if isinstance(out, (list, tuple)) else _nbytes(out)
        copies = _transposed_input_slice(x, weight, groups) + geo.channel_slice(int(weight.shape[1]),
                                                                                grad_out.shape[2:])
        return dense + _grouped(workspace, copies, outputs, groups)
    else:
        raise KernelNotModelled(f"convolution_backward on ATen's {backend} backend is not in the transient table")
    outputs = sum(_nbytes(t) for t in out) if isinstance(out, (list, tuple)) else _nbytes(out)
    copies = geo.channel_slice(geo.c_in, geo.in_spatial) + geo.channel_slice(geo.c_out, geo.out_spatial)
    dense = _dense_copies(layout, grad_out, x, weight)
    if backend == "Slow3d":
        return dense + workspace
    return dense + _grouped(workspace, copies, outputs, groups)


def _dense_copies(layout: torch.memory_format, *tensors: Any) -> int:
    """What ``.contiguous(layout)`` copies of these operands cost."""
    return sum(_nbytes(t) for t in tensors if isinstance(t, torch.Tensor) and not t.is_contiguous(memory_format=layout))


def _flattens_as_view(t: torch.Tensor) -> bool:
    """Whether ``t.reshape(-1)`` is a view: its non-unit dimensions are laid out back to back."""
    dims = [(size, stride) for size, stride in zip(t.shape, t.stride()) if size != 1]
    return all(stride == dims[i + 1][1] * dims[i + 1][0] for i, (_, stride) in enumerate(dims[:-1]))


# --------------------------------------------------------------------------- normalization


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


def _acc_itemsize(x: torch.Tensor) -> int:
    return 4 if x.dtype in REDUCED_FLOATS else x.element_size()


# --------------------------------------------------------------------------- embedding and scans


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


def im2col(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``im2col`` (``nn.Unfold``) makes its result as ``empty_like(input)`` and resizes it to the columns:
    growing it, the input-sized storage is alive while the new one is made (the common case, a kernel of
    more than one element); unfolding reads ``input.contiguous()``, a copy where the input is not."""
    x = operands[0]
    copy = 0 if x.is_contiguous() else _nbytes(x)
    grows = isinstance(out, torch.Tensor) and _nbytes(out) > x.numel() * x.element_size()
    return copy + (x.numel() * x.element_size() if grows else 0)


def im2col_storage(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any, t: Any) -> int:
    """``im2col``'s result, resized down from ``empty_like(input)`` (columns fewer than the input's
    elements: a stride past the kernel), keeps the input-sized storage."""
    x = operands[0]
    return max(x.numel() * x.element_size() - _nbytes(t), 0) if out is t else 0


def col2im(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``col2im`` (``nn.Fold``) folds from its columns as they are when contiguous, from a contiguous
    copy otherwise (columns made by a transpose)."""
    x = operands[0]
    return 0 if not isinstance(x, torch.Tensor) or x.is_contiguous() else _nbytes(x)


def col2im_storage(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any, t: Any) -> int:
    """``col2im`` (``nn.Fold``) allocates its result at the size of its columns and resizes it down
    in place: the result keeps that storage."""
    return max(_nbytes(operands[0]) - _nbytes(t), 0) if out is t else 0


#: interpolation taps per output position of the separable upsampling kernels
_TAPS = {"upsample_nearest1d": 1, "upsample_nearest3d": 1, "upsample_linear1d": 2, "upsample_trilinear3d": 2,
         "upsample_bicubic2d": 4, "_upsample_nearest_exact1d": 1, "_upsample_nearest_exact3d": 1}
#: the kernels that run channels-last on a multi-channel input (the ``nearest-exact`` one shares nearest's path)
_CHANNELS_LAST_UPSAMPLING = ("upsample_nearest2d", "upsample_bilinear2d", "_upsample_nearest_exact2d")


def upsample(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """Upsampling on CPU (UpSampleKernel.cpp; ``nearest-exact`` runs nearest's kernels with another
    source index).  ``nearest2d`` and ``bilinear2d`` with more than one
    channel run channels-last: a channels-last copy of the input and a channels-last result,
    copied into the NCHW one.  The separable kernels (1d, 3d, bicubic) precompute, per output
    dimension, each tap's int64 source index and its weight (the input's dtype) for every output
    position along that dimension."""
    x = operands[0]
    name = target.overloadpacket.__name__
    if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
        return 0
    if name in _CHANNELS_LAST_UPSAMPLING:  # each copied unless already channels-last (an N x C x 1 x 1 input is)
        if x.dim() != 4 or int(x.shape[1]) <= 1:
            return 0
        return sum(_nbytes(t) for t in (x, out) if not t.is_contiguous(memory_format=torch.channels_last))
    taps = _TAPS.get(name, 0)
    return sum(taps * int(d) * (8 + x.element_size()) for d in out.shape[2:])


def _area_scale(in_size: int, out_size: int, align_corners: bool, scale: Any, dtype: torch.dtype) -> torch.Tensor:
    """``area_pixel_compute_scale`` (UpSample.h) in the kernel's scalar type."""
    if align_corners:
        return (torch.tensor(in_size - 1, dtype=dtype) / (out_size - 1) if out_size > 1
                else torch.tensor(0.0, dtype=dtype))
    if scale is not None and scale > 0:
        return torch.tensor(1.0 / scale, dtype=torch.float64).to(dtype)
    return torch.tensor(in_size, dtype=dtype) / out_size


def upsample_aa(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``_upsample_bilinear2d_aa``/``_upsample_bicubic2d_aa`` on floats (UpSampleKernel.cpp
    ``separable_upsample_generic_Nd_kernel_impl``): one pass per resized dimension, the width first;
    with both resized, the width pass writes an ``N x C x H_in x W_out`` temporary, alive to the end.  Each
    pass computes (``_compute_index_ranges_weights``) three int64 index rows and an int64 weight index
    per output position, and ``max_interp_size = ceil(support) * 2 + 1`` weights per position, ``support``
    being ``interp_size / 2`` (2: bilinear, 4: bicubic) times the scale where that is at least 1."""
    x = operands[0]
    if not isinstance(out, torch.Tensor) or x.dtype not in (torch.float32, torch.float64) or x.dim() != 4:
        raise KernelNotModelled(f"{target} on {getattr(x, 'dtype', x)} is not in the transient table")
    taps = 4 if "bicubic" in target.overloadpacket.__name__ else 2
    align = bool(_argument(target, operands, "align_corners"))
    scales = (_argument(target, operands, "scales_h"), _argument(target, operands, "scales_w"))

    def ranges(dim: int) -> int:
        in_size, out_size = int(x.shape[dim]), int(out.shape[dim])
        scale = _area_scale(in_size, out_size, align, scales[dim - 2], x.dtype)
        support = (scale.double() * (taps * 0.5)).to(x.dtype) if float(scale) >= 1.0 else torch.tensor(taps * 0.5)
        width = math.ceil(float(support)) * 2 + 1
        return 4 * 8 * out_size + out_size * width * x.element_size()

    resized = [d for d in (3, 2) if int(x.shape[d]) != int(out.shape[d])]
    if len(resized) < 2:
        return max((ranges(d) for d in resized), default=0)
    temp = int(x.shape[0]) * int(x.shape[1]) * int(x.shape[2]) * int(out.shape[3]) * x.element_size()
    return temp + max(ranges(3), ranges(2))


def clamp_casts(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``clamp``/``clamp_min``/``clamp_max`` with tensor bounds (TensorIterator): a bound of another dtype
    than the result's is cast into a temporary of its own shape (an int32 bound beside a float32 input)."""
    if not isinstance(out, torch.Tensor):
        return 0
    return sum(t.numel() * out.dtype.itemsize for t in operands[1:3]
               if isinstance(t, torch.Tensor) and t.dtype != out.dtype)


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


def reduced_loss_storage(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any, t: Any) -> int:
    """A reduced loss whose kernel computed it in an input-sized buffer and resized that to a
    scalar in place: the scalar keeps the whole buffer (``mse_loss``, ``smooth_l1_loss``,
    ``soft_margin_loss``, ``binary_cross_entropy``)."""
    name = target.overloadpacket.__name__
    position = 3 if name == "binary_cross_entropy" else 2
    if out is not t or _reduction(operands, position) not in (MEAN, SUM):
        return 0
    return max(_nbytes(operands[0]) - _nbytes(t), 0)


def cumsum(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """``cumsum`` into another dtype (a bool mask summed as int64) scans a cast copy of the input."""
    x = operands[0]
    return x.numel() * out.element_size() if isinstance(out, torch.Tensor) and out.dtype != x.dtype else 0


# --------------------------------------------------------------------------- data-dependent sizes

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


# --------------------------------------------------------------------------- FFT (MKL)


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


# --------------------------------------------------------------------------- attention


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


# --------------------------------------------------------------------------- oneDNN's LSTM (users' kernels)


_LSTM_MODE = 2  # ideep::rnn_kind::LSTM, the mode aten::lstm passes (the only RNN ATen runs on oneDNN)


def _lstm_layer(operands: Sequence[Any], mode_at: int) -> onednn_rnn.LstmLayer:
    x, w_ih, hx = operands[0], operands[1], operands[5]
    if int(operands[mode_at]) != _LSTM_MODE or x.dtype != torch.float32:
        raise onednn_rnn.NotModelled(f"mkldnn_rnn_layer in mode {operands[mode_at]} on {x.dtype} is not modelled")
    return onednn_rnn.layer_of(x, w_ih, hx)


def mkldnn_rnn_workspace(operands: Sequence[Any], out: Any, t: Any, grad_enabled: bool) -> int:
    """``mkldnn_rnn_layer``'s fourth output, the workspace the backward reads: ``(0,)`` by its shape,
    ``workspace_desc().get_size()`` bytes when autograd records the op (none otherwise); see
    :meth:`conformance.models.onednn_rnn.LstmLayer.workspace`."""
    if not grad_enabled or not isinstance(out, (list, tuple)) or len(out) < 4 or out[3] is not t:
        return 0
    return _lstm_layer(operands, 9).workspace()


def mkldnn_rnn_layer(operands: Sequence[Any], out: Any, grad_enabled: bool) -> onednn_rnn.Bounds:
    """``mkldnn_rnn_layer`` (one LSTM layer and direction on oneDNN): the summed bias (``4H``
    float32), then, in training, the weights reordered for the reference GEMM and its
    scratchpad; in inference, the weights blocked for brgemm and its scratchpad, whose sizes
    depend on the vector ISA (the bounds: :mod:`conformance.models.onednn_rnn`)."""
    layer = _lstm_layer(operands, 9)
    bias = onednn_rnn.LSTM_GATES * layer.H * onednn_rnn.F32
    if grad_enabled:
        return onednn_rnn.Bounds(0, 0) + bias + layer.training_weights() + layer.training_scratchpad(layer.N < 128)
    scratchpad = layer.inference_scratchpad()
    bounds = layer.inference_weights() + scratchpad + bias
    return _this_cpu(torch.ops.aten.mkldnn_rnn_layer.default, operands, out, bounds, scratchpad.high - scratchpad.low)


def _this_cpu(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any, bounds: onednn_rnn.Bounds,
              per_thread: int) -> onednn_rnn.Bounds:
    """What ``target`` allocates on this CPU, where the bounds say it depends on the CPU: measured on
    stand-ins (the meter), within ``per_thread`` bytes that follow the calling thread's thread count (oneDNN's
    per-thread brgemm descriptors; the meter measures in a thread of its own), and within the bounds.  The
    bounds alone would leave a model on a CPU at their low end room to hide a leak (an AVX2 CPU blocks an
    LSTM's weights in 16 outputs where AVX-512 blocks them in 32: 5120 B of mod-LSTM-infer's 33224 B peak,
    more than a 4 KiB scratch buffer)."""
    if bounds.low == bounds.high or not _METERS:
        return bounds
    try:
        measured = measured_on_stand_ins(target, operands, out)
    except KernelNotModelled:
        return bounds
    if measured not in onednn_rnn.Bounds(bounds.low - per_thread, bounds.high + per_thread):
        return bounds  # not what the kernel's layouts allow: the measurement is not trusted over them
    return onednn_rnn.Bounds(max(bounds.low, measured - per_thread), min(bounds.high, measured + per_thread))


def mkldnn_rnn_layer_backward(operands: Sequence[Any], out: Any, grad_enabled: bool) -> onednn_rnn.Bounds:
    """``mkldnn_rnn_layer_backward``: zeros for each output gradient autograd did not give (the
    output's, ``hy``'s, ``cy``'s) or a contiguous copy of one that is not contiguous, the summed
    bias, a clone of ``cx`` sharing ``hx``'s storage, then the weights and gradients in oneDNN's
    layouts and the scratchpad (:meth:`conformance.models.onednn_rnn.LstmLayer.backward_weights`)."""
    layer = _lstm_layer(operands, 14)
    hx, cx, output = operands[5], operands[6], operands[7]
    grads = 0
    for given, like in zip(operands[10:13], (output, hx, cx)):
        if given is None or not given.is_contiguous():
            grads += _nbytes(like)
    shared = _nbytes(cx) if isinstance(cx, torch.Tensor) and _same_storage(hx, cx) else 0
    bias = onednn_rnn.LSTM_GATES * layer.H * onednn_rnn.F32
    inner = grads + bias + shared + layer.backward_weights() + layer.training_scratchpad(True)
    # the clone of the bias gradient (an output) is made after all of that is freed
    return onednn_rnn.Bounds(0, 0) + max(inner - bias, 0)


def _same_storage(a: Any, b: Any) -> bool:
    try:
        return bool(a.untyped_storage()._cdata == b.untyped_storage()._cdata)
    except Exception:  # a fake tensor without a storage to compare: none shared
        return False


OneDnnEntry = Callable[[Sequence[Any], Any, bool], onednn_rnn.Bounds]

#: oneDNN's kernels, which run only where oneDNN is on (the users' kernels, not the reference executor's)
ONEDNN_TABLE: dict[str, OneDnnEntry] = {
    "mkldnn_rnn_layer": mkldnn_rnn_layer,
    "mkldnn_rnn_layer_backward": mkldnn_rnn_layer_backward,
}


Entry = Callable[[torch._ops.OpOverload, Sequence[Any], Any], int]

#: LAPACK-backed kernels whose workspace LAPACK itself sizes: the kernel asks the routine (``lwork = -1``)
#: how much ``work`` / ``rwork`` / ``iwork`` it wants, and the answer is the library's (OpenBLAS's or
#: MKL's blocking, ``ilaenv``), not a function of the shapes this table could write down.  Their entry
#: is a measurement of the kernel on stand-ins of the same shapes, strides and dtypes, made once per
#: layout by the meter :mod:`conformance.probes` registers (the workspace depends on the layout and the
#: flags, not on the values: tests/test_transients.py measures each on other values than the meter's).
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
#: sorted sequences; zero indices), made once per layout; tests/test_transients.py holds each to the kernel
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


#: op name (the overload packet's) -> its entry.
TABLE: dict[str, Entry] = {
    **{name: binary_elementwise for name in ELEMENTWISE_BINARY_OPS},
    "mean": mean,
    "sum": sum_,
    "convolution": convolution,
    "convolution_backward": convolution_backward,
    "native_batch_norm": batch_norm,
    "_batch_norm_with_update": batch_norm_with_update,
    "_batch_norm_no_update": batch_norm_no_update,
    "_native_batch_norm_legit": batch_norm,  # what _native_batch_norm_legit_no_training's body calls (torch 2.8)
    "native_batch_norm_backward": batch_norm_backward,
    "native_layer_norm": layer_norm,
    "native_layer_norm_backward": layer_norm_backward,
    "_weight_norm_interface": weight_norm,
    "_weight_norm_interface_backward": weight_norm_backward,
    "native_group_norm_backward": group_norm_backward,
    "embedding": embedding,
    "embedding_dense_backward": embedding_dense_backward,
    "cumsum": cumsum,
    **dict.fromkeys(("mse_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss", "binary_cross_entropy",
                     "binary_cross_entropy_with_logits"), pointwise_loss),
    **dict.fromkeys(("soft_margin_loss_backward", "binary_cross_entropy_backward"), pointwise_loss_backward),
    **dict.fromkeys(("multilabel_margin_loss_forward", "multilabel_margin_loss_backward"), multilabel_margin),
    "im2col": im2col,
    "col2im": col2im,
    **dict.fromkeys((*_CHANNELS_LAST_UPSAMPLING, *_TAPS), upsample),
    "rrelu_with_noise": rrelu_eval,
    "abs": complex_to_real,
    **dict.fromkeys(("clamp", "clamp_min", "clamp_max"), clamp_casts),
    "linalg_vector_norm": vector_norm,
    "repeat_interleave": repeat_interleave_counts,
    "angle": complex_to_real,
    "_embedding_bag": embedding_bag,
    "_embedding_bag_forward_only": embedding_bag,
    "_embedding_bag_backward": embedding_bag_backward,
    "_scaled_dot_product_flash_attention_for_cpu": flash_attention,
    "_scaled_dot_product_flash_attention_for_cpu_backward": flash_attention_backward,
    "masked_select": masked_select,
    "_ctc_loss_backward": ctc_loss_backward,
    "_fft_r2c": fft_r2c,
    "_fft_c2c": fft_c2c,
    "_fft_c2r": fft_c2r,
    "sort": sort,
    "kthvalue": kthvalue,
    "median": median,
    "nanmedian": median,
    "std": std_var,
    "var": std_var,
    "logsumexp": logsumexp,
    "deg2rad": scalar_multiple,
    "rad2deg": scalar_multiple,
    "pow": pow_scalar,
    "all": all_any,
    "any": all_any,
    "count_nonzero": count_nonzero,
    "roll": roll,
    **dict.fromkeys(("gather", "scatter", "scatter_add"), scatter_gather),
    "histc": histc,
    "native_dropout_backward": native_dropout_backward,
    "renorm": renorm,
    "_chunk_cat": chunk_cat,
    "scatter_reduce": scatter_reduce,
    "lu_unpack": lu_unpack,
    "segment_reduce": segment_reduce,
    "cholesky": cholesky,
    "cholesky_inverse": cholesky_inverse,
    "_cholesky_solve_helper": cholesky_solve_helper,  # cholesky_solve's body: broadcast views, then this
    "linalg_cholesky_ex": cholesky_ex,
    "linalg_lu_factor_ex": lu_factor_ex,
    "linalg_lu_solve": lu_solve,
    "_linalg_solve_ex": solve_ex,
    "linalg_inv_ex": inv_ex,
    "_linalg_det": linalg_det,
    "_linalg_slogdet": linalg_slogdet,
    "linalg_lu": linalg_lu,
    "_upsample_bilinear2d_aa": upsample_aa,
    "_upsample_bicubic2d_aa": upsample_aa,
    **dict.fromkeys(LAPACK_QUERIED | SUB_OP_KERNELS, measured_on_stand_ins),
}

#: outputs whose kernel allocates a larger storage than their shape (see :func:`kernel_storage_slack`)
STORAGE_SLACK: dict[str, Callable[[torch._ops.OpOverload, Sequence[Any], Any, Any], int]] = {
    "_embedding_bag": embedding_bag_offset2bag,
    "_embedding_bag_forward_only": embedding_bag_offset2bag,
    "_embedding_bag_backward": sparse_bag_gradient_values,
    **dict.fromkeys(("mse_loss", "smooth_l1_loss", "soft_margin_loss", "binary_cross_entropy"), reduced_loss_storage),
    "col2im": col2im_storage,
    "im2col": im2col_storage,
    "unique_consecutive": unique_consecutive_storage,
}
