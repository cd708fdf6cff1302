"""``AotRecorder.backend`` takes aot_autograd's ``decompositions`` (OpenVINO's backend needs its table)."""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions
from torch._functorch.aot_autograd import make_boxed_func

from conformance.api.aot import AotRecorder


def _runs(gm: torch.fx.GraphModule, _: object) -> object:
    return make_boxed_func(gm.forward)


def _targets(recorder: AotRecorder) -> set[object]:
    return {n.target for g in recorder.graphs for n in g.gm.graph.nodes if n.op == "call_function"}


def test_decompositions_reach_the_graphs_the_compilers_receive() -> None:
    hardsigmoid = torch.ops.aten.hardsigmoid.default
    table = get_decompositions([hardsigmoid, torch.ops.aten.hardsigmoid_backward.default])
    seen = {}
    for name, decompositions in (("as shipped", None), ("decomposed", table)):
        torch._dynamo.reset()
        recorder = AotRecorder()
        x = torch.randn(8, requires_grad=True)
        step = torch.compile(torch.nn.functional.hardsigmoid, backend=recorder.backend(_runs,
                                                                                         decompositions=decompositions))
        step(x).sum().backward()
        assert torch.allclose(x.grad, ((x > -3) & (x < 3)).float() / 6)  # the decomposed step still computes right
        seen[name] = _targets(recorder)
        assert len(recorder.graphs) == 2 and len(recorder.watches) == 1  # recorded and watched as before
    assert hardsigmoid in seen["as shipped"]
    assert hardsigmoid not in seen["decomposed"]
    assert torch.ops.aten.hardsigmoid_backward.default not in seen["decomposed"]
    torch._dynamo.reset()
