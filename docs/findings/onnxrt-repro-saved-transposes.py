"""Repro: exported to ONNX, a training step's forward returns copies of its transposed weights.

Plain ``python docs/findings/onnxrt-repro-saved-transposes.py`` (torch + onnxscript, no harness).
Exit status 1 while the behaviour shows, 0 once it does not.

AOTAutograd's forward graph of an MLP saves ``t(weight)`` for the backward: in torch a view of the
parameter (no bytes of its own).  ``torch.onnx.export(..., dynamo=True)`` turns each into an ONNX
``Transpose``, an operator with an output of its own, and returns it as a graph output: ONNX Runtime
allocates it (a 512x512 float32 weight: 1,048,576 B) and it lives from the forward to the backward.
The backward's own transposes are copies too.  That is the peak above the received graphs' model on
the ``onnxrt`` backend's training steps (mlp-l-train: blocks of 1,048,576 and 524,288 B blamed, all
allocated by ONNX Runtime's library and freed by the step's end).
"""

from __future__ import annotations

import sys
import warnings

import torch
from functorch.compile import aot_function, make_boxed_func
from torch import nn

warnings.filterwarnings("ignore")
GRAPHS: list[tuple[torch.fx.GraphModule, list[torch.Tensor]]] = []


def grab(gm: torch.fx.GraphModule, args: list[torch.Tensor]) -> object:
    GRAPHS.append((gm, list(args)))
    return make_boxed_func(gm.forward)


def main() -> int:
    model = nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 8))
    names = [n for n, _ in model.named_parameters()]

    def step(x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, dict(zip(names, params)), (x,)).sum()

    aot_function(step, fw_compiler=grab, bw_compiler=grab)(torch.randn(64, 256), *model.parameters()).backward()
    forward, args = GRAPHS[0]
    out = next(n for n in forward.graph.nodes if n.op == "output")
    views = {a.name: tuple(a.meta["val"].shape) for a in out.args[0]
             if isinstance(a, torch.fx.Node) and str(a.target) in ("aten.t.default", "aten.permute.default")}
    print(f"the forward saves these views of parameters for the backward (no bytes in torch): {views}")
    program = torch.onnx.export(forward, tuple(args), dynamo=True, verbose=False, optimize=True)
    assert program is not None
    graph = program.model_proto.graph
    transposed = {o for n in graph.node if n.op_type == "Transpose" for o in n.output}
    copies = sorted(o.name for o in graph.output if o.name in transposed)
    print(f"exported forward: outputs made by a Transpose (new buffers in ONNX Runtime): {copies}")
    return 1 if copies else 0


if __name__ == "__main__":
    sys.exit(main())
