"""ATen's native CPU convolutions (oneDNN off: :func:`reference_kernels`): the columns buffers
of im2col and its inverse, transposed and grouped forms, their backward."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import KernelNotModelled, _dense_copies, _nbytes, reference_kernels


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

