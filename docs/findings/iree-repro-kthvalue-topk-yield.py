"""Repro: IREE cannot compile ``torch.kthvalue``: "'tm_tensor.topk' op region block must end with a linalg_ext.yield i1!".

Plain ``python docs/findings/iree-repro-kthvalue-topk-yield.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep on both IREE backends (``kthvalue``, inference and training, every sample).
torch-mlir lowers ``aten.kthvalue`` through ``tm_tensor.topk``, whose comparator region the IREE compiler's
verifier refuses ("region block must end with a linalg_ext.yield i1!"); ``torch.topk`` itself compiles.
"""

from __future__ import annotations

import torch

import iree.turbine.dynamo.backends.base  # noqa: F401  (backend="turbine_cpu", an entry point of iree-turbine)


def step(x: torch.Tensor) -> torch.Tensor:
    return torch.kthvalue(x, 2, 1)[0]


def main() -> int:
    x = torch.randn(5, 5)
    try:
        out = torch.compile(step, backend="turbine_cpu")(x)
    except Exception as e:  # the fault (the verifier's line is on stderr)
        print("FAULT:", type(e).__name__, str(e).splitlines()[1][:200] if "\n" in str(e) else str(e)[:200])
        return 1
    same = torch.equal(out, step(x))
    print(f"kthvalue compiled and ran; it {'matches' if same else 'DIFFERS from'} eager")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
