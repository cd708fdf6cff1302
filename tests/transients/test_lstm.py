"""oneDNN's LSTM layer (``conformance/models/transients/lstm.py``, the users' kernels): its workspace and
what it allocates inside the call, within the bounds across vector ISAs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from conformance.models.transients import GRAD_ENABLED, kernel_storage_slack, kernel_transient_bounds
from conformance.probes.cpu import CpuAllocatorProbe

aten = torch.ops.aten

#: (sequence, batch, input, hidden): hidden sizes on and off the AVX2/AVX-512 blocks (16, 32), leading
#: dimensions padded by get_good_ld or already good (16, 64), 256 gate columns (get_good_ld's 4K step),
#: a batch of 128 and more (the forward's GEMM not merged over the sequence), one step and one sample
LSTM_LAYERS = [(5, 3, 8, 12), (1, 1, 3, 5), (7, 5, 100, 70), (20, 3, 8, 64), (4, 130, 16, 16), (6, 2, 17, 33)]


def _lstm_layer_args(t: int, n: int, i: int, h: int) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(t * 1000 + h)
    return (torch.randn(t, n, i, generator=gen), torch.randn(4 * h, i, generator=gen),
            torch.randn(4 * h, h, generator=gen), torch.randn(4 * h, generator=gen), torch.randn(4 * h, generator=gen),
            torch.randn(n, h, generator=gen), torch.randn(n, h, generator=gen))


def _lstm_forward(reverse: bool) -> Callable[..., Any]:
    def f(x: Any, w0: Any, w1: Any, w2: Any, w3: Any, hx: Any, cx: Any) -> Any:
        return aten.mkldnn_rnn_layer.default(x, w0, w1, w2, w3, hx, cx, reverse, [], 2, hx.shape[-1], 1, True,
                                             False, False, True)
    return f


def _onednn_node(fn: Callable[..., Any], args: tuple[Any, ...], op: str, grad: bool) -> torch.fx.Node:
    with torch.enable_grad() if grad else torch.no_grad():
        gm = make_fx(fn, tracing_mode="fake")(*args)
    (node,) = [n for n in gm.graph.nodes if str(n.target) == f"aten.{op}.default"]
    node.meta[GRAD_ENABLED] = grad
    return node


def _probe(fn: Callable[..., Any], args: tuple[Any, ...], grad: bool) -> tuple[int, list[int]]:
    """The call's peak beyond its outputs' storages, and those storages' sizes."""
    with torch.enable_grad() if grad else torch.no_grad():
        fn(*args)  # warm-up: oneDNN's primitive cache and one-time allocations stay out of the window
        with CpuAllocatorProbe() as probe:
            out = fn(*args)
            sizes = [t.untyped_storage().nbytes() if t is not None and t.numel() else 0 for t in out]
            del out
    return probe.trace.peak_bytes - sum(sizes), sizes


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("shape", LSTM_LAYERS, ids=[f"T{t}-N{n}-I{i}-H{h}" for t, n, i, h in LSTM_LAYERS])
def test_onednn_lstm_layer_is_within_its_bounds(shape: tuple[int, int, int, int], grad: bool, reverse: bool) -> None:
    """``mkldnn_rnn_layer``: its workspace is oneDNN's to the byte; what it allocates inside the call is
    within the bounds across vector ISAs (on this CPU: one of their ends' inputs, so within them)."""
    args = _lstm_layer_args(*shape)
    fn = _lstm_forward(reverse)
    node = _onednn_node(fn, args, "mkldnn_rnn_layer", grad)
    extra, sizes = _probe(fn, args, grad)
    fake = node.meta["val"]
    assert sizes[3] == fake[3].untyped_storage().nbytes() + kernel_storage_slack(node, fake[3])
    bounds = kernel_transient_bounds(node)
    assert extra in bounds, f"{shape}: {extra} B beyond the outputs, bounds {bounds}"
    if grad:  # the reference GEMM path: nothing depends on the ISA
        assert bounds.low == bounds.high == extra


@pytest.mark.parametrize("given", ["all", "output-only"])
@pytest.mark.parametrize("shape", LSTM_LAYERS, ids=[f"T{t}-N{n}-I{i}-H{h}" for t, n, i, h in LSTM_LAYERS])
def test_onednn_lstm_layer_backward_is_what_it_allocates(shape: tuple[int, int, int, int], given: str) -> None:
    """``mkldnn_rnn_layer_backward``, with every output gradient given or the output's only (zeros made
    for ``hy``'s and ``cy``'s): exact, the backward runs the reference GEMM path on every ISA."""
    args = _lstm_layer_args(*shape)
    with torch.enable_grad():
        out, hy, cy, ws = _lstm_forward(False)(*args)
    given_grads = [torch.randn_like(out)] + ([torch.randn_like(hy), torch.randn_like(cy)] if given == "all" else [])

    def bw(x: Any, w0: Any, w1: Any, w2: Any, w3: Any, hx: Any, cx: Any, y: Any, hy: Any, cy: Any, ws: Any,
           *grads: Any) -> Any:
        g = [*grads, None, None][:3]
        return aten.mkldnn_rnn_layer_backward.default(x, w0, w1, w2, w3, hx, cx, y, hy, cy, *g, False, 2,
                                                      hx.shape[-1], 1, True, True, False, [], False, ws)

    args = (*args, out.detach(), hy.detach(), cy.detach(), ws, *given_grads)
    node = _onednn_node(bw, args, "mkldnn_rnn_layer_backward", True)
    extra, _ = _probe(bw, args, True)
    bounds = kernel_transient_bounds(node)
    assert bounds.low == bounds.high == extra, f"{shape}: {extra} B beyond the outputs, table {bounds}"
