"""Repro: inductor computes a wrong gradient through ``torch.linalg.eig`` when the loss reads both its outputs.

Plain ``python docs/findings/inductor-repro-eig-backward.py`` (torch only, no harness, CPU).  Exit status 1
while the fault shows, 0 once it is fixed.

Found by the op sweep (``op-linalg.eig-0-train``, ``op-linalg.eig-1-train`` on ``inductor``: ``fail-parity`` at
the first call, the input's gradient off by 0.08 and 0.32 where eager float32 agrees with the float64 reference
to 1e-7).  The sweep's loss reads the eigenvalues through ``view_as_real`` and the eigenvectors through ``abs``
(OpInfo's ``out_fn``: their phase is free).  Each term alone is right once compiled, and so is
``R(w).mean() + |v|^2.mean()``; ``R(w).square().mean() + |v|.mean()`` is wrong.  ``aot_eager`` and
``aot_eager_decomp_partition`` give eager's gradient, so the decompositions and the partition are right and
inductor's lowering is not: the same family as ``inductor-repro-polar-backward.py`` (a squared real view of a
complex result in the loss).  torch 2.13.0+cpu.
"""

from __future__ import annotations

import warnings

import torch

#: op_db's first CPU float32 sample of ``linalg.eig`` (``make_tensor`` in [-1, 1) can make any such matrix fail)
X = torch.tensor([[-1.1150, -0.3856, -0.1023, -0.0059, -0.7138],
                  [0.5552, -0.8852, -0.4479, 0.1239, -0.3515],
                  [-0.0760, -0.0838, 0.6581, 0.5892, 0.0464],
                  [0.1046, -0.5270, 0.6051, -0.3112, 0.4469],
                  [-0.0015, -0.5042, -0.0892, 0.5436, 0.7815]])


def step(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    w, v = torch.linalg.eig(x * scale)
    return torch.view_as_real(w).square().mean() + v.abs().mean()


def gradient(backend: str | None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    torch._dynamo.reset()
    scale = torch.ones(5, 5, dtype=dtype, requires_grad=True)
    fn = step if backend is None else torch.compile(step, backend=backend, fullgraph=True)
    fn(X.to(dtype), scale).backward()
    assert scale.grad is not None
    return scale.grad.float()


def main() -> int:
    warnings.simplefilter("ignore")  # inductor's "no code generation for complex operators"
    reference = gradient(None, torch.float64)
    errors = {name: (gradient(backend) - reference).abs().max().item()
              for name, backend in [("eager", None), ("aot_eager", "aot_eager"),
                                    ("aot_eager_decomp_partition", "aot_eager_decomp_partition"),
                                    ("inductor", "inductor")]}
    for name, err in errors.items():
        print(f"{name:>27}: max |grad - float64 grad| = {err:.3g}")
    wrong = errors["inductor"] > 1e-4 and errors["eager"] < 1e-5
    print(f"torch {torch.__version__}: {'inductor gradient is wrong' if wrong else 'inductor agrees with eager'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
