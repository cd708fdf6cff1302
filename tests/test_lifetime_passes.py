"""The lifetime model's passes on their own: liveness as data, reference counting, a call's convention."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from conformance.models.lifetime import CallingConvention, ModelBuilder, Observation, release_schedule
from conformance.models.lifetime.graph import GraphWalker

F = 4  # bytes per float32


def test_release_schedule_drops_each_value_after_its_last_user_and_never_a_returned_one() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(operator.neg, (x,))
    b = graph.call_function(operator.add, (a, x))  # last use of x
    unused = graph.call_function(operator.abs, (b,))
    c = graph.call_function(operator.mul, (a, b))  # last use of a and b
    graph.output((c, a))
    schedule = release_schedule(graph)
    assert schedule[b] == [x]
    assert schedule[unused] == [unused]  # nobody uses it: dropped right after it is made
    assert schedule[c] == [b]  # `a` is returned: never dropped
    assert all(a not in dropped and c not in dropped for dropped in schedule.values())


def test_a_storage_dies_at_the_event_its_last_reference_goes() -> None:
    builder = ModelBuilder(Observation())
    caller = builder.caller_input(torch.empty(4), "x")
    s = builder.new_storage(16, "p", "op", None, "intermediate")
    builder.acquire([s, caller])
    builder.acquire(s)
    builder.event("first", transient_bytes=8)  # inside the op only
    builder.release(s)
    builder.event("second")
    builder.release((s, caller))
    builder.event("third")
    assert builder.live == [16 + 8, 16, 0]
    assert s.birth == 0 and s.death == 1  # after "second", the event at which its last reference went
    assert caller.nbytes == 0 and caller.death is None  # the caller's: costs the step nothing, never dies here


@pytest.mark.parametrize("nbytes, aligned", [(1, 64), (64, 64), (65, 128), (0, 0)])
def test_results_at_start_are_rounded_up_to_the_alignment(nbytes: int, aligned: int) -> None:
    assert CallingConvention(results_at_start=64).result_nbytes(nbytes) == aligned


def _add_one() -> torch.fx.GraphModule:
    return make_fx(lambda x: x + 1, tracing_mode="fake")(torch.randn(10))


@pytest.mark.parametrize("donated", [True, False])
def test_a_staged_call_holds_its_input_copy_and_allocates_its_result_first(donated: bool) -> None:
    gm = _add_one()
    builder = ModelBuilder(Observation())
    (x_val,) = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    x = builder.new_storage(10 * F, "made", "op", x_val, "intermediate")  # an earlier op's value
    builder.acquire(x)
    builder.event("made")
    convention = CallingConvention(donated=donated, staged=True, results_at_start=64)
    (out,) = GraphWalker(builder).run_graph(gm, [x], "", convention)
    copy = next(s for s in builder.storages if s.role == "staging")
    assert builder.events == ["made", "stage:x_1", "results", "add"]
    assert (copy.nbytes, out.nbytes) == (10 * F, 10 * F)  # the call's only result buffer: no pack, exact
    assert (copy.birth, out.birth) == (1, 2)
    assert copy.death == 3  # held by the call until it returns, past its last use
    # a donated original dies once it is copied (both live while copying); one the caller keeps
    # lives through the call
    assert x.death == (1 if donated else None)
    assert builder.live == ([40, 80, 80, 80] if donated else [40, 80, 120, 120])


def _results(fn: object) -> list[int]:
    gm = make_fx(fn, tracing_mode="fake")(torch.randn(10))
    builder = ModelBuilder(Observation())
    convention = CallingConvention(donated=True, staged=True, results_at_start=64)
    GraphWalker(builder).run_graph(gm, [builder.caller_input(torch.empty(10), "x")], "", convention)
    return [s.nbytes for s in builder.storages if s.role == "intermediate"]


@pytest.mark.parametrize("fn, buffers", [
    (lambda x: (x + 1,), [40]),  # one result: `stream.resource.alloca ... {%c40}`
    (lambda x: (x + 1, x * 2), [64, 64]),  # two: one 128 B pack, slots at offsets 0 and 64
    (lambda x: ((x + 1), (x + 1).detach()), [64, 64]),  # two values (two adds): two slots
    (lambda x: (lambda y: (y, y.detach()))(x + 1), [40]),  # `util.return %3, %3`: one buffer
    (lambda x: (lambda y: (y, y.view(2, 5)))(x + 1), [40]),  # a contiguous view: the same buffer
    (lambda x: (lambda y: (y, y.t()))((x + 1).view(2, 5)), [64, 64]),  # a transpose: materialised
    (lambda x: (x + 1, x), [40]),  # an input returned: `util.return %3, %arg0`, no buffer for it
    (lambda x: (x + 1, x.detach()), [40]),
])
def test_result_buffers_at_start_are_those_iree_allocates(fn: object, buffers: list[int]) -> None:
    """The buffers a staged call allocates for its results at its start, as iree-compile 3.13's stream
    IR allocates them (``--compile-to=stream`` on these functions: docs/findings/README.md)."""
    assert _results(fn) == buffers


def test_a_view_lives_in_its_bases_storage_where_a_pass_remade_the_bases_fake_value() -> None:
    """A pass that replaces a node keeps its views' fake values on the old storage (inductor's inference graphs:
    BERT's layer norm output, viewed for three projections): the views still live in the base's model storage, so
    the base is counted once and never dies while a view is alive (before: each view made a storage of its own,
    which died and was taken again, and the model lost its bytes: 5488 B for a 9072 B program on BERT)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x + 1
        return a.view(16).sum() + a.view(4, 4).sum(), a * 2

    with FakeTensorMode() as mode:
        gm = make_fx(fn)(torch.empty(4, 4))
        add = next(n for n in gm.graph.nodes if n.op == "call_function" and "add" in str(n.target))
        add.meta["val"] = torch.empty(4, 4)  # remade by a pass: a fresh storage; the views keep the old one
        assert mode is not None
    builder = ModelBuilder(Observation())
    inputs = [builder.caller_input(n.meta["val"], n.name) for n in gm.graph.nodes if n.op == "placeholder"]
    outputs = GraphWalker(builder).run_graph(gm, inputs, "")
    model = builder.finish(outputs, set())
    a = [s for s in model.storages if s.nbytes == 16 * F and s.role != "caller"]
    assert [s.producer for s in a if "add" in s.producer] == ["add"], [s.producer for s in a]
    assert not any("view" in s.producer for s in model.storages)  # no view has a storage of its own
    assert all(b >= 0 for b in model.live_bytes) and model.peak_bytes == 2 * 16 * F + F  # a, a * 2, the sum
