"""Combining memory domains, the staged/held lifetime models, and the backward-input watch."""

from __future__ import annotations

import json

import torch
from functorch.compile import aot_function, make_boxed_func

from conformance.models.donation import BackwardInputs, BackwardWatch, classify, saved_positions
from conformance.models.lifetime import model_forward_backward
from conformance.probes.cpu import MemoryTrace, combine_traces


def test_combine_traces_adds_domains_on_one_clock() -> None:
    a = MemoryTrace("torch-cpu", timeline=[(10, 100), (30, 0)])
    b = MemoryTrace("iree-hal", timeline=[(0, 0), (20, 1000), (40, 50)])
    c = combine_traces([a, b])
    assert c.timeline == [(0, 0), (10, 100), (20, 1100), (30, 1000), (40, 50)]
    assert c.peak_bytes == 1100 and c.residual_bytes == 50


def _graphs():
    graphs = {}

    def fw(gm, _):
        graphs["fw"] = gm
        return make_boxed_func(gm.forward)

    def bw(gm, _):
        graphs["bw"] = gm
        return make_boxed_func(gm.forward)

    f = aot_function(lambda x, w: torch.tanh(x @ w).sum(), fw_compiler=fw, bw_compiler=bw)
    f(torch.randn(8, 16), torch.randn(16, 32, requires_grad=True)).backward()
    return graphs["fw"], graphs["bw"]


def test_held_saved_inputs_cost_exactly_the_saved_bytes_at_the_backward_peak() -> None:
    fw, bw = _graphs()
    donated = model_forward_backward(fw, bw)
    held = model_forward_backward(fw, bw, saved_inputs="held")
    saved = [s for s in held.storages if s.role == "saved"]
    assert saved and all(s.nbytes == 8 * 32 * 4 for s in saved)  # tanh's output
    assert held.peak_bytes == donated.peak_bytes + sum(s.nbytes for s in saved)


def test_staged_inputs_are_charged_for_the_call() -> None:
    fw, bw = _graphs()
    plain = model_forward_backward(fw, bw)
    staged = model_forward_backward(fw, bw, staged=True)
    stages = [s for s in staged.storages if s.role == "staging"]
    assert {s.producer for s in stages} >= {"fw:stage:primals_1", "fw:stage:primals_2"}
    assert staged.peak_bytes > plain.peak_bytes
    assert staged.residual_bytes == plain.residual_bytes  # copies die with their call
    early = model_forward_backward(fw, bw, staged=True, results_at_start=64)
    assert early.peak_bytes >= staged.peak_bytes


def _backward_args(bw: torch.fx.GraphModule) -> list[torch.Tensor]:
    """Fresh tensors shaped like the backward's inputs (only the list's owner holds them)."""
    return [torch.empty(tuple(n.meta["val"].shape)) for n in bw.graph.nodes if n.op == "placeholder"]


def test_watch_tells_a_held_list_from_a_cleared_one() -> None:
    _, bw = _graphs()
    positions = saved_positions(bw)
    assert len(positions) == 1  # tanh's output; primals and tangents are not saved activations

    # the shipped convention: make_boxed_func unpacks, so the list stays alive for the call
    unpacking = make_boxed_func(lambda *xs: [x.sum() for x in xs])

    def boxed(a: list) -> list:  # inductor's: take the list over, drop each input after use
        pending = list(reversed(a))
        a.clear()
        out = []
        while pending:
            x = pending.pop()
            out.append(x.sum())
            del x
        return out

    boxed._boxed_call = True  # type: ignore[attr-defined]

    held_watch = BackwardWatch(unpacking, positions)
    held_watch(_backward_args(bw))
    assert held_watch.calls[0].held_bytes == 8 * 32 * 4 and not held_watch.calls[0].list_cleared
    boxed_watch = BackwardWatch(boxed, positions)
    boxed_watch(_backward_args(bw))
    assert boxed_watch.calls[0].held_bytes == 0 and boxed_watch.calls[0].list_cleared
    assert classify([held_watch], 0, None, None).verdict == "held-for-call"
    assert classify([boxed_watch], 0, None, None).verdict == "released-at-last-use"
    assert classify([], 0, None, None).verdict == "no-backward"
    # result.memory.findings holds exactly the dict classify returned before it returned BackwardInputs
    held = held_watch.calls[0]
    found = classify([held_watch], 100, None, None)
    assert found.to_json() == {"backward_inputs": "held-for-call", "backward_inputs_detail": {
        "measured_peak_bytes": 100, "model_peak_donated_bytes": None, "model_peak_held_bytes": None,
        "calls": [{"saved_bytes": held.saved_bytes, "held_bytes": held.held_bytes, "list_cleared": False}],
        "saved_bytes": held.saved_bytes, "held_bytes": held.held_bytes, "list_cleared": False,
        "still_allocated_bytes": 0}}
    assert list(found.to_json()["backward_inputs_detail"]) == [
        "measured_peak_bytes", "model_peak_donated_bytes", "model_peak_held_bytes", "calls", "saved_bytes",
        "held_bytes", "list_cleared", "still_allocated_bytes"]
    assert classify([], 7, None, None).to_json() == {"backward_inputs": "no-backward", "backward_inputs_detail": {
        "measured_peak_bytes": 7, "model_peak_donated_bytes": None, "model_peak_held_bytes": None, "calls": []}}
    for watches in ([held_watch], [boxed_watch], []):
        found = classify(watches, 100, None, None, still_allocated_bytes=3)
        assert BackwardInputs.from_memory(json.loads(json.dumps(found.to_json()))) == found
    assert BackwardInputs.from_memory({}) is None

    def reused(a: list) -> list:  # inductor reusing a saved activation in place for a gradient
        pending = list(reversed(a))
        a.clear()
        out = [pending[-1 - positions[0]].mul_(2.0)]  # the saved tensor itself, returned
        del pending
        return out

    reused._boxed_call = True  # type: ignore[attr-defined]
    reused_watch = BackwardWatch(reused, positions)
    reused_watch(_backward_args(bw))
    assert reused_watch.calls[0].held_bytes == 0  # alive as the gradient it became, not held
