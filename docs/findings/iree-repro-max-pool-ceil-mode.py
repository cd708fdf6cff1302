"""Repro: IREE fails to compile ``max_pool2d`` with ``ceil_mode=True`` when the last window overhangs.

Plain ``python docs/findings/iree-repro-max-pool-ceil-mode.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep (``op-nn.functional.max_pool2d-1-infer``, OpInfo's sample: a (1, 2, 3, 6) input,
kernel 3, stride 2, ``ceil_mode=True``; also ``op-max_pool2d_with_indices_backward-1-train`` and
``op-nn.functional.max_pool3d-0-train``).  The graph imports; IREE's lowering then builds a
``linalg.generic`` whose operand shapes disagree: ``'linalg.generic' op inferred input/output operand #1
has shape's dimension #0 to be 5, but found 3``.  The same op with ``ceil_mode=False`` compiles and
matches eager, so the fault is the ceil-mode output size (the overhanging window) in the lowering.
"""

from __future__ import annotations

import sys

import torch


def run(ceil_mode: bool) -> bool:
    def pool(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.max_pool2d(x, kernel_size=3, stride=2, padding=0, ceil_mode=ceil_mode)

    x = torch.randn(1, 2, 3, 6)
    torch._dynamo.reset()
    compiled = torch.compile(pool, backend="iree_turbine")  # iree-turbine's own backend
    try:
        err = (compiled(x) - pool(x)).abs().max().item()
    except Exception as exc:
        lines = [ln for ln in str(exc).splitlines() if "error" in ln.lower() or "failed" in ln.lower()]
        print(f"ceil_mode={ceil_mode}: {type(exc).__name__}: {(lines or ['?'])[0][:240]} (IREE's diagnostic: stderr)")
        return False
    print(f"ceil_mode={ceil_mode}: compiled, max abs err vs eager {err:.3g}")
    return err == 0.0


def main() -> int:
    control = run(ceil_mode=False)
    fault = not run(ceil_mode=True)
    return 1 if fault and control else 0 if control else 2


if __name__ == "__main__":
    sys.exit(main())
