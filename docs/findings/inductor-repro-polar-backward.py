"""Repro: inductor computes wrong gradients for ``torch.polar`` seen through ``view_as_real`` and squared.

Plain ``python docs/findings/inductor-repro-polar-backward.py`` (torch only, no harness, CPU).  Exit status 1
while the fault shows, 0 once it is fixed.

Found by the op sweep (``op-polar-0-train``, ``op-polar-1-train`` on ``inductor``: ``fail-parity``, the
gradient of ``abs`` off by up to 4x and that of ``angle`` about 0, where eager float32 agrees with the float64
reference to 1e-7).  ``aot_eager`` and ``aot_eager_decomp_partition`` give eager's gradients, so the
decompositions and the partition are right and inductor's lowering is not.  A loss linear in the result
(``sum``, ``mean``) is right; squaring the real view is what breaks it: here the loss is ``|z|^2 = abs^2``,
whose gradient is ``2 * abs`` (and 0 for the angle), and inductor returns ``4 * abs``.  Inductor warns that it generates no
code for complex operators and falls back; its backward takes the conjugate as a lazy view
(``aten._conj``) and clones it before multiplying (read with ``TORCH_LOGS=output_code``): a lead, not a
finding.  torch 2.13.0+cpu.
"""

from __future__ import annotations

import warnings

import torch


def step(a: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(torch.polar(a, angle)).square().sum()


def gradients(backend: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    a = (torch.rand(5) + 0.5).requires_grad_()
    angle = torch.randn(5).requires_grad_()
    fn = step if backend is None else torch.compile(step, backend=backend, fullgraph=True)
    fn(a, angle).backward()
    assert a.grad is not None and angle.grad is not None
    return a.grad, angle.grad


def main() -> int:
    warnings.simplefilter("ignore")  # inductor's "no code generation for complex operators"
    eager = gradients(None)
    wrong = False
    for backend in ("aot_eager_decomp_partition", "inductor"):
        got = gradients(backend)
        same = all(torch.allclose(g, e, rtol=1e-5, atol=1e-6) for g, e in zip(got, eager))
        print(f"{backend:28s} d/d abs {got[0].tolist()}\n{'':28s} d/d angle {got[1].tolist()}  "
              f"{'matches eager' if same else 'WRONG'}")
        wrong = wrong or not same
    print(f"{'eager':28s} d/d abs {eager[0].tolist()}\n{'':28s} d/d angle {eager[1].tolist()}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
