"""Sizes in bytes from fake tensors, their symbolic sizes resolved with values a real run observed
(a stacked loop output's leading size is its trip count)."""

from __future__ import annotations

from typing import Any

import torch

from conformance.models.lifetime.model import ModelError

#: Observed values of symbolic sizes (sympy symbols to ints).
Symbols = dict[Any, int]


def storage_nbytes(t: torch.Tensor, symbols: Symbols) -> int:
    """The bytes of ``t``'s storage, resolving symbolic sizes with observed values."""
    n = t.untyped_storage().nbytes()
    if isinstance(n, int):
        return n
    return concrete(n, symbols)


def dense_nbytes(t: torch.Tensor, symbols: Symbols) -> int:
    """The bytes of a contiguous copy of ``t`` (``numel * itemsize``): what a backend's own buffer for it takes."""
    return concrete(t.numel(), symbols) * t.element_size()


def concrete(value: Any, symbols: Symbols) -> int:
    """``value`` (an int, a SymInt or a sympy expression) as an int, with ``symbols`` substituted."""
    if isinstance(value, int):
        return value
    expr = value.node.expr if isinstance(value, torch.SymInt) else value
    resolved = expr.xreplace(symbols) if symbols else expr
    try:
        return int(resolved)
    except TypeError as exc:  # still symbolic: the observation did not cover it
        raise ModelError(f"size {expr} is unknown: no observed value for its symbols") from exc


def concrete_shape(t: torch.Tensor, symbols: Symbols) -> tuple[int, ...]:
    return tuple(concrete(s, symbols) for s in t.shape)
