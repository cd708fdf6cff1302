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
from dataclasses import replace
from typing import Any

import torch

from conformance.models.lifetime.liveness import ModelBuilder
from conformance.models.lifetime.model import LifetimeModel, Storage
from conformance.models.lifetime.sizes import Symbols, concrete

#: a tensor's layout as ints: its shape and its strides
Layout = tuple[tuple[int, ...], tuple[int, ...]]
#: the op a layout copy records (what :func:`in_engine_order` knows a copy by)
COPY_OP = "autograd::AccumulateGrad (layout copy)"


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


def dense_layout(layout: Layout | None) -> Layout | None:
    """``layout``'s shape with contiguous strides: the layout of a result a backend returns as a dense buffer of its
    own (IREE's results are row-major HAL buffers whatever strides the graph's fake value has)."""
    return None if layout is None else (layout[0], _contiguous_strides(layout[0]))


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
        copy = builder.new_storage(nbytes, f"{prefix}AccumulateGrad[{i}]", COPY_OP, leaf, "intermediate")
        copy.copy_of = grad.sid
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



def in_engine_order(model: LifetimeModel, order: Sequence[Storage]) -> LifetimeModel:
    """``model`` with its ``AccumulateGrad`` copies made in ``order`` (a permutation of its copies).

    The engine runs the ``AccumulateGrad`` nodes a backward's results feed in the order of its
    ready queue, which neither the program nor the graph says; each copy is made, and its
    original released, in one event of the model.  This re-lays those events (pure: the model
    is not changed; the storages of the block are new objects)."""
    copies = [s for s in model.storages if s.op == COPY_OP]
    if len(copies) < 2 or sorted(id(s) for s in order) != sorted(id(s) for s in copies):
        return model
    events = sorted(s.birth for s in copies)
    if events != list(range(events[0], events[0] + len(events))):
        return model  # not one block of consecutive copies: no claim
    first = events[0]
    by_sid = {s.sid: s for s in model.storages}
    originals = {s.birth: [by_sid[s.copy_of]] if s.copy_of in by_sid and by_sid[s.copy_of].death == s.birth else []
                 for s in copies}
    before = model.live_bytes[first] - next(s for s in copies if s.birth == first).nbytes
    replaced: dict[int, Storage] = {}
    labels, live = list(model.events), list(model.live_bytes)
    running = before
    for j, copy in enumerate(order):
        event = first + j
        replaced[id(copy)] = replace(copy, birth=event)
        for original in originals[copy.birth]:
            replaced[id(original)] = replace(original, death=event)
        labels[event] = model.events[copy.birth]
        live[event] = running + copy.nbytes
        running = live[event] - sum(o.nbytes for o in originals[copy.birth])
    storages = [replaced.get(id(s), s) for s in model.storages]
    return LifetimeModel(labels, live, storages, set(model.work_events), list(model.findings))
