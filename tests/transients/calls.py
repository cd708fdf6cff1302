"""The calls that measure the kernel transient table, one ``OpCall`` per shape and layout an entry's
branches need, and the measurement every family's tests share.

Each call runs one ATen op on real tensors inside :class:`CpuAllocatorProbe` (on the kernels the
reference executor uses); its peak must be exactly its outputs' bytes plus what
:func:`kernel_transient_bytes` says for the node traced from the same call.  Shapes are chosen to cross
each entry's branches (grouped and dilated convolutions, NNPACK's batch of 16, the NC11 batch-norm path,
flash attention's block sizes at 16, 200 and 800 tokens, gradients laid out as the kernel reads them or
not).  :func:`family_of` files each call under the module of ``conformance.models.transients`` whose
entry it exercises; ``test_<family>.py`` measures that family's calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from conformance.api.step import trace_graph
from conformance.models.transients import (
    STORAGE_SLACK,
    TABLE,
    kernel_transient_bytes,
    reference_kernels,
)
from conformance.probes.cpu import CpuAllocatorProbe

aten = torch.ops.aten


@dataclass(frozen=True)
class OpCall:
    name: str
    op: str  # the table entry it exercises
    fn: Callable[..., Any]
    make_args: Callable[[], tuple[Any, ...]]


def _conv(stride: int = 1, pad: int = 1, dil: int = 1, groups: int = 1) -> Callable[..., Any]:
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        n = x.dim() - 2
        return aten.convolution.default(x, w, b, [stride] * n, [pad] * n, [dil] * n, False, [0] * n, groups)

    return f


def _conv_backward(stride: int = 1, pad: int = 1, dil: int = 1, groups: int = 1,
                   mask: tuple[bool, bool, bool] = (True, True, True)) -> Callable[..., Any]:
    def f(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> Any:
        n = x.dim() - 2
        return aten.convolution_backward.default(g, x, w, [w.shape[0]], [stride] * n, [pad] * n, [dil] * n, False,
                                                 [0] * n, groups, list(mask))

    return f


def _bn(train: bool) -> Callable[..., Any]:
    def f(x: Any, w: Any, b: Any, rm: Any, rv: Any) -> Any:
        return aten.native_batch_norm.default(x, w, b, rm, rv, train, 0.1, 1e-5)  # updates rm, rv in training

    return f


def _bn_legit(train: bool) -> Callable[..., Any]:
    def f(x: Any, w: Any, b: Any, rm: Any, rv: Any) -> Any:
        return aten._native_batch_norm_legit.default(x, w, b, rm, rv, train, 0.1, 1e-5)

    return f


def _bn_legit_no_stats(train: bool) -> Callable[..., Any]:
    def f(x: Any, w: Any, b: Any) -> Any:
        return aten._native_batch_norm_legit.no_stats(x, w, b, train, 0.1, 1e-5)

    return f


def _bn_no_training(x: Any, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    return aten._native_batch_norm_legit_no_training.default(x, w, b, rm, rv, 0.1, 1e-5)


def _bn_backward(train: bool, mask: tuple[bool, ...]) -> Callable[..., Any]:
    def f(g: Any, x: Any, w: Any, rm: Any, rv: Any, sm: Any, si: Any) -> Any:
        return aten.native_batch_norm_backward.default(g, x, w, rm, rv, sm, si, train, 1e-5, list(mask))

    return f


def _ln_backward(mask: tuple[bool, ...]) -> Callable[..., Any]:
    def f(g: Any, x: Any, mean: Any, rstd: Any, w: Any, b: Any) -> Any:
        return aten.native_layer_norm_backward.default(g, x, [x.shape[-1]], mean, rstd, w, b, list(mask))

    return f


def _grad_for(conv: Callable[..., Any], x: torch.Tensor, w: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
    out = conv(x, w, None)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else torch.randn_like(out)


CONVS = {  # name: (input shape, weight shape, conv options)
    "3x3": ((2, 3, 16, 16), (8, 3, 3, 3), {}),
    "3x3-batch1": ((1, 3, 16, 16), (8, 3, 3, 3), {}),
    "strided": ((4, 3, 16, 16), (8, 3, 3, 3), {"stride": 2}),
    "1x1": ((2, 16, 8, 8), (8, 16, 1, 1), {"pad": 0}),
    "1x1-strided": ((2, 16, 8, 8), (8, 16, 1, 1), {"pad": 0, "stride": 2}),
    "dilated": ((2, 3, 16, 16), (8, 3, 3, 3), {"dil": 2, "pad": 2}),
    "grouped": ((2, 8, 8, 8), (8, 2, 3, 3), {"groups": 4}),
    "grouped-batch1": ((1, 8, 8, 8), (8, 2, 3, 3), {"groups": 4}),
    "depthwise": ((2, 8, 8, 8), (8, 1, 3, 3), {"groups": 8}),
    "conv1d": ((2, 4, 16), (8, 4, 3), {}),
    "conv3d": ((2, 3, 4, 6, 6), (8, 3, 3, 3, 3), {}),
    "dilated3d-batch1": ((1, 1, 5, 5, 5), (1, 1, 3, 3, 3), {"dil": 2, "pad": 2}),  # OpInfo conv3d's 5th sample
    "dilated3d-batch1-channels": ((1, 3, 6, 5, 4), (2, 3, 2, 2, 2), {"dil": 2, "pad": 1}),
    "dilated3d-batch2": ((2, 2, 5, 5, 5), (3, 2, 3, 3, 3), {"dil": 2, "pad": 2}),  # one sample's columns, reused
    "dilated3d-grouped": ((2, 4, 5, 5, 5), (4, 2, 3, 3, 3), {"dil": 2, "pad": 2, "groups": 2}),
    "conv3d-grouped": ((2, 4, 6, 6, 6), (4, 2, 3, 3, 3), {"groups": 2}),  # Slow3d: every group's columns at once
    "zero-batch": ((0, 3, 8, 8), (8, 3, 3, 3), {}),  # ATen's Empty backend
    "zero-batch-conv1d": ((0, 4, 16), (8, 4, 3), {}),
    "zero-batch-3d-dilated": ((0, 2, 5, 5, 5), (3, 2, 3, 3, 3), {"dil": 2, "pad": 2}),
    "nnpack-batch16": ((16, 3, 8, 8), (8, 3, 3, 3), {}),
    "patchify": ((2, 3, 32, 32), (16, 3, 8, 8), {"stride": 8, "pad": 0}),
}


def _calls() -> list[OpCall]:
    calls: list[OpCall] = []
    for name, (xs, ws, opts) in CONVS.items():
        for bias in (True, False):
            calls.append(OpCall(f"conv-{name}-bias{int(bias)}", "convolution", _conv(**opts),
                                lambda xs=xs, ws=ws, bias=bias: (torch.randn(xs), torch.randn(ws),
                                                                 torch.randn(ws[0]) if bias else None)))
        for mask in ((True, True, True), (False, True, True), (True, False, False)):
            def args(xs: Any = xs, ws: Any = ws, opts: Any = opts) -> tuple[Any, ...]:
                x, w = torch.randn(xs), torch.randn(ws)
                return _grad_for(_conv(**opts), x, w), x, w

            calls.append(OpCall(f"conv-backward-{name}-{''.join('TF'[not m] for m in mask)}", "convolution_backward",
                                _conv_backward(mask=mask, **opts), args))
    calls.append(OpCall("conv-noncontiguous-input", "convolution", _conv(),
                        lambda: (torch.randn(2, 16, 16, 3).permute(0, 3, 1, 2), torch.randn(8, 3, 3, 3), None)))
    calls.append(OpCall("conv-backward-noncontiguous-grad", "convolution_backward",
                        _conv_backward(stride=8, pad=0, mask=(False, True, True)),
                        lambda: (torch.randn(2, 16, 4, 8)[..., ::2], torch.randn(2, 3, 32, 32),
                                 torch.randn(16, 3, 8, 8))))
    calls.append(OpCall("conv-backward-channels-last-grad", "convolution_backward",
                        _conv_backward(mask=(True, True, True)),
                        lambda: (torch.randn(2, 8, 8, 8).contiguous(memory_format=torch.channels_last),
                                 torch.randn(2, 3, 8, 8), torch.randn(8, 3, 3, 3))))

    def bn_args(shape: tuple[int, ...]) -> tuple[Any, ...]:
        c = shape[1]
        return torch.randn(shape), torch.randn(c), torch.randn(c), torch.randn(c), torch.rand(c) + 0.5

    for shape in ((2, 64, 8, 8), (2, 24, 4, 4), (1, 16, 1, 1), (2, 96, 1, 1), (8, 16, 1, 1), (8, 576, 1, 1),
                  (3, 1), (8, 5), (2, 16), (1, 7), (5, 3, 4)):
        for train in (False, True):
            if train and shape[0] == 1:
                continue
            calls.append(OpCall(f"batch-norm-{shape}-train{int(train)}", "native_batch_norm", _bn(train),
                                lambda shape=shape: bn_args(shape)))
            calls.append(OpCall(f"batch-norm-legit-{shape}-train{int(train)}", "_native_batch_norm_legit",
                                _bn_legit(train), lambda shape=shape: bn_args(shape)))
            if train:  # without running statistics, only training normalizes (eval crashes the kernel)
                calls.append(OpCall(f"batch-norm-legit-no-stats-{shape}", "_native_batch_norm_legit",
                                    _bn_legit_no_stats(train), lambda shape=shape: bn_args(shape)[:3]))
                calls.append(OpCall(f"batch-norm-with-update-{shape}", "_batch_norm_with_update",
                                    lambda x, w, b, rm, rv: aten._batch_norm_with_update.default(x, w, b, rm, rv,
                                                                                               0.1, 1e-5),
                                    lambda shape=shape: bn_args(shape)))
            else:  # composite (torch 2.8's eval graphs): its body calls _native_batch_norm_legit
                calls.append(OpCall(f"batch-norm-no-update-{shape}", "_batch_norm_no_update",
                                    lambda x, w, b, rm, rv: aten._batch_norm_no_update.default(x, w, b, rm, rv,
                                                                                             0.1, 1e-5),
                                    lambda shape=shape: bn_args(shape)))
                calls.append(OpCall(f"batch-norm-no-training-{shape}", "_native_batch_norm_legit_no_training",
                                    _bn_no_training, lambda shape=shape: bn_args(shape)))
            for mask in ((True, True, True), (False, True, True), (True, False, False)):
                def bw_args(shape: Any = shape, train: bool = train) -> tuple[Any, ...]:
                    x, w, b, rm, rv = bn_args(shape)
                    out, sm, si = aten.native_batch_norm.default(x, w, b, rm.clone(), rv.clone(), train, 0.1, 1e-5)
                    return torch.randn_like(out), x, w, rm, rv, sm, si

                calls.append(OpCall(f"batch-norm-backward-{shape}-train{int(train)}-{mask}",
                                    "native_batch_norm_backward", _bn_backward(train, mask), bw_args))

    def ln_args() -> tuple[Any, ...]:
        x, w, b = torch.randn(2, 17, 192), torch.randn(192), torch.randn(192)
        out, mean, rstd = aten.native_layer_norm.default(x, [192], w, b, 1e-5)
        return torch.randn_like(out), x, mean, rstd, w, b

    for mask in ((True, True, True), (True, False, False), (True, True, False)):
        calls.append(OpCall(f"layer-norm-backward-{mask}", "native_layer_norm_backward", _ln_backward(mask), ln_args))

    def transposed(*shape: int) -> torch.Tensor:  # a (B, T, C) view of a (B, C, T) tensor, as after a conv
        return torch.randn(shape[0], shape[2], shape[1]).transpose(1, 2)

    ln = aten.native_layer_norm.default
    calls.append(OpCall("layer-norm", "native_layer_norm", lambda x, w, b: ln(x, [32], w, b, 1e-5),
                        lambda: (torch.randn(2, 16, 32), torch.randn(32), torch.randn(32))))
    calls.append(OpCall("layer-norm-transposed-input", "native_layer_norm", lambda x, w, b: ln(x, [32], w, b, 1e-5),
                        lambda: (transposed(2, 16, 32), torch.randn(32), torch.randn(32))))
    calls.append(OpCall("layer-norm-transposed-input-no-affine", "native_layer_norm",
                        lambda x: ln(x, [32], None, None, 1e-5), lambda: (transposed(2, 16, 32),)))
    for which in ("input", "grad", "both"):
        def ln_nc_args(which: str = which) -> tuple[Any, ...]:
            x = transposed(2, 16, 32) if which in ("input", "both") else torch.randn(2, 16, 32)
            w, b = torch.randn(32), torch.randn(32)
            out, mean, rstd = ln(x, [32], w, b, 1e-5)
            g = transposed(2, 16, 32) if which in ("grad", "both") else torch.randn_like(out)
            return g, x, mean, rstd, w, b

        for mask in ((True, True, True), (True, False, False)):
            calls.append(OpCall(f"layer-norm-backward-transposed-{which}-{mask}", "native_layer_norm_backward",
                                _ln_backward(mask), ln_nc_args))

    for shape, dim in (((32, 16, 8), 0), ((32, 16, 8), 2), ((6, 5), 1)):
        def wn_args(shape: tuple[int, ...] = shape, dim: int = dim) -> tuple[Any, ...]:
            g_shape = [1] * len(shape)
            g_shape[dim] = shape[dim]
            return torch.randn(shape), torch.randn(g_shape)

        def wn_bw_args(shape: tuple[int, ...] = shape, dim: int = dim) -> tuple[Any, ...]:
            v, g = wn_args(shape, dim)
            w, norm = aten._weight_norm_interface.default(v, g, dim)
            return torch.randn_like(w), v, g, norm

        calls.append(OpCall(f"weight-norm-{shape}-dim{dim}", "_weight_norm_interface",
                            lambda v, g, dim=dim: aten._weight_norm_interface.default(v, g, dim), wn_args))
        calls.append(OpCall(f"weight-norm-backward-{shape}-dim{dim}", "_weight_norm_interface_backward",
                            lambda gw, v, g, n, dim=dim: aten._weight_norm_interface_backward.default(gw, v, g, n, dim),
                            wn_bw_args))

    contiguous, channels_last = torch.contiguous_format, torch.channels_last
    for shape, groups, layout in (((2, 16, 99), 16, contiguous), ((3, 8, 4, 4), 2, contiguous),
                                  ((2, 16, 5, 7), 4, channels_last)):
        def gn_bw_args(shape: tuple[int, ...] = shape, groups: int = groups,
                       layout: torch.memory_format = layout) -> tuple[Any, ...]:
            x = torch.randn(shape).contiguous(memory_format=layout)
            n, c, hw = shape[0], shape[1], math.prod(shape[2:])
            w, b = torch.randn(c), torch.randn(c)
            y, mean, rstd = aten.native_group_norm.default(x, w, b, n, c, hw, groups, 1e-5)
            return torch.randn_like(y), x, mean, rstd, w

        for mask in ((True, True, True), (True, False, False)):
            calls.append(OpCall(f"group-norm-backward-{shape}-{layout}-{mask}", "native_group_norm_backward",
                                lambda gy, x, mean, rstd, w, shape=shape, groups=groups, mask=mask:
                                aten.native_group_norm_backward.default(gy, x, mean, rstd, w, shape[0], shape[1],
                                                                        math.prod(shape[2:]), groups, list(mask)),
                                gn_bw_args))

    emb = aten.embedding.default
    calls.append(OpCall("embedding", "embedding", emb, lambda: (torch.randn(128, 32), torch.randint(0, 128, (2, 16)))))
    calls.append(OpCall("embedding-expanded-ids", "embedding", emb,
                        lambda: (torch.randn(2, 32), torch.zeros(1, 16, dtype=torch.long).expand(2, 16))))
    calls.append(OpCall("embedding-row-of-ids", "embedding", emb,
                        lambda: (torch.randn(64, 32), torch.arange(64).view(1, 64)[:, :16])))
    emb_bw = aten.embedding_dense_backward.default

    def emb_bw_fn(g: Any, ids: Any) -> Any:
        return emb_bw(g, ids, 128, -1, False)

    calls.append(OpCall("embedding-backward", "embedding_dense_backward", emb_bw_fn,
                        lambda: (torch.randn(2, 16, 32), torch.randint(0, 128, (2, 16)))))
    calls.append(OpCall("embedding-backward-expanded-ids", "embedding_dense_backward", emb_bw_fn,
                        lambda: (torch.randn(2, 16, 32), torch.zeros(1, 16, dtype=torch.long).expand(2, 16))))
    calls.append(OpCall("cumsum-bool", "cumsum", lambda m: aten.cumsum.default(m, -1),
                        lambda: (torch.randn(2, 16) > 0,)))
    calls.append(OpCall("cumsum-float", "cumsum", lambda m: aten.cumsum.default(m, -1), lambda: (torch.randn(2, 16),)))

    for b, h, length, e in ((2, 2, 16, 16), (2, 3, 17, 64), (2, 2, 200, 8), (1, 2, 800, 8)):
        for layout in ("heads-major", "sequence-major"):
            def qkv(b: int = b, h: int = h, length: int = length, e: int = e, layout: str = layout) -> Any:
                if layout == "heads-major":
                    return tuple(torch.randn(b, h, length, e) for _ in range(3))
                return tuple(torch.randn(b, length, h, e).transpose(1, 2) for _ in range(3))

            def sdpa(q: Any, k: Any, v: Any) -> Any:
                return aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, False)

            def sdpa_bw(g: Any, q: Any, k: Any, v: Any, out: Any, lse: Any) -> Any:
                return aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
                    g, q, k, v, out, lse, 0.0, False)

            def bw_args(qkv: Any = qkv, layout: str = layout) -> tuple[Any, ...]:
                q, k, v = qkv()
                out, lse = sdpa(q, k, v)
                g = torch.randn_like(out) if layout == "heads-major" else torch.randn(out.transpose(1, 2).shape)
                return (g if layout == "heads-major" else g.transpose(1, 2)), q, k, v, out, lse

            tag = f"{b}x{h}x{length}x{e}-{layout}"
            calls.append(OpCall(f"flash-attention-{tag}", "_scaled_dot_product_flash_attention_for_cpu", sdpa, qkv))
            calls.append(OpCall(f"flash-attention-backward-{tag}",
                                "_scaled_dot_product_flash_attention_for_cpu_backward", sdpa_bw, bw_args))
    calls.extend(_module_sweep_calls())
    # a reduced-precision sum over all elements copies to float32 only where TensorIterator keeps two or more
    # dimensions: a transposed, permuted or evenly strided input is one run (tests/test_generated_eager.py's
    # bfloat16 sum of a transposed relu found the rule that said "not contiguous")
    for layout, view in [("transposed", lambda t: t.t()), ("step2-cols", lambda t: t[:, ::2]),
                         ("step2-both", lambda t: t[::2, ::2]), ("sliced-cols", lambda t: t[:, :3]),
                         ("expanded", lambda t: t[:, :1].expand(8, 5)), ("size1-dim", lambda t: t[:, None, ::2]),
                         ("permuted", lambda t: t.reshape(2, 4, 6).permute(2, 0, 1))]:
        for dtype in (torch.bfloat16, torch.float16):
            def viewed(view: Callable[[torch.Tensor], torch.Tensor] = view, dtype: torch.dtype = dtype
                       ) -> tuple[Any, ...]:
                return (view(torch.randn(8, 6, dtype=dtype)),)

            calls.append(OpCall(f"sum-{layout}-{dtype}", "sum", aten.sum.default, viewed))
    return calls


def _bag(op: str, mode: int) -> Callable[..., Any]:
    def f(w: Any, i: Any, o: Any) -> Any:
        return getattr(aten, op).default(w, i, o, False, mode)

    return f


def _bag_backward(mode: int) -> Callable[..., Any]:
    def f(g: Any, i: Any, o: Any, o2b: Any, size: Any, maxi: Any) -> Any:
        return aten._embedding_bag_backward.default(g, i, o, o2b, size, maxi, 20, False, mode, False, None)

    return f


def _weighted_bag_backward(g: Any, i: Any, o: Any, o2b: Any, size: Any, maxi: Any, weights: Any) -> Any:
    return aten._embedding_bag_backward.default(g, i, o, o2b, size, maxi, 20, False, 0, False, weights)


def _reduced(fn: Callable[..., Any], reduction: int) -> Callable[..., Any]:
    def f(a: Any, b: Any) -> Any:
        return fn(a, b, reduction)

    return f


def _reduced_backward(fn: Callable[..., Any], reduction: int) -> Callable[..., Any]:
    def f(g: Any, a: Any, b: Any) -> Any:
        return fn(g, a, b, reduction)

    return f


def _sized(op: Callable[..., Any], size: list[int], *rest: Any) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        return op(x, size, *rest)

    return f


def _conv_transposed(s: int, groups: int = 1) -> Callable[..., Any]:
    def f(x: Any, w: Any, b: Any) -> Any:
        k = x.dim() - 2
        return aten.convolution.default(x, w, b, [s] * k, [0] * k, [1] * k, True, [0] * k, groups)

    return f


def _conv_transposed_backward(s: int, groups: int = 1) -> Callable[..., Any]:
    def f(g: Any, x: Any, w: Any) -> Any:
        k = x.dim() - 2
        return aten.convolution_backward.default(g, x, w, [w.shape[1] * groups], [s] * k, [0] * k, [1] * k, True,
                                                 [0] * k, groups, [True, True, True])

    return f


def _module_sweep_calls() -> list[OpCall]:
    """The kernels the module sweep (``mod-*``) found with workspace of their own."""
    calls: list[OpCall] = []
    for n, bags in ((12, 4), (30, 7), (12, 1)):
        def bag_args(n: int = n, bags: int = bags) -> tuple[Any, ...]:
            return torch.randn(20, 8), torch.randint(0, 20, (n,)), torch.arange(0, n, max(1, n // bags))[:bags]

        for mode in (0, 1, 2):
            for op in ("_embedding_bag", "_embedding_bag_forward_only"):
                calls.append(OpCall(f"{op}-{n}x{bags}-mode{mode}", op, _bag(op, mode), bag_args))

            def bag_bw_args(bag_args: Any = bag_args, mode: int = mode) -> tuple[Any, ...]:
                w, i, o = bag_args()
                out, o2b, size, maxi = aten._embedding_bag.default(w, i, o, False, mode)
                return torch.randn_like(out), i, o, o2b, size, maxi

            calls.append(OpCall(f"_embedding_bag_backward-{n}x{bags}-mode{mode}", "_embedding_bag_backward",
                                _bag_backward(mode), bag_bw_args))

        def weighted_bw_args(bag_args: Any = bag_args) -> tuple[Any, ...]:  # per_sample_weights: sum only
            w, i, o = bag_args()
            weights = torch.rand(i.shape[0])
            out, o2b, size, maxi = aten._embedding_bag.default(w, i, o, False, 0, False, weights)
            return torch.randn_like(out), i, o, o2b, size, maxi, weights

        calls.append(OpCall(f"_embedding_bag_backward-{n}x{bags}-weighted", "_embedding_bag_backward",
                            _weighted_bag_backward, weighted_bw_args))
    losses: dict[str, Callable[..., Any]] = {
        "mse_loss": lambda a, b, r: aten.mse_loss.default(a, b, r),
        "smooth_l1_loss": lambda a, b, r: aten.smooth_l1_loss.default(a, b, r, 1.0),
        "huber_loss": lambda a, b, r: aten.huber_loss.default(a, b, r, 1.0),
        "soft_margin_loss": lambda a, b, r: aten.soft_margin_loss.default(a, b, r),
        "binary_cross_entropy": lambda a, b, r: aten.binary_cross_entropy.default(a, b, None, r),
        "binary_cross_entropy_with_logits": lambda a, b, r: aten.binary_cross_entropy_with_logits.default(
            a, b, None, None, r),
    }
    backwards: dict[str, Callable[..., Any]] = {
        "soft_margin_loss_backward": lambda g, a, b, r: aten.soft_margin_loss_backward.default(g, a, b, r),
        "binary_cross_entropy_backward": lambda g, a, b, r: aten.binary_cross_entropy_backward.default(
            g, a, b, None, r),
    }
    for op, fn in losses.items():
        for shape in ((4, 8), (6, 10), (1,)):
            for reduction in (0, 1, 2):
                calls.append(OpCall(f"{op}-{shape}-reduction{reduction}", op, _reduced(fn, reduction),
                                    lambda shape=shape: (torch.rand(shape) * 0.9 + 0.05, torch.rand(shape))))
        for reduction in (0, 1, 2):  # float64: the mean's count is an int64, cast to float64 too
            calls.append(OpCall(f"{op}-float64-reduction{reduction}", op, _reduced(fn, reduction),
                                lambda: (torch.rand(3, 5, dtype=torch.float64) * 0.9 + 0.05,
                                         torch.rand(3, 5, dtype=torch.float64))))
    # sum off float32's fast path: float64, and float16 with per-sample weights (measured on stand-ins).  Not
    # bfloat16: torch's fake kernel takes it off the fast path (an offset2bag of n elements) where the CPU
    # kernel keeps it on (an empty one), so a traced graph's output sizes are not the kernel's
    for dtype, weighted in ((torch.float64, False), (torch.float64, True), (torch.float16, True),
                            (torch.float16, False)):
        for n, bags in ((12, 3), (30, 4), (5, 5)):
            def sum_args(n: int = n, bags: int = bags, dtype: torch.dtype = dtype, weighted: bool = weighted,
                         ) -> tuple[Any, ...]:
                weights = torch.rand(n, dtype=dtype) if weighted else None
                return (torch.randn(20, 8, dtype=dtype), torch.randint(0, 20, (n,)),
                        torch.arange(bags) * (n // bags), weights)

            calls.append(OpCall(f"_embedding_bag_forward_only-sum-{dtype}-{n}x{bags}-weighted{weighted}",
                                "_embedding_bag_forward_only",
                                lambda w, i, o, ps: aten._embedding_bag_forward_only.default(w, i, o, False, 0, False,
                                                                                             ps), sum_args))

    for op, fn in backwards.items():
        for shape in ((4, 8), (6, 10), (1,)):
            for reduction in (0, 1, 2):
                def grad_args(shape: tuple[int, ...] = shape, reduction: int = reduction) -> tuple[Any, ...]:
                    a = torch.rand(shape) * 0.9 + 0.05
                    return torch.ones_like(a) if reduction == 0 else torch.ones(()), a, torch.rand(shape)

                calls.append(OpCall(f"{op}-{shape}-reduction{reduction}", op, _reduced_backward(fn, reduction),
                                    grad_args))
    # an integer -1/1 label, as common_nn's unbatched SoftMarginLoss passes: cast where the kernel reads it
    for label in (torch.int64, torch.int32):
        for shape in ((9,), (4, 8)):
            for reduction in (0, 1, 2):
                def labelled(shape: tuple[int, ...] = shape, label: torch.dtype = label) -> tuple[Any, ...]:
                    return torch.randn(shape), (torch.rand(shape) > 0.5).to(label) * 2 - 1

                def labelled_grad(shape: tuple[int, ...] = shape, label: torch.dtype = label,
                                  reduction: int = reduction) -> tuple[Any, ...]:
                    x, y = labelled(shape, label)
                    return torch.ones_like(x) if reduction == 0 else torch.ones(()), x, y

                name = f"{shape}-{str(label).removeprefix('torch.')}-label-reduction{reduction}"
                calls.append(OpCall(f"soft_margin_loss-{name}", "soft_margin_loss",
                                    _reduced(losses["soft_margin_loss"], reduction), labelled))
                calls.append(OpCall(f"soft_margin_loss_backward-{name}", "soft_margin_loss_backward",
                                    _reduced_backward(backwards["soft_margin_loss_backward"], reduction),
                                    labelled_grad))

    def margin_args(shape: tuple[int, ...]) -> tuple[Any, ...]:
        y = torch.full(shape, -1, dtype=torch.long)
        y[..., 0] = 1
        return torch.randn(shape), y

    for shape in ((4, 5), (6, 9)):
        calls.append(OpCall(f"multilabel-margin-{shape}", "multilabel_margin_loss_forward",
                            lambda x, y: aten.multilabel_margin_loss_forward.default(x, y, 1),
                            lambda shape=shape: margin_args(shape)))

        def margin_bw_args(shape: tuple[int, ...] = shape) -> tuple[Any, ...]:
            x, y = margin_args(shape)
            return torch.ones(()), x, y, aten.multilabel_margin_loss_forward.default(x, y, 1)[1]

        calls.append(OpCall(f"multilabel-margin-backward-{shape}", "multilabel_margin_loss_backward",
                            lambda g, x, y, t: aten.multilabel_margin_loss_backward.default(g, x, y, 1, t),
                            margin_bw_args))
    for shape in ((2, 4, 8, 8), (1, 3, 5, 7)):
        calls.append(OpCall(f"im2col-{shape}", "im2col",
                            lambda x: aten.im2col.default(x, [3, 3], [1, 1], [1, 1], [1, 1]),
                            lambda shape=shape: (torch.randn(shape),)))
    # fewer columns than input elements (a stride past the kernel: the result keeps the input-sized storage),
    # and a transposed input (unfolded from a contiguous copy)
    calls.append(OpCall("im2col-strided-down", "im2col",
                        lambda x: aten.im2col.default(x, [2, 2], [1, 1], [0, 0], [3, 3]),
                        lambda: (torch.randn(2, 3, 9, 9),)))
    calls.append(OpCall("im2col-transposed", "im2col",
                        lambda x: aten.im2col.default(x, [3, 3], [1, 1], [1, 1], [1, 1]),
                        lambda: (torch.randn(2, 4, 7, 6).transpose(2, 3),)))
    for shape in ((2, 4, 8, 8), (2, 1, 8, 8), (2, 3, 5, 7)):
        size = [2 * shape[2], 2 * shape[3]]
        calls.append(OpCall(f"upsample-nearest2d-{shape}", "upsample_nearest2d",
                            _sized(aten.upsample_nearest2d.default, size, 2.0, 2.0),
                            lambda shape=shape: (torch.randn(shape),)))
        calls.append(OpCall(f"upsample-bilinear2d-{shape}", "upsample_bilinear2d",
                            _sized(aten.upsample_bilinear2d.default, size, False, 2.0, 2.0),
                            lambda shape=shape: (torch.randn(shape),)))
        calls.append(OpCall(f"upsample-bicubic2d-{shape}", "upsample_bicubic2d",
                            _sized(aten.upsample_bicubic2d.default, size, False, 2.0, 2.0),
                            lambda shape=shape: (torch.randn(shape),)))
    calls.append(OpCall("upsample-trilinear3d", "upsample_trilinear3d",
                        lambda x: aten.upsample_trilinear3d.default(x, [8, 6, 4], False, 2.0, 2.0, 2.0),
                        lambda: (torch.randn(2, 4, 4, 3, 2),)))
    calls.append(OpCall("upsample-nearest3d", "upsample_nearest3d",
                        lambda x: aten.upsample_nearest3d.default(x, [8, 6, 4], 2.0, 2.0, 2.0),
                        lambda: (torch.randn(2, 4, 4, 3, 2),)))
    calls.append(OpCall("upsample-linear1d", "upsample_linear1d",
                        lambda x: aten.upsample_linear1d.default(x, [32], False, 2.0),
                        lambda: (torch.randn(2, 4, 16),)))
    calls.append(OpCall("upsample-nearest1d", "upsample_nearest1d",
                        lambda x: aten.upsample_nearest1d.default(x, [30], 2.0), lambda: (torch.randn(2, 4, 15),)))
    for shape, size, kernel in (((2, 16, 9), [4, 4], [2, 2]), ((2, 36, 16), [6, 6], [3, 3])):
        calls.append(OpCall(f"col2im-{shape}", "col2im",
                            _sized(aten.col2im.default, size, kernel, [1, 1], [0, 0], [1, 1]),
                            lambda shape=shape: (torch.randn(shape),)))
    calls.append(OpCall("rrelu-eval", "rrelu_with_noise",
                        lambda x, noise: aten.rrelu_with_noise.default(x, noise, 0.125, 1 / 3, False),
                        lambda: (torch.randn(6, 10), torch.empty(6, 10))))
    for name, x_of in (("contiguous", lambda: torch.randn(6, 10)), ("transposed", lambda: torch.randn(10, 6).t()),
                       ("float64", lambda: torch.randn(3, 4, 5, dtype=torch.float64))):
        calls.append(OpCall(f"rrelu-train-{name}", "rrelu_with_noise",
                            lambda x, noise: aten.rrelu_with_noise.default(x, noise, 0.125, 1 / 3, True),
                            lambda x_of=x_of: (x := x_of(), torch.empty(x.shape, dtype=x.dtype))))
    for name, bound in (("int32-same-shape", lambda: torch.zeros(5, 10, 5, dtype=torch.int32)),
                        ("int32-broadcast", lambda: torch.zeros(10, 5, dtype=torch.int32)),
                        ("int64-0-dim", lambda: torch.zeros((), dtype=torch.int64)),
                        ("float32", lambda: torch.zeros(5, 10, 5))):
        calls.append(OpCall(f"clamp-{name}", "clamp", lambda x, b: aten.clamp.Tensor(x, b, None),
                            lambda bound=bound: (torch.randn(5, 10, 5), bound())))
        calls.append(OpCall(f"clamp_max-{name}", "clamp_max", lambda x, b: aten.clamp_max.Tensor(x, b),
                            lambda bound=bound: (torch.randn(5, 10, 5), bound())))
        calls.append(OpCall(f"clamp_min-{name}", "clamp_min", lambda x, b: aten.clamp_min.Tensor(x, b),
                            lambda bound=bound: (torch.randn(5, 10, 5), bound())))
    for shape in ((), (5,)):
        for order in (0, 2, float("inf")):
            for dtype in (torch.float32, torch.float64):
                calls.append(OpCall(f"linalg_vector_norm-{shape}-{order}-{dtype}", "linalg_vector_norm",
                                    lambda x, order=order: aten.linalg_vector_norm.default(x, order),
                                    lambda shape=shape, dtype=dtype: (torch.randn(shape, dtype=dtype),)))
    for counts in ([1, 2, 0, 3], [2] * 7, [5]):
        calls.append(OpCall(f"repeat_interleave-{counts}", "repeat_interleave", aten.repeat_interleave.Tensor,
                            lambda counts=counts: (torch.tensor(counts),)))
    cfloat = torch.complex64
    for op in ("abs", "angle"):  # a complex temporary of the input's size; nothing for a real input
        for dtype in (cfloat, torch.complex128, torch.float32):
            calls.append(OpCall(f"{op}-{dtype}", op, getattr(aten, op).default,
                                lambda dtype=dtype: (torch.randn(3, 5, 4, dtype=dtype).transpose(0, 2),)))
    for name, scalar in (("complex", 1j), ("float", 2.0)):  # a Python complex is wrapped as complex128, then cast
        calls.append(OpCall(f"mul-{name}-scalar-into-complex64", "mul",
                            lambda a, scalar=scalar: aten.mul.Scalar(a, scalar),
                            lambda: (torch.randn(4, dtype=cfloat),)))
    # a lazy conjugate operand of a kernel that reads the bit itself (a fallback's materialising ``clone`` is a node
    # of the graph): bmm copies it, as its layout decides (measured on stand-ins that carry the bit)
    for name, swap in (("lhs", False), ("rhs-transposed", True)):
        calls.append(OpCall(f"bmm-conj-{name}", "bmm",
                            lambda a, b, swap=swap: aten.bmm.default(a, aten._conj.default(b.transpose(1, 2)))
                            if swap else aten.bmm.default(aten._conj.default(a), b),
                            lambda: (torch.randn(2, 5, 5, dtype=cfloat), torch.randn(2, 5, 5, dtype=cfloat))))
    for n, s, bias, groups in ((2, 2, True, 1), (1, 2, False, 1), (2, 1, True, 1), (2, 2, True, 2),
                               (1, 1, False, 2), (3, 2, False, 4)):
        for dims in (1, 2, 3):
            xs, ws = (n, 4, *[5] * dims), (4, 6 // groups if groups < 4 else 1, *[3] * dims)

            def t_args(xs: Any = xs, ws: Any = ws, bias: bool = bias, groups: int = groups) -> tuple[Any, ...]:
                return torch.randn(xs), torch.randn(ws), torch.randn(ws[1] * groups) if bias else None

            conv_t, conv_t_bw = _conv_transposed(s, groups), _conv_transposed_backward(s, groups)

            def t_bw_args(t_args: Any = t_args, conv_t: Any = conv_t) -> tuple[Any, ...]:
                x, w, b = t_args()
                return torch.randn_like(conv_t(x, w, b)), x, w

            tag = f"{dims}d-n{n}-s{s}-bias{int(bias)}" + (f"-groups{groups}" if groups > 1 else "")
            calls.append(OpCall(f"conv-transpose-{tag}", "convolution", conv_t, t_args))
            calls.append(OpCall(f"conv-transpose-backward-{tag}", "convolution_backward", conv_t_bw, t_bw_args))
    calls.extend(_composite_calls())
    calls.extend(_op_sweep_calls())
    calls.extend(_linalg_calls())
    calls.extend(_lapack_calls())
    calls.extend(_sub_op_calls())
    calls.extend(_upsample_aa_calls())
    return calls


#: ``_trilinear``'s four forms (``nn.Bilinear``'s forward, then the three its gradients take):
#: the operands (0: x1, 1: weight, 2: x2, 3: the output's gradient) and (expand1, expand2, expand3, sumdim)
_TRILINEAR_FORMS = {
    "forward": ((0, 1, 2), ([1, 3], [0], [1, 2], [2, 3])),
    "grad-x1": ((3, 1, 2), ([2, 3], [0], [1, 2], [1, 3])),
    "grad-weight": ((0, 3, 2), ([1, 3], [2, 3], [1, 2], [0])),
    "grad-x2": ((0, 1, 3), ([1, 3], [0], [2, 3], [1, 2])),
}


def _trilinear(dims: Any) -> Callable[..., Any]:
    def f(a: Any, b: Any, c: Any) -> Any:
        return aten._trilinear.default(a, b, c, *dims)

    return f


def _composite_calls() -> list[OpCall]:
    """Kernels with no CPU kernel of their own: their composite body's workspace (conformance.models.composite)."""
    calls: list[OpCall] = []
    for n, i1, i2, o in ((4, 8, 6, 5), (1, 3, 3, 2), (6, 2, 9, 7)):
        shapes = {0: (n, i1), 1: (o, i1, i2), 2: (n, i2), 3: (n, o)}
        for form, (operands, dims) in _TRILINEAR_FORMS.items():
            def args(operands: Any = operands, shapes: Any = shapes) -> tuple[Any, ...]:
                return tuple(torch.randn(shapes[i]) for i in operands)

            calls.append(OpCall(f"_trilinear-{form}-{n}x{i1}x{i2}x{o}", "_trilinear", _trilinear(dims), args))
    # a body whose inner op takes keyword operands (new_empty's dtype): they reach that op's own model
    for dtype in (torch.bool, torch.float32, torch.int64):
        calls.append(OpCall(f"new_ones-{dtype}", "new_ones", _new_ones(dtype),
                            lambda: (torch.randint(0, 10, (2, 16)),)))
    # sizes that follow the values: traced on the call's values (conformance.api.step.trace_graph)
    for name, make in (("contiguous", lambda: (torch.randn(64), torch.randn(64) > 0.3)),
                       ("broadcast-mask", lambda: (torch.randn(16, 4), torch.tensor([True, False, True, True]))),
                       ("broadcast-self", lambda: (torch.randn(4), torch.randn(8, 4) > 0)),
                       ("transposed", lambda: (torch.randn(4, 8).t(), torch.randn(8, 4) > 0)),
                       ("float64", lambda: (torch.randn(40, dtype=torch.float64), torch.randn(40) > 1.0)),
                       ("parallel", lambda: (torch.randn(40000), torch.randn(40000) > 3.0))):
        calls.append(OpCall(f"masked_select-{name}", "masked_select", aten.masked_select.default, make))
    for inverse, counts in ((False, False), (True, True), (False, True)):
        calls.append(OpCall(f"unique_consecutive-inverse={inverse}-counts={counts}", "unique_consecutive",
                            _unique_consecutive(inverse, counts), lambda: (torch.round(torch.randn(6, 16) * 2),)))
    for t, n, c, length in ((6, 2, 5, 3), (10, 3, 7, 4)):
        calls.append(OpCall(f"ctc_loss_backward-{t}x{n}x{c}-L{length}", "_ctc_loss_backward", _ctc_backward(),
                            _ctc_operands(t, n, c, length)))
    return calls


def _bound(op: Callable[..., Any], *rest: Any, **kwargs: Any) -> Callable[..., Any]:
    """``op(x, *rest, **kwargs)`` as a one-operand function (traced with one input)."""
    def f(x: Any) -> Any:
        return op(x, *rest, **kwargs)

    return f


def _made(shape: tuple[int, ...], layout: str = "contiguous", dtype: torch.dtype = torch.float32,
          ) -> Callable[[], tuple[Any, ...]]:
    """One operand of ``shape``: contiguous, or the transpose of a contiguous tensor of the reversed shape."""
    def make() -> tuple[Any, ...]:
        if layout == "contiguous" or len(shape) < 2:
            x = torch.randn(shape)
        else:
            x = torch.randn(shape[::-1]).permute(*range(len(shape) - 1, -1, -1))
        return ((x * 4).to(dtype),)

    return make


#: FFT operands: (shape, layout, transform dims): batch dimensions that collapse into one (a view)
#: or not (a copy), several transform dims, a transposed input
_FFTS = [((5, 7), "contiguous", [1]), ((4, 5, 7), "contiguous", [1]), ((4, 5, 7), "transposed", [2]),
         ((3, 4, 5, 6), "contiguous", [1, 3]), ((3, 4, 5, 6), "transposed", [0, 2]), ((3, 5, 7), "contiguous", [1, 2]),
         ((3, 5, 7), "contiguous", [0, 1]), ((2, 1, 6), "transposed", [0, 2, 1])]


def _scatter_reduce(reduce: str, include: bool) -> Callable[..., Any]:
    def f(x: Any, i: Any, src: Any) -> Any:
        return aten.scatter_reduce.two(x, 0, i, src, reduce, include_self=include)

    return f


def _lu_unpack(data: bool, pivots: bool) -> Callable[..., Any]:
    def f(lu: Any, piv: Any) -> Any:
        return aten.lu_unpack.default(lu, piv, data, pivots)

    return f


def _segment_reduce(reduce: str, given: str) -> Callable[..., Any]:
    def f(data: Any, segments: Any) -> Any:
        return aten.segment_reduce.default(data, reduce, **{given: segments})

    return f


def _op_sweep_calls() -> list[OpCall]:
    """Kernels the op sweep (``op-*``) runs whose workspace the module sweep does not reach."""
    calls: list[OpCall] = []
    for shape, layout, dims in _FFTS:
        tag = f"{'x'.join(map(str, shape))}-{layout}-dims{''.join(map(str, dims))}"
        real, cplx = _made(shape, layout), _made(shape, layout, torch.complex64)
        calls.append(OpCall(f"fft-r2c-{tag}", "_fft_r2c", _bound(aten._fft_r2c.default, dims, 0, True), real))
        calls.append(OpCall(f"fft-r2c-twosided-{tag}", "_fft_r2c", _bound(aten._fft_r2c.default, dims, 0, False),
                            real))
        calls.append(OpCall(f"fft-c2c-{tag}", "_fft_c2c", _bound(aten._fft_c2c.default, dims, 1, True), cplx))
        last = max(2 * (shape[dims[-1]] - 1), 1)
        calls.append(OpCall(f"fft-c2r-{tag}", "_fft_c2r", _bound(aten._fft_c2r.default, dims, 2, last), cplx))
    for shape, layout in (((7,), "contiguous"), ((4, 5), "contiguous"), ((4, 5), "transposed"),
                          ((3, 4, 5), "transposed"), ((1, 6), "transposed")):
        tag = f"{'x'.join(map(str, shape))}-{layout}"
        x, x64, xi = _made(shape, layout), _made(shape, layout, torch.float64), _made(shape, layout, torch.int64)
        for d in range(len(shape)):
            calls.append(OpCall(f"sort-{tag}-dim{d}", "sort", _bound(aten.sort.default, d, False), xi))
            calls.append(OpCall(f"sort-stable-{tag}-dim{d}", "sort", _bound(aten.sort.stable, stable=True, dim=d), x))
            calls.append(OpCall(f"kthvalue-{tag}-dim{d}", "kthvalue", _bound(aten.kthvalue.default, 1, d), x64))
            calls.append(OpCall(f"median-{tag}-dim{d}", "median", _bound(aten.median.dim, d), x))
            calls.append(OpCall(f"nanmedian-{tag}-dim{d}", "nanmedian", _bound(aten.nanmedian.dim, d), xi))
        calls.append(OpCall(f"median-{tag}", "median", aten.median.default, x64))
        calls.append(OpCall(f"nanmedian-{tag}", "nanmedian", aten.nanmedian.default, x))
        for dims in (None, [0], list(range(len(shape)))):
            for name, op in (("std", aten.std.correction), ("var", aten.var.correction)):
                for make in (x, x64):
                    calls.append(OpCall(f"{name}-{tag}-dims{dims}", name, _bound(op, dims, correction=1), make))
            if dims is not None:
                for keep in (False, True):
                    calls.append(OpCall(f"logsumexp-{tag}-dims{dims}-keep{keep}", "logsumexp",
                                        _bound(aten.logsumexp.default, dims, keep), x64 if keep else x))
        calls.append(OpCall(f"mean-{tag}-float64", "mean", aten.mean.default, x64))
        calls.append(OpCall(f"deg2rad-{tag}", "deg2rad", aten.deg2rad.default, x))
        calls.append(OpCall(f"rad2deg-{tag}-float64", "rad2deg", aten.rad2deg.default, x64))
        calls.append(OpCall(f"pow-scalar-{tag}", "pow", _bound(lambda e, base: aten.pow.Scalar(base, e), 2.0), xi))
        calls.append(OpCall(f"pow-tensor-scalar-{tag}", "pow", _bound(aten.pow.Tensor_Scalar, 3.0), x))
        for dtype in (torch.float32, torch.int64, torch.uint8, torch.bool):
            make = _made(shape, layout, dtype)
            calls.append(OpCall(f"all-{tag}-{dtype}", "all", aten.all.default, make))
            calls.append(OpCall(f"any-dim-{tag}-{dtype}", "any", _bound(aten.any.dim, 0), make))
            calls.append(OpCall(f"count_nonzero-{tag}-{dtype}", "count_nonzero",
                                _bound(aten.count_nonzero.dim_IntList, [0]), make))
        calls.append(OpCall(f"count_nonzero-default-{tag}", "count_nonzero", _bound(aten.count_nonzero.default, 0), x))
        calls.append(OpCall(f"roll-flat-{tag}", "roll", _bound(aten.roll.default, [2]), x))
        calls.append(OpCall(f"roll-dims-{tag}", "roll", _bound(aten.roll.default, [1] * len(shape),
                                                                 list(range(len(shape)))), x))
    for dtype in (torch.uint8, torch.float32, torch.bool):  # one element: read through a cast to bool
        calls.append(OpCall(f"all-one-element-{dtype}", "all", aten.all.default, _made((1, 1), dtype=dtype)))
    for idt in (torch.int32, torch.int64):
        for shape, size in (((5, 5), (10, 5)), ((2, 4, 5), (3, 4, 5))):
            def operands(shape: tuple[int, ...] = shape, size: tuple[int, ...] = size,
                         idt: torch.dtype = idt) -> tuple[Any, ...]:
                return torch.randn(size), torch.randint(0, 2, shape, dtype=idt), torch.randn(shape)

            tag = f"{'x'.join(map(str, shape))}-{idt}"
            calls.append(OpCall(f"gather-{tag}", "gather", lambda x, i, s: aten.gather.default(x, 0, i), operands))
            calls.append(OpCall(f"scatter-{tag}", "scatter", lambda x, i, s: aten.scatter.src(x, 0, i, s), operands))
            calls.append(OpCall(f"scatter-value-{tag}", "scatter", lambda x, i, s: aten.scatter.value(x, 0, i, 2.0),
                                operands))
            calls.append(OpCall(f"scatter_add-{tag}", "scatter_add",
                                lambda x, i, s: aten.scatter_add.default(x, 0, i, s), operands))
    for bins, low, high in ((10, 0.0, 1.0), (7, 0.0, 0.0), (1, -1.0, 1.0), (100, 0.0, 0.0)):
        for shape, dtype in (((100,), torch.float32), ((5, 6), torch.float64), ((), torch.float32)):
            calls.append(OpCall(f"histc-{bins}-{low}-{high}-{'x'.join(map(str, shape))}-{dtype}", "histc",
                                _bound(aten.histc.default, bins, low, high), _made(shape, dtype=dtype)))
    for shape, dtype in (((5, 5), torch.float32), ((2, 3, 4), torch.float64), ((), torch.float32), ((), torch.float64)):
        def grad_mask(shape: tuple[int, ...] = shape, dtype: torch.dtype = dtype) -> tuple[Any, ...]:
            return torch.randn(shape, dtype=dtype), torch.randn(shape) > 0

        calls.append(OpCall(f"native_dropout_backward-{'x'.join(map(str, shape))}-{dtype}", "native_dropout_backward",
                            lambda g, m: aten.native_dropout_backward.default(g, m, 2.0), grad_mask))
    for shape in ((5, 5, 5), (3, 4)):
        for d in range(len(shape)):
            calls.append(OpCall(f"renorm-{'x'.join(map(str, shape))}-dim{d}", "renorm",
                                _bound(aten.renorm.default, 2, d, 1.0), _made(shape, "transposed")))
    for shape, size in (((2, 3, 4), [6]), ((1, 1, 5), [12]), ((2, 3, 4, 5), [7, 3]), ((1, 1, 4, 5), [8, 2]),
                        ((2, 3, 4, 5, 6), [3, 5, 2])):
        exact = {3: aten._upsample_nearest_exact1d, 4: aten._upsample_nearest_exact2d,
                 5: aten._upsample_nearest_exact3d}[len(shape)]
        calls.append(OpCall(f"upsample-nearest-exact-{'x'.join(map(str, shape))}", exact.__name__.split(".")[0],
                            _bound(exact.default, size), _made(shape)))
    for shapes, dim, chunks in ((((1, 2, 3), (1, 2, 3)), 1, 2), (((1, 2, 3), (1, 2, 3)), 2, 5),
                                (((4, 6), (4, 5)), 1, 3), (((3, 4),), 0, 2), (((10, 20), (10, 30)), -1, 4)):
        def chunked(shapes: Any = shapes) -> tuple[Any, ...]:
            return tuple(torch.randn(s) for s in shapes)

        def cat(*ts: Any, dim: int = dim, chunks: int = chunks) -> Any:
            return aten._chunk_cat.default(list(ts), dim, chunks)

        calls.append(OpCall(f"_chunk_cat-{len(shapes)}x{'x'.join(map(str, shapes[-1]))}-dim{dim}-chunks{chunks}",
                            "_chunk_cat", cat, chunked))
    for (size, shape), idt, dtype in ((((10, 5), (5, 5)), torch.int64, torch.float32),
                                      (((4, 3), (6, 3)), torch.int32, torch.float64), (((8,), (3,)), torch.int64,
                                                                                      torch.float64)):
        def reduced(size: Any = size, shape: Any = shape, idt: torch.dtype = idt, dtype: torch.dtype = dtype,
                    ) -> tuple[Any, ...]:
            return (torch.randn(size, dtype=dtype), torch.randint(0, size[0], shape, dtype=idt),
                    torch.randn(shape, dtype=dtype))

        for reduce in ("mean", "sum", "amax"):
            for include in (True, False):
                calls.append(OpCall(f"scatter_reduce-{reduce}-{include}-{'x'.join(map(str, shape))}-{idt}-{dtype}",
                                    "scatter_reduce", _scatter_reduce(reduce, include), reduced))
    for shape in ((3, 5), (5, 3), (4, 4), (2, 4, 3), (3, 2, 4, 3), (2, 3, 5)):
        def factored(shape: tuple[int, ...] = shape) -> tuple[Any, ...]:
            return tuple(torch.linalg.lu_factor(torch.randn(shape)))

        for data, pivots in ((True, True), (True, False), (False, True)):
            calls.append(OpCall(f"lu_unpack-{'x'.join(map(str, shape))}-data{data}-pivots{pivots}", "lu_unpack",
                                _lu_unpack(data, pivots), factored))
    for reduce in ("sum", "max", "mean"):
        for shape, lengths in (((5,), [1, 2, 0, 2]), ((12,), [3, 3, 6]), ((12, 3), [3, 3, 6]), ((1,), [1])):
            def segments(shape: tuple[int, ...] = shape, lengths: list[int] = lengths) -> tuple[Any, ...]:
                return torch.randn(shape), torch.tensor(lengths)

            calls.append(OpCall(f"segment_reduce-{reduce}-{'x'.join(map(str, shape))}-lengths", "segment_reduce",
                                _segment_reduce(reduce, "lengths"), segments))
        calls.append(OpCall(f"segment_reduce-{reduce}-offsets", "segment_reduce", _segment_reduce(reduce, "offsets"),
                            lambda: (torch.randn(5), torch.tensor([0, 1, 3, 3, 5]))))
    calls.append(OpCall("median-0d", "median", aten.median.default, _made(())))
    calls.append(OpCall("sort-0d", "sort", _bound(aten.sort.default, 0, False), _made(())))
    return calls


def _spd(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, layout: str = "contiguous") -> torch.Tensor:
    """A symmetric positive-definite (batch of) matrix, row-major or laid out column-major."""
    a = torch.randn(shape, dtype=dtype)
    spd = a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=dtype)
    return spd.mT.contiguous().mT if layout == "transposed" else spd


def _flag(op: Callable[..., Any], *rest: Any, **kwargs: Any) -> Callable[..., Any]:
    """``op(*operands, *rest, **kwargs)``: several operands, then fixed arguments."""
    def f(*operands: Any) -> Any:
        return op(*operands, *rest, **kwargs)

    return f


def _factored(shape: tuple[int, ...], rhs: tuple[int, ...], dtype: torch.dtype = torch.float32,
              lu_layout: str = "column-major") -> Callable[[], tuple[Any, ...]]:
    """``lu_factor``'s LU and pivots of a random (batch of) square matrix, and a right side: the LU as it
    comes (column-major), copied row-major, or one matrix's factors expanded over a batch of 2 (neither
    the LU nor the pivots dense)."""
    def make() -> tuple[Any, ...]:
        lu, piv = torch.linalg.lu_factor(torch.randn(shape, dtype=dtype))
        if lu_layout == "row-major":
            lu = lu.contiguous()
        elif lu_layout == "expanded":
            lu, piv = lu.expand(2, *lu.shape), piv.expand(2, *piv.shape)
        return lu, piv, torch.randn(rhs, dtype=dtype)

    return make


def _linalg_calls() -> list[OpCall]:
    """The LU and Cholesky kernels' info checks, pivot checks, clones and proxies (BatchLinearAlgebra.cpp,
    LinearAlgebra.cpp), on batches, float64 and layouts the op sweep's 5x5 samples do not reach."""
    calls: list[OpCall] = []
    spd_shapes = (((5, 5), torch.float32, "contiguous"), ((2, 3, 4, 4), torch.float32, "contiguous"),
                  ((1, 6, 6), torch.float64, "transposed"), ((3, 3), torch.float64, "transposed"))
    for shape, dtype, layout in spd_shapes:
        tag = f"{'x'.join(map(str, shape))}-{dtype}-{layout}"

        def spd(shape: tuple[int, ...] = shape, dtype: torch.dtype = dtype, layout: str = layout) -> tuple[Any, ...]:
            return (_spd(shape, dtype, layout),)

        def factor(shape: tuple[int, ...] = shape, dtype: torch.dtype = dtype) -> tuple[Any, ...]:
            return (torch.linalg.cholesky(_spd(shape, dtype)),)

        for upper in (False, True):
            calls.append(OpCall(f"cholesky-{tag}-upper{upper}", "cholesky", _bound(aten.cholesky.default, upper), spd))
            calls.append(OpCall(f"cholesky_inverse-{tag}-upper{upper}", "cholesky_inverse",
                                _bound(aten.cholesky_inverse.default, upper), factor))
        for check in (False, True):
            calls.append(OpCall(f"linalg_cholesky_ex-{tag}-check{check}", "linalg_cholesky_ex",
                                _bound(aten.linalg_cholesky_ex.default, check_errors=check), spd))
            calls.append(OpCall(f"linalg_lu_factor_ex-{tag}-check{check}", "linalg_lu_factor_ex",
                                _bound(aten.linalg_lu_factor_ex.default, check_errors=check), spd))
            calls.append(OpCall(f"linalg_inv_ex-{tag}-check{check}", "linalg_inv_ex",
                                _bound(aten.linalg_inv_ex.default, check_errors=check), spd))
        calls.append(OpCall(f"_linalg_det-{tag}", "_linalg_det", aten._linalg_det.default, spd))
        calls.append(OpCall(f"_linalg_slogdet-{tag}", "_linalg_slogdet", aten._linalg_slogdet.default, spd))
    for b_shape, a_shape, dtype in (((5, 2), (5, 5), torch.float32), ((2, 4, 3), (4, 4), torch.float64),
                                    ((3, 1, 4, 2), (2, 4, 4), torch.float32), ((4, 3), (2, 4, 4), torch.float64)):
        def rhs_factor(b_shape: tuple[int, ...] = b_shape, a_shape: tuple[int, ...] = a_shape,
                       dtype: torch.dtype = dtype) -> tuple[Any, ...]:
            return torch.randn(b_shape, dtype=dtype), torch.linalg.cholesky(_spd(a_shape, dtype))

        for upper in (False, True):
            calls.append(OpCall(f"cholesky_solve-{'x'.join(map(str, b_shape))}-{'x'.join(map(str, a_shape))}-"
                                f"{dtype}-upper{upper}", "cholesky_solve", _flag(aten.cholesky_solve.default, upper),
                                rhs_factor))
    calls.append(OpCall("_cholesky_solve_helper-2x4x3-2x4x4", "_cholesky_solve_helper",
                        _flag(aten._cholesky_solve_helper.default, False),
                        lambda: (torch.randn(2, 4, 3), torch.linalg.cholesky(_spd((2, 4, 4))))))
    for shape, rhs, dtype, lu_layout in (((3, 3), (3, 4), torch.float32, "column-major"),
                                         ((2, 5, 5), (2, 5, 1), torch.float64, "column-major"),
                                         ((4, 4), (3, 4, 2), torch.float32, "column-major"),
                                         ((4, 4), (4, 3), torch.float32, "row-major"),
                                         ((4, 4), (2, 4, 3), torch.float64, "expanded")):
        for left, adjoint in ((True, False), (True, True), (False, False)):
            b = rhs if left else (*rhs[:-2], rhs[-1], rhs[-2])
            calls.append(OpCall(f"linalg_lu_solve-{'x'.join(map(str, shape))}-{'x'.join(map(str, b))}-{dtype}-"
                                f"{lu_layout}-left{left}-adjoint{adjoint}", "linalg_lu_solve",
                                _flag(aten.linalg_lu_solve.default, left=left, adjoint=adjoint),
                                _factored(shape, b, dtype, lu_layout)))
    systems = (((5, 5), (5,), torch.float32, True), ((2, 5, 5), (2, 5), torch.float64, True),
               ((1, 1), (1,), torch.float32, True), ((5, 5), (5, 3), torch.float32, True),
               ((2, 4, 4), (4, 2), torch.float64, True), ((3, 3), (2, 3), torch.float32, False),
               ((2, 3, 3), (2, 4, 3), torch.float64, False), ((4, 4), (3, 4, 2), torch.float32, True))
    for a_shape, b_shape, dtype, left in systems:
        for check in (False, True):
            def system(a_shape: tuple[int, ...] = a_shape, b_shape: tuple[int, ...] = b_shape,
                       dtype: torch.dtype = dtype) -> tuple[Any, ...]:
                return _spd(a_shape, dtype, "transposed" if len(a_shape) > 2 else "contiguous"), torch.randn(
                    b_shape, dtype=dtype)

            calls.append(OpCall(f"_linalg_solve_ex-{'x'.join(map(str, a_shape))}-{'x'.join(map(str, b_shape))}-{dtype}-"
                                f"left{left}-check{check}", "_linalg_solve_ex",
                                _flag(aten._linalg_solve_ex.default, left=left, check_errors=check), system))
    for shape in ((3, 5), (5, 3), (4, 4), (2, 3, 5), (2, 5, 3), (3, 1, 4, 4)):
        for pivot in (True,):
            calls.append(OpCall(f"linalg_lu-{'x'.join(map(str, shape))}-pivot{pivot}", "linalg_lu",
                                _bound(aten.linalg_lu.default, pivot=pivot), _made(shape, dtype=torch.float64)))
    for shape, dtype in (((2, 5, 5), torch.float64), ((3, 2, 4, 4), torch.float32), ((7, 7), torch.float64)):
        tag = f"{'x'.join(map(str, shape))}-{dtype}"
        calls.append(OpCall(f"_linalg_det-{tag}", "_linalg_det", aten._linalg_det.default, _made(shape, dtype=dtype)))
        calls.append(OpCall(f"_linalg_slogdet-{tag}", "_linalg_slogdet", aten._linalg_slogdet.default,
                            _made(shape, dtype=dtype)))
    return calls


def _symmetric(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    a = torch.randn(shape, dtype=dtype)
    return a + a.mT


def _lapack_calls() -> list[OpCall]:
    """The kernels whose workspace LAPACK's query sizes (``LAPACK_QUERIED``): their entry is the meter's
    measurement on stand-ins (its own values), held here to the kernel on these (other) values, over
    shapes, batches, flags, drivers and float64."""
    calls: list[OpCall] = []
    for shape, dtype in (((3, 3), torch.float32), ((5, 2), torch.float32), ((2, 4, 3), torch.float64)):
        tag = f"{'x'.join(map(str, shape))}-{dtype}"
        for full, uv in ((False, True), (True, True), (False, False)):
            calls.append(OpCall(f"_linalg_svd-{tag}-full{full}-uv{uv}", "_linalg_svd",
                                _flag(aten._linalg_svd.default, full, uv), _made(shape, dtype=dtype)))
        for mode in ("reduced", "complete", "r"):
            calls.append(OpCall(f"linalg_qr-{tag}-{mode}", "linalg_qr", _flag(aten.linalg_qr.default, mode),
                                _made(shape, dtype=dtype)))
        calls.append(OpCall(f"geqrf-{tag}", "geqrf", aten.geqrf.default, _made(shape, dtype=dtype)))
        calls.append(OpCall(f"linalg_lstsq-{tag}", "linalg_lstsq", aten.linalg_lstsq.default,
                            lambda shape=shape, dtype=dtype: (torch.randn(shape, dtype=dtype),
                                                              torch.randn((*shape[:-1], 2), dtype=dtype))))
    for driver in ("gelsy", "gelsd", "gelss"):
        calls.append(OpCall(f"linalg_lstsq-4x3-{driver}", "linalg_lstsq", _flag(aten.linalg_lstsq.default, None,
                                                                               driver=driver),
                            lambda: (torch.randn(4, 3), torch.randn(4, 2))))
    for shape, dtype in (((5, 5), torch.float32), ((2, 3, 3), torch.float64)):
        tag = f"{'x'.join(map(str, shape))}-{dtype}"
        calls.append(OpCall(f"linalg_eig-{tag}", "linalg_eig", aten.linalg_eig.default, _made(shape, dtype=dtype)))
        for uplo, vectors in (("L", True), ("U", False)):
            calls.append(OpCall(f"_linalg_eigh-{tag}-{uplo}-vectors{vectors}", "_linalg_eigh",
                                _flag(aten._linalg_eigh.default, uplo, vectors),
                                lambda shape=shape, dtype=dtype: (_symmetric(shape, dtype),)))
        calls.append(OpCall(f"linalg_ldl_factor_ex-{tag}", "linalg_ldl_factor_ex", aten.linalg_ldl_factor_ex.default,
                            lambda shape=shape, dtype=dtype: (_symmetric(shape, dtype),)))

        def ldl_system(shape: tuple[int, ...] = shape, dtype: torch.dtype = dtype) -> tuple[Any, ...]:
            ld, pivots = torch.linalg.ldl_factor(_symmetric(shape, dtype))
            return ld, pivots, torch.randn((*shape[:-1], 2), dtype=dtype)

        calls.append(OpCall(f"linalg_ldl_solve-{tag}", "linalg_ldl_solve", aten.linalg_ldl_solve.default, ldl_system))
    for shape, dtype in (((5, 3), torch.float32), ((2, 4, 2), torch.float64)):
        tag = f"{'x'.join(map(str, shape))}-{dtype}"

        def reflectors(shape: tuple[int, ...] = shape, dtype: torch.dtype = dtype) -> tuple[Any, ...]:
            return tuple(torch.geqrf(torch.randn(shape, dtype=dtype)))

        calls.append(OpCall(f"linalg_householder_product-{tag}", "linalg_householder_product",
                            aten.linalg_householder_product.default, reflectors))
        for left, transpose in ((True, False), (False, True)):
            def ormqr_args(shape: tuple[int, ...] = shape, dtype: torch.dtype = dtype,
                           left: bool = left) -> tuple[Any, ...]:
                a, tau = torch.geqrf(torch.randn(shape, dtype=dtype))
                m = shape[-2]
                return a, tau, torch.randn((*shape[:-2], m, 3) if left else (*shape[:-2], 3, m), dtype=dtype)

            calls.append(OpCall(f"ormqr-{tag}-left{left}-transpose{transpose}", "ormqr",
                                _flag(aten.ormqr.default, left, transpose), ormqr_args))
    return calls


def _sub_op_calls() -> list[OpCall]:
    """The kernels whose temporaries are the sub-ops they dispatch (``SUB_OP_KERNELS``): their entry is the
    meter's measurement on stand-ins (positive increasing floats, zero indices), held here to the kernel on
    other values (signed, unsorted, random indices with repeats), over shapes, flags and float64."""
    calls: list[OpCall] = []
    f64 = torch.float64
    for tag, mean, std in (("tensors", (3, 4), (3, 4)), ("broadcast", (3, 1), (4,)), ("float64", (2, 5), (2, 5))):
        dtype = f64 if tag == "float64" else torch.float32
        calls.append(OpCall(f"normal-{tag}", "normal", aten.normal.Tensor_Tensor,
                            lambda mean=mean, std=std, dtype=dtype: (torch.randn(mean, dtype=dtype) * 3,
                                                                     torch.rand(std, dtype=dtype) * 2)))
    calls.append(OpCall("normal-tensor-float", "normal", _flag(aten.normal.Tensor_float, 0.5),
                        lambda: (torch.randn(7, 3),)))
    calls.append(OpCall("normal-float-tensor", "normal", lambda std: aten.normal.float_Tensor(-1.0, std),
                        lambda: (torch.rand(4, 6) + 1,)))
    for shape, n, replacement, dtype in (((10,), 3, False, torch.float32), ((4, 6), 2, True, torch.float32),
                                         ((5,), 1, False, torch.float32), ((3, 8), 4, False, f64)):
        calls.append(OpCall(f"multinomial-{shape}-{n}-{replacement}-{dtype}", "multinomial",
                            _flag(aten.multinomial.default, n, replacement),
                            lambda shape=shape, dtype=dtype: (torch.rand(shape, dtype=dtype) + 0.01,)))
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            for self_shape, dim, index_len in (((5, 3), 0, 4), ((6,), 0, 4), ((2, 7), 1, 9)):
                def reduce_args(self_shape: Any = self_shape, dim: int = dim, n: int = index_len) -> tuple[Any, ...]:
                    source_shape = list(self_shape)
                    source_shape[dim] = n
                    return (torch.randn(self_shape), torch.randint(0, self_shape[dim], (n,)),
                            torch.randn(source_shape))

                calls.append(OpCall(f"index_reduce-{reduce}-{include_self}-{self_shape}-dim{dim}", "index_reduce",
                                    lambda x, index, source, dim=dim, reduce=reduce, include_self=include_self:
                                    aten.index_reduce.default(x, dim, index, source, reduce,
                                                              include_self=include_self),
                                    reduce_args))
                # in place (what inductor's graph calls after reinplacing): its result is its operand
                calls.append(OpCall(f"index_reduce_-{reduce}-{include_self}-{self_shape}-dim{dim}", "index_reduce_",
                                    lambda x, index, source, dim=dim, reduce=reduce, include_self=include_self:
                                    aten.index_reduce_.default(x.clone(), dim, index, source, reduce,
                                                               include_self=include_self),
                                    reduce_args))
    calls.append(OpCall("histogram-bin-ct", "histogram", _flag(aten.histogram.bin_ct, 5),
                        lambda: (torch.randn(20),)))
    calls.append(OpCall("histogram-bin-ct-weighted-density", "histogram",
                        lambda x, w: aten.histogram.bin_ct(x, 7, weight=w, density=True),
                        lambda: (torch.randn(4, 6, dtype=f64), torch.rand(4, 6, dtype=f64))))
    calls.append(OpCall("histogram-bins-tensor", "histogram", aten.histogram.bins_tensor,
                        lambda: (torch.randn(3, 5), torch.tensor([-2.0, -0.5, 0.0, 0.3, 2.0]))))
    calls.append(OpCall("histogramdd-bin-edges", "_histogramdd_bin_edges",
                        _flag(aten._histogramdd_bin_edges.default, [3, 4]), lambda: (torch.randn(10, 2),)))
    calls.append(OpCall("histogramdd-from-bin-cts", "_histogramdd_from_bin_cts",
                        _flag(aten._histogramdd_from_bin_cts.default, [3, 4, 2]), lambda: (torch.randn(12, 3),)))
    calls.append(OpCall("histogramdd-from-bin-tensors", "_histogramdd_from_bin_tensors",
                        lambda x, a, b: aten._histogramdd_from_bin_tensors.default(x, [a, b]),
                        lambda: (torch.randn(9, 2), torch.tensor([-1.0, 0.0, 1.0]),
                                 torch.tensor([-3.0, -1.0, 0.5, 2.0]))))
    for tag, seq, values, right in (("rows", (3, 5), (3, 4), False), ("1d", (6,), (2, 5), True),
                                    ("float64", (2, 8), (2, 3), False)):
        dtype = f64 if tag == "float64" else torch.float32
        calls.append(OpCall(f"searchsorted-{tag}-right{right}", "searchsorted",
                            lambda s, v, right=right: aten.searchsorted.Tensor(s, v, right=right),
                            lambda seq=seq, values=values, dtype=dtype: (torch.randn(seq, dtype=dtype).sort(-1).values,
                                                                         torch.randn(values, dtype=dtype))))
    calls.append(OpCall("searchsorted-sorter", "searchsorted",
                        lambda s, v, sorter: aten.searchsorted.Tensor(s, v, sorter=sorter),
                        lambda: (s := torch.randn(7), torch.randn(3), s.argsort())[::-1][::-1]))
    return calls


def _upsample_aa(op: Callable[..., Any], size: list[int], align: bool, scales: tuple[Any, Any]) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        return op(x, size, align, *scales)

    return f


def _upsample_aa_calls() -> list[OpCall]:
    """Antialiased resizing: down, up, one dimension or both, with scales given, corners aligned, float64."""
    calls: list[OpCall] = []
    for shape, size, align, scales, dtype in (((6, 3, 10, 20), [5, 10], False, (None, None), torch.float32),
                                              ((6, 3, 10, 20), [20, 40], False, (None, None), torch.float32),
                                              ((6, 3, 10, 20), [10, 7], False, (None, None), torch.float32),
                                              ((2, 2, 9, 5), [4, 5], True, (None, None), torch.float64),
                                              ((2, 3, 7, 11), [3, 4], False, (0.3, 0.4), torch.float32),
                                              ((1, 1, 13, 6), [5, 17], True, (None, None), torch.float32),
                                              ((2, 3, 8, 8), [8, 8], False, (None, None), torch.float32)):
        for name, op in (("bilinear", aten._upsample_bilinear2d_aa.default),
                         ("bicubic", aten._upsample_bicubic2d_aa.default)):
            calls.append(OpCall(f"_upsample_{name}2d_aa-{'x'.join(map(str, shape))}-to-{'x'.join(map(str, size))}-"
                                f"align{align}-scales{scales[0]}-{dtype}", f"_upsample_{name}2d_aa",
                                _upsample_aa(op, size, align, scales), _made(shape, dtype=dtype)))
    calls.append(OpCall("_upsample_bilinear2d_aa-channels-last", "_upsample_bilinear2d_aa",
                        _upsample_aa(aten._upsample_bilinear2d_aa.default, [5, 10], False, (None, None)),
                        lambda: (torch.randn(2, 3, 10, 20).contiguous(memory_format=torch.channels_last),)))
    return calls


def _ctc_operands(t: int, n: int, c: int, length: int) -> Callable[[], tuple[Any, ...]]:
    def make() -> tuple[Any, ...]:
        log_probs = torch.randn(t, n, c).log_softmax(-1)
        targets = torch.randint(1, c, (n, length))
        lengths = (torch.full((n,), t, dtype=torch.long), torch.full((n,), length, dtype=torch.long))
        nll, log_alpha = aten._ctc_loss.Tensor(log_probs, targets, *lengths, 0, False)
        return torch.ones(n), log_probs, targets, *lengths, nll, log_alpha

    return make


def _ctc_backward() -> Callable[..., Any]:
    def f(grad: Any, log_probs: Any, targets: Any, il: Any, tl: Any, nll: Any, log_alpha: Any) -> Any:
        return aten._ctc_loss_backward.Tensor(grad, log_probs, targets, il, tl, nll, log_alpha, 0, False)

    return f


def _unique_consecutive(inverse: bool, counts: bool) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        return aten.unique_consecutive.default(x, inverse, counts)

    return f


def graph_of(fn: Callable[..., Any], args: tuple[Any, ...]) -> torch.fx.GraphModule:
    """The op traced as the harness traces a step: with fake tensors, or on its values where its sizes
    follow them (:func:`conformance.api.step.trace_graph`)."""
    return trace_graph(fn, list(args), torch.nn.Module())


def _new_ones(dtype: torch.dtype) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        return aten.new_ones.default(x, [3, 7], dtype=dtype)

    return f



CALLS = _calls()


def family_of(op: str) -> str:
    """The module of :mod:`conformance.models.transients` holding the entry a call of ``op`` exercises;
    ``"composite"`` for an op with no entry, modelled through its composite body."""
    entry = TABLE.get(op) or STORAGE_SLACK.get(op)
    return entry.__module__.rsplit(".", 1)[-1] if entry is not None else "composite"


def calls_of(family: str) -> list[OpCall]:
    """The calls whose entry lives in ``family``'s module."""
    return [c for c in CALLS if family_of(c.op) == family]


def measured_extra(call: OpCall) -> tuple[int, int]:
    """(measured peak - output bytes, the table's bytes for the traced node)."""
    args = call.make_args()
    gm = graph_of(call.fn, args)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).startswith(f"aten.{call.op}.")]
    assert len(nodes) == 1, [str(n.target) for n in gm.graph.nodes]
    with reference_kernels():
        call.fn(*args)  # warm-up: one-time allocations stay out of the window
        with CpuAllocatorProbe() as probe:
            out = call.fn(*args)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            out_bytes = sum(t.untyped_storage().nbytes() for t in outs if isinstance(t, torch.Tensor))
            del out, outs
    return probe.trace.peak_bytes - out_bytes, kernel_transient_bytes(nodes[0])


def assert_measured(call: OpCall) -> None:
    """The kernel allocated, beyond its outputs, exactly the table's bytes for the traced node."""
    measured, modelled = measured_extra(call)
    assert measured == modelled, f"{call.name}: kernel allocated {measured} B beyond its outputs, table: {modelled} B"


def node_of(call: OpCall) -> torch.fx.Node:
    gm = graph_of(call.fn, call.make_args())
    return next(n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).startswith(f"aten.{call.op}."))


