"""Sizes in bytes from fake tensors, their symbolic sizes resolved with values a real run observed
(a stacked loop output's leading size is its trip count)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from conformance.models.lifetime.model import ModelError

#: Observed values of symbolic sizes (sympy symbols to ints).
Symbols = dict[Any, int]


def storage_exact_fake_mode(**kwargs: Any) -> Any:
    """A ``FakeTensorMode`` whose results have the storages the ops' kernels make.  Its dispatch cache is
    off: a cache hit rebuilds a result in a storage of the result's own extent, where the kernel's may be
    larger (``aten.copy`` of a slice clones the slice's whole base; the first call says 1680 B, the same call
    again 1656 B), so a storage's size would depend on which pairs ran before in the process."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(**kwargs)
    mode.cache_enabled = False
    return mode


def storage_nbytes(t: torch.Tensor, symbols: Symbols) -> int:
    """The bytes ``t``'s storage holds, resolving symbolic sizes with observed values. Autograd's zero
    tensor (``_efficientzerotensor``: a zero gradient) states a size but its allocator allocates nothing."""
    if t._is_zerotensor():
        return 0
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


def concrete_shape(t: torch.Tensor, symbols: Symbols, strict: bool = True) -> tuple[int, ...]:
    """``t``'s shape as ints; a size still unknown is a :class:`ModelError`, or -1 when not ``strict``."""
    if strict:
        return tuple(concrete(s, symbols) for s in t.shape)
    shape = []
    for s in t.shape:
        try:
            shape.append(concrete(s, symbols))
        except ModelError:
            shape.append(-1)
    return tuple(shape)


def bind_symbols(vals: Sequence[Any], actual: Sequence[Any]) -> Symbols:
    """The values the symbols of a graph's placeholders took in one call.

    ``vals`` are the placeholders' fake values (a ``SymInt``, a tensor with symbolic sizes);
    ``actual`` what the call passed in their place, as :func:`size_of` recorded it (an int,
    a shape).  Only a size that is a bare symbol binds it; derived sizes follow from those."""
    symbols: Symbols = {}
    for val, got in zip(vals, actual):
        if isinstance(val, torch.SymInt) and isinstance(got, int):
            _bind(symbols, val, got)
        elif isinstance(val, torch.Tensor) and isinstance(got, tuple) and len(got) == val.dim():
            for size, n in zip(val.shape, got):
                _bind(symbols, size, n)
    return symbols


def _bind(symbols: Symbols, size: Any, value: int) -> None:
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        import sympy  # here, not at import: the CLI's controller loads this module and never models a size

        if isinstance(expr, sympy.Symbol):
            symbols[expr] = value


def size_of(value: Any) -> tuple[int, ...] | int | None:
    """What :func:`bind_symbols` needs of one argument a compiled graph was called with: a tensor's
    shape, an int's value (no reference to the value is kept)."""
    if isinstance(value, torch.Tensor):
        return tuple(int(n) for n in value.shape)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None
