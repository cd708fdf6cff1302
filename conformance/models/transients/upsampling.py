"""Upsampling kernels: the channels-last copies and per-tap index and weight buffers, the
anti-aliased kernels' weights."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.transients.common import KernelNotModelled, _argument, _nbytes

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

