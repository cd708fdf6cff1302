"""The kernel transient table: bytes an eager CPU kernel allocates inside one op.

The ``eager`` backend must equal the lifetime model byte for byte, and some ATen CPU
kernels allocate workspace on top of their outputs (a wrapped Python scalar, a
float32 copy of a bfloat16 input, the im2col buffer of a convolution), freed before
the op returns.  That workspace is part of the model, not a tolerance: each entry
here says what the kernel allocates and why, and tests/transients/ and
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

The entries live one module per kernel family (``elementwise``, ``reductions``, ``linalg``,
``convolution``, ``normalization``, ``embedding``, ``losses``, ``upsampling``, ``data_dependent``,
``fft``, ``attention``, ``lstm``; ``measured`` for kernels measured on stand-ins, ``common`` for what
they share), each held to its measurements in ``tests/transients/test_<family>.py``.  This module
holds the tables that name them and the functions the models call; every public name of the
families is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten

from conformance.models import composite, onednn_rnn
from conformance.models.transients.attention import flash_attention, flash_attention_backward
from conformance.models.transients.common import (
    REDUCED_FLOATS,
    Entry,
    KernelNotModelled,
    _nbytes,
    _val,
    reference_kernels,
)
from conformance.models.transients.convolution import (
    ConvGeometry,
    col2im,
    col2im_storage,
    convolution,
    convolution_backward,
    im2col,
    im2col_storage,
)
from conformance.models.transients.data_dependent import (
    GRAIN_SIZE,
    ctc_loss_backward,
    masked_select,
    unique_consecutive_storage,
)
from conformance.models.transients.elementwise import (
    COMPARISON_OPS,
    ELEMENTWISE_BINARY_OPS,
    binary_elementwise,
    clamp_casts,
    complex_to_real,
    mean,
    rrelu_eval,
    sum_,
)
from conformance.models.transients.embedding import (
    embedding,
    embedding_bag,
    embedding_bag_backward,
    embedding_bag_offset2bag,
    embedding_dense_backward,
    sparse_bag_gradient_values,
)
from conformance.models.transients.fft import fft_c2c, fft_c2r, fft_r2c
from conformance.models.transients.linalg import (
    cholesky,
    cholesky_ex,
    cholesky_inverse,
    cholesky_solve_helper,
    inv_ex,
    linalg_det,
    linalg_lu,
    linalg_slogdet,
    lu_factor_ex,
    lu_solve,
    lu_unpack,
    solve_ex,
)
from conformance.models.transients.losses import (
    MEAN,
    SUM,
    multilabel_margin,
    pointwise_loss,
    pointwise_loss_backward,
    reduced_loss_storage,
)
from conformance.models.transients.lstm import (
    OneDnnEntry,
    mkldnn_rnn_layer,
    mkldnn_rnn_layer_backward,
    mkldnn_rnn_workspace,
)
from conformance.models.transients.measured import (
    _METERS,
    LAPACK_QUERIED,
    MASK_INDEXED_KERNELS,
    MEASURED_WORKSPACE,
    SUB_OP_KERNELS,
    VALUE_DEPENDENT_KERNELS,
    WorkspaceMeter,
    depends_on_values,
    measured_on_stand_ins,
    register_workspace_meter,
)
from conformance.models.transients.normalization import (
    batch_norm,
    batch_norm_backward,
    batch_norm_no_update,
    batch_norm_with_update,
    group_norm_backward,
    layer_norm,
    layer_norm_backward,
    weight_norm,
    weight_norm_backward,
)
from conformance.models.transients.reductions import (
    all_any,
    chunk_cat,
    count_nonzero,
    cumsum,
    histc,
    kthvalue,
    logsumexp,
    median,
    native_dropout_backward,
    pow_scalar,
    renorm,
    repeat_interleave_counts,
    roll,
    scalar_multiple,
    scatter_gather,
    scatter_reduce,
    segment_reduce,
    sort,
    std_var,
    vector_norm,
)
from conformance.models.transients.upsampling import _CHANNELS_LAST_UPSAMPLING, _TAPS, upsample, upsample_aa

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


#: oneDNN's kernels, which run only where oneDNN is on (the users' kernels, not the reference executor's)
ONEDNN_TABLE: dict[str, OneDnnEntry] = {
    "mkldnn_rnn_layer": mkldnn_rnn_layer,
    "mkldnn_rnn_layer_backward": mkldnn_rnn_layer_backward,
}


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


__all__ = [
    "COMPARISON_OPS",
    "ELEMENTWISE_BINARY_OPS",
    "GRAD_ENABLED",
    "GRAIN_SIZE",
    "LAPACK_QUERIED",
    "MASK_INDEXED_KERNELS",
    "MEAN",
    "MEASURED_WORKSPACE",
    "ONEDNN_TABLE",
    "REDUCED_FLOATS",
    "STORAGE_SLACK",
    "SUB_OP_KERNELS",
    "SUM",
    "TABLE",
    "VALUE_DEPENDENT_KERNELS",
    "ConvGeometry",
    "Entry",
    "KernelNotModelled",
    "OneDnnEntry",
    "WorkspaceMeter",
    "all_any",
    "batch_norm",
    "batch_norm_backward",
    "batch_norm_no_update",
    "batch_norm_with_update",
    "binary_elementwise",
    "cholesky",
    "cholesky_ex",
    "cholesky_inverse",
    "cholesky_solve_helper",
    "chunk_cat",
    "clamp_casts",
    "col2im",
    "col2im_storage",
    "complex_to_real",
    "convolution",
    "convolution_backward",
    "count_nonzero",
    "ctc_loss_backward",
    "cumsum",
    "depends_on_values",
    "embedding",
    "embedding_bag",
    "embedding_bag_backward",
    "embedding_bag_offset2bag",
    "embedding_dense_backward",
    "fft_c2c",
    "fft_c2r",
    "fft_r2c",
    "flash_attention",
    "flash_attention_backward",
    "group_norm_backward",
    "histc",
    "im2col",
    "im2col_storage",
    "inv_ex",
    "kernel_storage_slack",
    "kernel_transient_bounds",
    "kernel_transient_bytes",
    "kthvalue",
    "layer_norm",
    "layer_norm_backward",
    "linalg_det",
    "linalg_lu",
    "linalg_slogdet",
    "logsumexp",
    "lu_factor_ex",
    "lu_solve",
    "lu_unpack",
    "masked_select",
    "mean",
    "measured_on_stand_ins",
    "median",
    "mkldnn_rnn_layer",
    "mkldnn_rnn_layer_backward",
    "mkldnn_rnn_workspace",
    "multilabel_margin",
    "native_dropout_backward",
    "op_workspace",
    "pointwise_loss",
    "pointwise_loss_backward",
    "pow_scalar",
    "reduced_loss_storage",
    "reference_kernels",
    "register_workspace_meter",
    "renorm",
    "repeat_interleave_counts",
    "roll",
    "rrelu_eval",
    "scalar_multiple",
    "scatter_gather",
    "scatter_reduce",
    "segment_reduce",
    "solve_ex",
    "sort",
    "sparse_bag_gradient_values",
    "std_var",
    "storage_slack",
    "sum_",
    "unique_consecutive_storage",
    "upsample",
    "upsample_aa",
    "vector_norm",
    "weight_norm",
    "weight_norm_backward",
]
