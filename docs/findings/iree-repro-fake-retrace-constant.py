"""Repro: iree-turbine's ``torch.compile`` backend fails on a backward graph that holds a real tensor constant.

Plain ``python docs/findings/iree-repro-fake-retrace-constant.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep on both IREE backends (16 training pairs on stock ``iree``: ``atan2``, ``clamp``,
``clamp_min``, ``masked.normalize``, ... ``-train``), and by a user's Conv1d + LSTM classifier (issue 36).
AOTAutograd's backward of ``clamp`` is ``where(mask, grad, tensor(0.))``: the 0-d zero is a real tensor
constant of the graph.  Turbine's pass pipeline (``turbine_cpu_pass_pipeline``) traces the graph again under
``FakeTensorMode``, which refuses the real constant: "Please convert all Tensors to FakeTensors first or
instantiate FakeTensorMode with 'allow_non_fake_inputs'. Found in aten.where.self(...)".  The forward
compiles; eager PyTorch and inductor run the same step.
"""

from __future__ import annotations

import torch

import iree.turbine.dynamo.backends.base  # noqa: F401  (backend="turbine_cpu", an entry point of iree-turbine)


def step(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, min=-0.5, max=0.5).square().sum()


def main() -> int:
    x = torch.randn(5, 5, requires_grad=True)
    eager_grad = torch.autograd.grad(step(x), x)[0]
    try:
        loss = torch.compile(step, backend="turbine_cpu")(x)
        grad = torch.autograd.grad(loss, x)[0]
    except Exception as e:  # the fault
        text = str(e)
        at = text.find("Please convert")
        print("FAULT:", type(e).__name__, text[at:at + 160] if at >= 0 else text[:300])
        return 1
    same = torch.allclose(grad, eager_grad, atol=1e-6)
    print(f"the compiled backward ran; its gradient {'matches' if same else 'DIFFERS from'} eager's")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
