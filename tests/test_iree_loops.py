"""The loop route's graph rewrite (:mod:`conformance.backends.iree_loops`), without IREE: on a graph
Dynamo and AOTAutograd hand a backend, with nested loops and several outer reads."""

from __future__ import annotations

from typing import Any

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch._higher_order_ops.while_loop import while_loop

from conformance.backends.iree_loops import lift_loop_inputs


class Nested(torch.nn.Module):
    """An outer loop reading ``w`` and ``steps``; an inner one reading ``b`` and the outer trip's ``h``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 6) / 3)
        self.b = torch.nn.Parameter(torch.randn(6))

    def forward(self, h: torch.Tensor, steps: torch.Tensor, inner: torch.Tensor) -> torch.Tensor:
        def inner_loop(h: torch.Tensor) -> torch.Tensor:
            def cond(j: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
                return j < inner

            def body(j: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return j + 1, torch.sin(g + self.b + h)

            return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), 2 * h))[1]

        def cond(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < steps

        def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(inner_loop(h) @ self.w)

        return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h))[1]


def _loops(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    found = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.while_loop]
    for child in gm.children():
        if isinstance(child, torch.fx.GraphModule):
            found += _loops(child)
    return found


def test_every_loop_loses_its_additional_inputs_and_computes_the_same() -> None:
    """The rewritten graph, run by torch on the real inputs, gives eager's result."""
    torch.manual_seed(0)
    model = Nested()
    args = (torch.randn(3, 6), torch.tensor(4), torch.tensor(2))
    seen: list[tuple[list[int], int, torch.fx.GraphModule]] = []

    def lift_then_run(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        reads = [len(n.args[3]) for n in _loops(gm)]
        seen.append((reads, lift_loop_inputs(gm), gm))
        return make_boxed_func(gm.forward)

    with torch.no_grad():
        expected = model(*args)
        got = torch.compile(model, backend=aot_autograd(fw_compiler=lift_then_run), fullgraph=True)(*args)
    ((reads, lifted, gm),) = seen
    assert len(reads) == 2 and all(reads) and lifted == 2  # both loops read from outside as received
    for node in _loops(gm):
        assert node.args[3] == () and len(node.meta["val"]) == len(node.args[2])
    torch.testing.assert_close(got, expected)


def _traced(module: torch.nn.Module, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    with torch.no_grad():
        torch.compile(module, backend=aot_autograd(fw_compiler=keep), fullgraph=True)(*inputs)
    return graphs[0]


class _AmaxCond(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def cond(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return (i < 3) & (h.abs().amax() < 1e4)

        def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(h * 2)

        return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))[1]


def test_a_full_amax_in_a_loop_condition_becomes_max_and_computes_the_same() -> None:
    from conformance.backends.iree_loops import max_for_full_amax

    x = torch.randn(4, 8)
    gm = _traced(_AmaxCond(), x)
    lift_loop_inputs(gm)  # the copies the route rewrites
    assert max_for_full_amax(gm) == 1
    targets = [n.target for m in gm.modules() for n in m.graph.nodes]  # type: ignore[union-attr]
    assert torch.ops.aten.amax.default not in targets and torch.ops.aten.max.default in targets
    with torch.no_grad():
        assert torch.equal(gm(x)[0], _AmaxCond()(x))


def test_a_python_number_carried_by_a_loop_is_named() -> None:
    from conformance.backends.iree_loops import non_tensor_carries

    class IntCarry(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, h * 2), (0, x))[1]

    assert "carries a Python number (carry 0: 0)" in non_tensor_carries(_traced(IntCarry(), torch.randn(3)))
    assert non_tensor_carries(_traced(_AmaxCond(), torch.randn(3))) == ""


def test_a_loop_in_a_loop_body_is_told_apart() -> None:
    """What the IREE verdict names (an inner loop's entry condition): only where a loop holds another."""
    from conformance.backends.iree_loops import has_nested_loop

    def flat(x: torch.Tensor) -> torch.Tensor:
        return while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, h * 2), (torch.zeros((), dtype=torch.int64), x))[1]

    def nested(x: torch.Tensor) -> torch.Tensor:
        def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, flat(h)

        return while_loop(lambda i, h: i < 2, body, (torch.zeros((), dtype=torch.int64), x))[1]

    seen: dict[str, bool] = {}
    for name, fn in (("flat", flat), ("nested", nested)):
        def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], name: str = name) -> Any:
            seen[name] = has_nested_loop(gm)
            return make_boxed_func(gm.forward)

        torch._dynamo.reset()
        torch.compile(fn, backend=aot_autograd(fw_compiler=backend), fullgraph=True)(torch.randn(2, 3))
    assert seen == {"flat": False, "nested": True}


class _NumberCarries(torch.nn.Module):
    """Users' int counters: compared with a constant or a size, used in the body as a scalar multiplier, returned."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8) / 3)

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        h = while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, torch.tanh(h @ self.w)), (0, x))[1]
        n, g = while_loop(lambda i, g: i < g.size(0), lambda i, g: (i + 1, torch.sin(g) * (i + 1)), (0, h))
        j, f = while_loop(lambda j, f: 2 * j + 1 < 9, lambda j, f: (j + 2, f - j), (1, g))
        return f * n, n + j


def test_number_carries_become_0d_tensors_and_compute_the_same() -> None:
    """Every int carry becomes a 0-d int64 tensor: the conditions return 0-d bool tensors, the body's ``i + 1`` and
    ``x * i`` stay tensor ops, and the loops' int results are read back where the program uses them."""
    from conformance.backends.iree_loops import non_tensor_carries, number_carries_as_tensors

    x = torch.randn(4, 8)
    module = _NumberCarries()
    gm = _traced(module, x)
    assert non_tensor_carries(gm)  # as received: three loops carry a Python int
    lift_loop_inputs(gm)
    assert number_carries_as_tensors(gm) == 3 and non_tensor_carries(gm) == ""
    for loop in _loops(gm):
        for sub in loop.args[:2]:
            sub_gm = getattr(loop.graph.owning_module, sub.target)
            vals = [n.meta.get("val") for n in sub_gm.graph.nodes if n.op != "output"]
            assert not any(isinstance(v, (torch.SymInt, torch.SymBool)) for v in vals), sub_gm.code
            (result,) = [n for n in sub_gm.graph.nodes if n.op == "output"]
            if sub is loop.args[0]:
                assert result.args[0].meta["val"].dtype == torch.bool and result.args[0].meta["val"].dim() == 0
    with torch.no_grad():
        expected, got = module(x), gm(x, module.w)
    assert isinstance(got[1], int) and got[1] == expected[1] == 4 + 5  # n (the size, 4) + j (5)
    torch.testing.assert_close(got[0], expected[0])


def test_a_size_the_loop_reads_from_outside_becomes_a_0d_tensor_lifted_or_not() -> None:
    """Under ``dynamic=True`` the condition's ``h.size(0)`` is a size the loop reads from outside (an additional
    input): the program (lifted) and the model (the received graph, not lifted) both take it as a 0-d tensor."""
    from conformance.api.aot import snapshot
    from conformance.backends.iree_loops import non_tensor_carries, number_carries_as_tensors

    def f(x: torch.Tensor) -> torch.Tensor:
        def body(i: Any, h: torch.Tensor) -> tuple[Any, torch.Tensor]:
            return i + 1, torch.sin(h) * (i + 1)

        n, h = while_loop(lambda i, h: i < h.size(0), body, (0, x))
        return h * n

    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch.compile(f, backend=aot_autograd(fw_compiler=keep), dynamic=True, fullgraph=True)(torch.randn(3, 4))
    (gm,) = graphs
    x = torch.randn(5, 4)
    for lift in (True, False):
        rewritten = snapshot(gm)  # its own outer graph, as the recorder keeps it; the rewrite copies the subgraphs
        if lift:
            lift_loop_inputs(rewritten)
        (loop,) = _loops(rewritten)
        reads_sizes = len(loop.args[3]) > 0
        assert reads_sizes != lift  # not lifted: the sizes stay additional inputs
        assert number_carries_as_tensors(rewritten) == 3 and non_tensor_carries(rewritten) == ""
        (loop,) = _loops(rewritten)
        assert all(isinstance(a.meta["val"], torch.Tensor) for a in (*loop.args[2], *loop.args[3]))
        sizes = [d for d in x.shape]  # the graph's symbolic sizes come first, as Dynamo passes them
        with torch.no_grad():
            torch.testing.assert_close(rewritten(*sizes, x)[0], f(x))
