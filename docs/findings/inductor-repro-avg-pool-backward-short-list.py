"""Repro: inductor cannot compile avg_pool2d's backward when a window argument has one entry (torch 2.13.0, CPU).

`F.avg_pool2d(x, 3, stride=1, padding=[1])` is valid PyTorch: a one-entry list stands for both dimensions, and
eager and inductor's forward lowering (`pad_listlike`) accept it.  The backward lowering
(`torch/_inductor/lowering.py`, `avg_pool2d_backward`) asserts `len(padding) == 2` (and the same of
`kernel_size` and `stride`) without padding the list first, so every training step through such a pool fails
to compile: `LoweringException: AssertionError: target: aten.avg_pool2d_backward.default ... args[4]: [1]`.
The op sweep met it on OpInfo's avg_pool2d sample 3 (`padding=[1]`, ceil_mode, divisor_override=2); the forward
fix for one-entry lists was pytorch/pytorch#96727 (2023).  Plain `python`, no harness.  Exit status 1 while
inductor refuses the backward, 0 once it compiles it and matches eager.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def step(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x, 3, stride=1, padding=[1]).square().sum()


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 5, requires_grad=True)
    step(x).backward()
    expected, x.grad = x.grad, None
    try:
        torch.compile(step, backend="inductor")(x).backward()
    except Exception as exc:  # torch._inductor.exc.InductorError (a BackendCompilerFailed on older releases)
        print(f"inductor refuses the backward: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        return 1
    assert x.grad is not None
    same = torch.allclose(x.grad, expected, rtol=1e-5, atol=1e-6)
    print("inductor compiles the backward" + (" and matches eager" if same else ", but the gradient differs"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
