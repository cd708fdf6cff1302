"""The lifetime model's arithmetic on small graphs whose answers are worked out by hand."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from conformance.models.interpreter import GraphExecutor
from conformance.models.lifetime import model_graph, release_schedule

F = 4  # bytes per float32


def _model(fn, *args, retained=()):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    ex = GraphExecutor(label_ranges=False)
    with torch.no_grad():
        ex.run(gm, list(args))
    # Storage arithmetic only: what eager kernels allocate inside an op is tested below.
    return model_graph(gm, ex.observation, retained, kernel_transients=False)


def test_chain_frees_each_value_after_its_last_use() -> None:
    x = torch.randn(10)
    m = _model(lambda x: ((x + 1) * 2) - 3, x)
    # x+1 and its product coexist, then the product and the result: never three at once
    assert m.peak_bytes == 2 * 10 * F
    assert m.residual_bytes == 0 and m.end_bytes == 10 * F  # the output is held until dropped


def test_caller_owned_inputs_cost_nothing() -> None:
    x = torch.randn(100)
    m = _model(lambda x: x.sum(), x)
    assert m.peak_bytes == F


def test_a_view_keeps_its_base_alive() -> None:
    x = torch.randn(8, 8)

    def f(x):
        base = x * 2  # 256 B
        v = base[0]  # view: no new storage
        big = x + 1  # 256 B, born while `base` is only reachable through `v`
        return (big * v).sum()

    m = _model(f, x)
    assert m.peak_bytes == 3 * 64 * F  # base (held by v) + big + product
    views = [s for s in m.storages if s.producer == "select"]
    assert not views  # the view made no storage of its own


def test_fan_out_keeps_value_until_its_last_far_use() -> None:
    x = torch.randn(16)

    def f(x):
        a = x.exp()
        b = x.sin().cos().tanh()
        return a + b

    m = _model(f, x)
    a = next(s for s in m.storages if s.producer == "exp")
    assert m.events[a.death] == "add"


def test_multi_output_op_items_die_independently() -> None:
    x = torch.randn(4, 8)

    def f(x):
        var, mean = torch.var_mean(x, dim=1)
        early = var.exp()  # last use of var
        late = (x * 3).sum(1)
        return early + late + mean

    m = _model(f, x)
    var = next(s for s in m.storages if s.producer == "var_mean" and s.sid == min(
        t.sid for t in m.storages if t.producer == "var_mean"))
    assert m.events[var.death] == "exp"


def test_in_place_update_allocates_nothing() -> None:
    x = torch.randn(32)

    def f(x):
        y = x * 2
        y.add_(1)
        return y

    m = _model(f, x)
    assert m.peak_bytes == 32 * F
    assert len([s for s in m.storages if s.role != "caller"]) == 1


def test_retained_outputs_are_the_residual() -> None:
    w = torch.randn(5, 5)
    m = _model(lambda w: (w.sum(), w * 2), w, retained=[1])
    assert m.residual_bytes == 25 * F


def test_release_schedule_drops_unused_values_at_once() -> None:
    gm = make_fx(lambda x: (x.exp(), x.sin())[1], tracing_mode="fake")(torch.randn(3))
    sched = release_schedule(gm.graph)
    exp = next(n for n in gm.graph.nodes if n.name == "exp")
    assert exp in sched[exp]


def test_while_loop_carry_is_replaced_each_trip_and_peak_does_not_grow() -> None:
    from torch._higher_order_ops.while_loop import while_loop

    def f(h, n):
        def cond(i, h):
            return i < n

        def body(i, h):
            return i + 1, torch.tanh(h * 2)

        return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h))[1]

    h = torch.randn(64)
    m3 = _model(f, h, torch.tensor(3))
    m9 = _model(f, h, torch.tensor(9))
    assert m9.peak_bytes == m3.peak_bytes
    assert len(m9.events) > len(m3.events)  # unrolled with the observed trip count


def test_kernel_transients_are_named_and_counted_on_top() -> None:
    """A Python scalar operand is wrapped into an 8-byte tensor inside the kernel: the model says so."""
    x = torch.randn(10)
    gm = make_fx(lambda x: (x + 1) * 2, tracing_mode="fake")(x)
    ex = GraphExecutor(label_ranges=False)
    with torch.no_grad():
        ex.run(gm, [x])
    plain = model_graph(gm, ex.observation, kernel_transients=False)
    with_kernels = model_graph(gm, ex.observation)
    assert plain.peak_bytes == 2 * 10 * F
    assert with_kernels.peak_bytes > plain.peak_bytes
    assert with_kernels.peak_bytes - plain.peak_bytes <= 2 * (8 + F)  # one wrapped scalar (+cast) per op
