"""oneDNN's LSTM layer (the users' kernels, not the reference executor's): its workspace, whose
bytes depend on the CPU (:class:`~conformance.models.onednn_rnn.Bounds`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from conformance.models import onednn_rnn
from conformance.models.transients.common import KernelNotModelled, _nbytes
from conformance.models.transients.measured import _METERS, measured_on_stand_ins

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

