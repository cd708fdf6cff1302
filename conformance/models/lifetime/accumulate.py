"""What the autograd engine does with a compiled backward's gradients: ``AccumulateGrad``.

A compiled backward returns one gradient per forward input; for a leaf (a parameter) the
engine's ``AccumulateGrad`` node makes it the leaf's ``.grad``.  It steals the tensor only
when the tensor obeys the *layout contract* (``torch/csrc/autograd/utils/grad_layout_contract.h``):
for a dense, non-overlapping leaf, the gradient's stride in every dimension of size above 1
equals the leaf's.  Otherwise it stores ``clone_obey_contract(grad, leaf)``: a new buffer in
the leaf's strides (``empty_strided`` + ``copy_``), and the returned gradient dies once copied.

A backend that returns a gradient in another layout than its parameter's (inductor's layout
optimisation hands back a channels-last convolution weight gradient) thus costs a copy the
size of the parameter, live beside the original while it is made.  That copy is the engine's,
not the backend's program's: it is modelled here, after the backward returns, for every
model of a compiled forward and backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from conformance.models.lifetime.liveness import ModelBuilder
from conformance.models.lifetime.model import Storage
from conformance.models.lifetime.sizes import Symbols, concrete

#: a tensor's layout as ints: its shape and its strides
Layout = tuple[tuple[int, ...], tuple[int, ...]]


def layout_of(t: Any, symbols: Symbols) -> Layout | None:
    """``t``'s shape and strides as ints (``None`` for what is not a tensor or whose sizes are unknown)."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return (tuple(concrete(n, symbols) for n in t.shape), tuple(concrete(n, symbols) for n in t.stride()))
    except Exception:  # a size the observation did not bind: no claim either way
        return None


def is_dense(layout: Layout) -> bool:
    """Whether a tensor of this layout covers its memory exactly once (non-overlapping and dense)."""
    shape, stride = layout
    if any(n == 0 for n in shape):
        return True
    expected = 1
    for n, s in sorted(((n, s) for n, s in zip(shape, stride) if n != 1), key=lambda d: d[1]):
        if s != expected:
            return False
        expected *= n
    return True


def obeys_layout_contract(grad: Layout, leaf: Layout) -> bool:
    """``AccumulateGrad``'s test for stealing ``grad`` as ``leaf``'s ``.grad`` (no copy)."""
    if grad[0] != leaf[0]:
        return False
    if is_dense(leaf):
        return all(n == 1 or g == v for n, g, v in zip(grad[0], grad[1], leaf[1]))
    return grad[1] == _contiguous_strides(grad[0])


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def accumulate_grads(builder: ModelBuilder, grads: Sequence[Any], grad_layouts: Sequence[Layout | None],
                     leaves: Sequence[Any], prefix: str = "bw:") -> list[Any]:
    """The engine's ``AccumulateGrad`` over a backward's results, in order: a gradient that breaks
    its leaf's layout contract is copied into the leaf's layout (the copy becomes the result, the
    original is released).  ``grads`` are the builder's values the backward returned (one per
    forward input), ``grad_layouts`` their layouts as the program made them, ``leaves`` the
    forward inputs' fake values (the parameters' layouts).  Returns the results as ``.grad`` holds them."""
    if not (len(grads) == len(grad_layouts) == len(leaves)):
        return list(grads)  # not one gradient per forward input: no claim
    held: list[Any] = []
    for i, (grad, layout, leaf) in enumerate(zip(grads, grad_layouts, leaves)):
        leaf_layout = layout_of(leaf, builder.symbols)
        if (not isinstance(grad, Storage) or layout is None or leaf_layout is None
                or obeys_layout_contract(layout, leaf_layout)):
            held.append(grad)
            continue
        shape, stride = leaf_layout
        nbytes = _span(shape, stride if is_dense(leaf_layout) else _contiguous_strides(shape)) * leaf.element_size()
        copy = builder.new_storage(nbytes, f"{prefix}AccumulateGrad[{i}]", "autograd::AccumulateGrad (layout copy)",
                                   leaf, "intermediate")
        builder.acquire(copy)
        builder.event(f"{prefix}AccumulateGrad[{i}]: copy of {grad.producer} into the parameter's layout")
        builder.release(grad)
        held.append(copy)
    return held


def _span(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Elements an ``empty_strided`` of this layout allocates."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))
