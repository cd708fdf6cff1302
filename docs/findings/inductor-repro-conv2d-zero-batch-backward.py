"""Inductor (CPU, torch 2.13.0): a Conv2d training step on a batch of 0 fails in the compiled backward.

common_nn's ``Conv2d_zero_batch`` (``nn.Conv2d(3, 4, (3, 2))`` on a 0 x 3 x 7 x 5 input), compiled with plain
``torch.compile``: the backward's ``assert_size_stride`` rejects ``convolution_backward``'s weight gradient
("expected size 3==3, stride 1==6 at dim=1; ..."): the fake kernel says one layout, ATen's ``Empty`` backend
(``zeros_like(weight)``) returns another.  Eager runs it.  Conv1d and Conv3d with a batch of 0 pass.

Exit status: 1 while the compiled step fails, 0 once it runs and matches eager.
"""

import sys

import torch
from torch import nn

torch.manual_seed(0)
conv = nn.Conv2d(3, 4, (3, 2))
x = torch.randn(0, 3, 7, 5, requires_grad=True)


def step(x: torch.Tensor) -> torch.Tensor:
    out = conv(x)
    return out.square().mean() + out.mean()


step(x).backward()
expected = conv.weight.grad.clone()
conv.weight.grad = None
try:
    torch.compile(step)(x).backward()
except AssertionError as exc:
    print(f"compiled backward failed: {str(exc).splitlines()[0]}")
    sys.exit(1)
sys.exit(0 if torch.equal(conv.weight.grad, expected) else 1)
