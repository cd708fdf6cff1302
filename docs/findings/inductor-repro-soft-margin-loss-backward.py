"""Repro: ``soft_margin_loss``'s gradient loses its precision under inductor where the margin is large.

Plain ``python docs/findings/inductor-repro-soft-margin-loss-backward.py`` (torch only, no harness, CPU).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep (``op-nn.functional.soft_margin_loss-0-train`` on ``inductor``: ``fail-parity``, the
input's gradient 13.6% off, 7.6e-8 absolute on a 5.6e-7 gradient, where eager float32 agrees with the float64
reference to 2e-13).  The cause is torch's Python decomposition of ``aten.soft_margin_loss_backward``
(``torch/_decomp/decompositions.py``): ``target * grad_output * (torch.sigmoid(target * self) - 1)``.  Where
``target * self`` is large, ``sigmoid`` rounds to about 1 and the subtraction cancels: float32 keeps only the
bits above its ulp at 1 (6e-8), so a gradient of 3e-7 comes out with one or two significant digits.  Eager's
kernel computes the same value without the cancellation (as ``-sigmoid(-target * self)`` does).  ``aot_eager``
(no decompositions) is exact, ``aot_eager_decomp_partition`` and ``inductor`` are not.  torch 2.13.0+cpu.
"""

from __future__ import annotations

import torch


def gradient(x: torch.Tensor, y: torch.Tensor, backend: str | None) -> torch.Tensor:
    torch._dynamo.reset()
    x = x.clone().requires_grad_()
    loss = torch.nn.functional.soft_margin_loss
    fn = loss if backend is None else torch.compile(loss, backend=backend, fullgraph=True)
    fn(x, y).backward()
    assert x.grad is not None
    return x.grad


def main() -> int:
    x = torch.tensor([8.0, 9.0, 10.0, 12.0])  # margins target * x of 8 to 12: sigmoid(margin) is 1 - 6e-6 and less
    y = torch.ones(4)
    exact = gradient(x.double(), y.double(), None)
    wrong = False
    for backend in (None, "aot_eager", "aot_eager_decomp_partition", "inductor"):
        got = gradient(x, y, backend).double()
        error = ((got - exact).abs() / exact.abs()).max().item()
        bad = error > 1e-4  # float32 computes this gradient to about 1e-7 relative without the cancellation
        wrong = wrong or bad
        print(f"{backend or 'eager':28s} gradient {got.tolist()}  max relative error {error:.2g}"
              f"{'  WRONG' if bad else ''}")
    print(f"{'float64':28s} gradient {exact.tolist()}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
