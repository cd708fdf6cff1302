"""Eager float64 kernels that compute at float32 precision, replaced in the float64 reference by the formula they
implement.

The reference is eager PyTorch at float64, and parity holds a float64 case to ~1e-12. An eager CPU kernel that
computes a float64 value with a float32 constant is then wrong by up to float32's rounding (``hardsigmoid``'s
gradient is ``grad * (1.0f / 6.0f)``: 2.98e-8 relative), so a backend that computes it exactly in float64 (inductor
does) failed parity against it, and eager passed against itself. In the float64 reference runs (the reference and
the rounding-noise runs, never eager's own run) the dispatch modes they run in send each such op, given float64
tensors, to its formula instead (:func:`exact_op`); inside a ``while_loop``'s body, which those modes see as one op,
the kernel runs as is. Eager's own run at the case's dtype keeps the kernel, so a backend as far off as eager still
passes by the rule that allows eager's own error, and one farther off does not. Each entry is one ATen kernel shown
to round that way: eager's result, the formula's, and their distance are checked in ``tests/test_exact_kernels.py``,
so an entry whose kernel torch fixes fails there, not silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten


def hardsigmoid_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """``grad / 6`` inside (-3, 3), 0 outside: what ``hardsigmoid_backward_kernel`` (ATen's
    ``native/cpu/Activation.cpp``) computes, with ``1.0f / 6.0f`` as its float64 constant."""
    inside = (self > -3) & (self < 3)
    return torch.where(inside, grad_output / 6, torch.zeros((), dtype=grad_output.dtype))


#: ATen op -> the formula its eager CPU kernel implements below float64 precision at float64
EXACT: dict[Any, Callable[..., torch.Tensor]] = {
    aten.hardsigmoid_backward.default: hardsigmoid_backward,
}


class ExactOp:
    """An op whose call is its formula; its name, schema and tags are the op's (what a dispatch mode reads)."""

    def __init__(self, op: Any, formula: Callable[..., torch.Tensor]) -> None:
        self.op, self.formula = op, formula

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.formula(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.op, name)


def exact_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func``, or its :class:`ExactOp` where it is in :data:`EXACT` and its tensors are all float64 on the CPU.
    The float64 reference's dispatch modes (:mod:`conformance.checks.noise`) call what this returns."""
    formula = EXACT.get(func)
    if formula is None:
        return func
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    if tensors and all(t.dtype == torch.float64 and t.device.type == "cpu" for t in tensors):
        return ExactOp(func, formula)
    return func
