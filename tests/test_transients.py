"""Every entry of the kernel transient table is held to a measurement, op by op.

Each case runs one ATen op on real tensors inside :class:`CpuAllocatorProbe` (on the
kernels the reference executor uses) and asserts that its peak is exactly its outputs'
bytes plus what :func:`kernel_transient_bytes` says for the node traced from the same
call.  Shapes are chosen to cross each entry's branches (grouped and dilated
convolutions, NNPACK's batch of 16, the NC11 batch-norm path, flash attention's block
sizes at 16, 200 and 800 tokens, gradients laid out as the kernel reads them or not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from conformance.models.transients import TABLE, kernel_transient_bytes, reference_kernels
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

    for shape in ((2, 64, 8, 8), (2, 24, 4, 4), (1, 16, 1, 1), (2, 96, 1, 1), (8, 16, 1, 1), (8, 576, 1, 1)):
        for train in (False, True):
            if train and shape[0] == 1:
                continue
            calls.append(OpCall(f"batch-norm-{shape}-train{int(train)}", "native_batch_norm", _bn(train),
                                lambda shape=shape: bn_args(shape)))
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
    return calls


CALLS = _calls()


def _measured_extra(call: OpCall) -> tuple[int, int]:
    """(measured peak - output bytes, the table's bytes for the traced node)."""
    args = call.make_args()
    gm = make_fx(call.fn, tracing_mode="fake")(*args)
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


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
def test_transient_entry_is_what_the_kernel_allocates(call: OpCall) -> None:
    measured, modelled = _measured_extra(call)
    assert measured == modelled, f"{call.name}: kernel allocated {measured} B beyond its outputs, table: {modelled} B"


def test_every_entry_is_measured_here_or_in_the_generated_programs_test() -> None:
    elementwise = {"add", "sub", "mul", "div", "rsub", "remainder", "lt", "le", "gt", "ge", "eq", "ne",
                   "add_", "sub_", "mul_", "div_", "mean", "sum"}  # tests/test_generated_eager.py
    assert set(TABLE) <= {c.op for c in CALLS} | elementwise


def test_an_entry_that_is_wrong_fails() -> None:
    """The comparison can fail: a convolution without its columns buffer is caught."""
    call = next(c for c in CALLS if c.name == "conv-3x3-bias1")
    measured, modelled = _measured_extra(call)
    assert modelled > 0 and measured != 0
