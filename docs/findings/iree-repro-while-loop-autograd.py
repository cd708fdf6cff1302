"""Repro: a ``while_loop`` under autograd cannot reach IREE: the importer has no ``while_loop_stack_output``.

Plain ``python docs/findings/iree-repro-while-loop-autograd.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

AOTAutograd (``torch.compile``) cannot trace the backward of a loop whose trip count is data (it
needs ``aten._local_scalar_dense``), so Dynamo runs such a training step in eager and IREE compiles
nothing.  Traced whole instead (``make_fx`` of forward, loss and ``torch.autograd.grad``), the
forward loop becomes ``while_loop_stack_output`` (every trip's carry kept, stacked, for the
backward's loop), and turbine's FX importer has no lowering for it: ``NotImplementedError:
Higher-order operation 'while_loop_stack_output' not implemented in the FxImporter``.  The
loop-rnn-t*-train cases on both IREE backends (``iree-boxed`` names it before import).
"""

from __future__ import annotations

import sys

import torch
from torch._higher_order_ops.while_loop import while_loop
from torch.fx.experimental.proxy_tensor import make_fx


def step(w: torch.Tensor, h: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    def cond(i, h, n, w):  # type: ignore[no-untyped-def]
        return i < n

    def body(i, h, n, w):  # type: ignore[no-untyped-def]
        return i + 1, torch.tanh(h @ w), n.clone(), w.clone()

    out = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h, steps, w))[1]
    loss = out.square().mean()
    (grad,) = torch.autograd.grad(loss, [w])
    return loss, grad


def main() -> int:
    from iree.compiler.extras.fx_importer import FxImporter

    w = torch.randn(16, 16, requires_grad=True)
    gm = make_fx(step, tracing_mode="fake")(w, torch.randn(4, 16), torch.tensor(3))  # fake: the trip count is data
    hops = sorted({n.target.name() for n in gm.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator)})
    print(f"traced step's loops: {hops}")
    try:
        FxImporter().import_graph_module(gm)
    except NotImplementedError as exc:
        print(f"import: NotImplementedError: {exc}")
        return 1
    print("import: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
