"""Repro: inductor's avg_pool backward divides a ceil_mode window that overhangs the input by the whole kernel
(torch 2.13.0, CPU): a wrong gradient, with a right forward.

With `ceil_mode=True` the last window may start inside the input and end past it, beyond the padding too.  Eager's
kernel (and inductor's forward lowering) divide such a window by the part of it inside the padded input,
`min(start + k, size + pad) - start`, when `count_include_pad=True` (the default).  Inductor's backward lowering
(`torch/_inductor/lowering.py`, `avg_pool2d_backward`, which avg_pool1d's backward reaches too) divides by the
kernel size whenever `count_include_pad` is set, so the input elements of that window get too small a gradient:
here `AvgPool2d(2, stride=3, ceil_mode=True)` on a 7x7 input, whose last row and column of windows hold one real
element each (1/2 of the gradient they should get along an edge, 1/4 in the corner).  The op sweep met it on
OpInfo's avg_pool1d sample 2 (kernel 6, stride 3, padding 2, ceil_mode, count_include_pad: the last window holds
two input elements and two padding positions of six: divided by 6, not 4), later samples.  Reported upstream as
pytorch/pytorch#198119 (open).  Plain `python`, no harness.  Exit status 1 while the gradients differ, 0 once
they match eager's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pool2d(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x, 2, stride=3, ceil_mode=True)


def pool1d(x: torch.Tensor) -> torch.Tensor:  # the op sweep's sample
    return F.avg_pool1d(x, 6, stride=3, padding=2, ceil_mode=True, count_include_pad=True)


def gradients(pool: object, x: torch.Tensor, backend: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    fn = pool if backend is None else torch.compile(pool, backend=backend)
    out = fn(x)  # type: ignore[operator]
    out.sum().backward()
    assert x.grad is not None
    return out.detach(), x.grad


def main() -> int:
    torch.manual_seed(0)
    wrong = False
    for pool, x in ((pool2d, torch.randn(1, 1, 7, 7)), (pool1d, torch.randn(1, 3, 9))):
        (out, grad), (out_c, grad_c) = gradients(pool, x, None), gradients(pool, x, "inductor")
        forward_same = torch.allclose(out, out_c, rtol=1e-5, atol=1e-6)
        backward_same = torch.allclose(grad, grad_c, rtol=1e-5, atol=1e-6)
        print(f"{pool.__name__}: forward {'matches' if forward_same else 'DIFFERS'}, gradient "
              f"{'matches' if backward_same else 'DIFFERS'} (largest difference "
              f"{(grad - grad_c).abs().max().item():.4g}; eager's last input gradient "
              f"{grad.flatten()[-1].item():.4g}, inductor's {grad_c.flatten()[-1].item():.4g})")
        wrong |= not (forward_same and backward_same)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
