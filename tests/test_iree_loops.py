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
