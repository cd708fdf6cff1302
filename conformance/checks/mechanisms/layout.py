"""Layout copies: a buffer in another layout than the graphs' (inductor's channels-last convolutions).
"""

from __future__ import annotations

from collections.abc import Sequence

from conformance.checks.mechanisms.evidence import Evidence
from conformance.checks.mechanisms.program import GRAPH_INPUT, ITEMSIZE, channels_last
from conformance.checks.mechanisms.registry import mechanism


def _squeezed(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape without its size-1 dimensions: an unbatched convolution's result is copied out squeezed."""
    return tuple(n for n in shape if n != 1)


def extent_bytes(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> int:
    """The bytes a buffer of ``shape`` and ``strides`` spans (0 for an empty one)."""
    return (1 + sum((n - 1) * st for n, st in zip(shape, strides))) * itemsize if all(shape) else 0


def layout_copies_bytes(ev: Evidence) -> int:
    """The bytes of every layout copy the generated program makes, read from its own statements: each buffer it
    allocates or asserts channels-last (its graph inputs excepted: the caller's tensors in their own layout), and
    each row-major buffer a kernel writes while reading a channels-last one of the same shape (the copy for the
    caller).  An assert names no dtype: the blamed buffer's, else float32."""
    blamed = str(ev.finding.get("dtype") or "").removeprefix("torch.")
    total = 0
    for phase in sorted({s.phase for s in ev.program.statements}):
        buffers = ev.program.layouts(phase)
        copies = {name: (shape, strides, dtype) for name, shape, strides, dtype in buffers
                  if channels_last(shape, strides) and not GRAPH_INPUT.match(name)}
        for name, shape, strides, dtype in buffers:
            if name in copies or GRAPH_INPUT.match(name):
                copied = name in copies
            else:
                copied = any(_squeezed(shape) == _squeezed(copies[src][0])
                             for i in ev.program.writers(phase, name)
                             for src in ev.program.statements[i].names()[1:] if src in copies and src != name)
            if copied:
                total += extent_bytes(shape, strides, ITEMSIZE.get(dtype or blamed, 4))
    return total


@mechanism(
    'layout-copy',
    10,
    "a copy of a buffer in another layout (channels-last) alive beside it",
    ('the blamed buffer is allocated (or asserted, after an extern kernel) channels-last (dense, the channel '
     "dimension innermost: a convolution's layout, never a column-major matrix or a view), or it is a row-major "
     "buffer of the same shape (up to size-1 dimensions: an unbatched convolution's result is copied out without its"
     ' batch of one) that a kernel writes while reading such a buffer (the copy for the caller), or an extern '
     "kernel's result item (`buf2[1]`) that the name taking it asserts channels-last (a convolution backward's "
     'weight gradient)'),
    bound=layout_copies_bytes,
    bound_per_pair=True,
    formula=("the bytes of every layout copy the generated program makes (`layout_copies_bytes`): each buffer it "
             "allocates or asserts channels-last, its graph inputs excepted, and each row-major buffer a kernel writes "
             "from a channels-last one of the same shape, at their allocated extent, once per pair"),
)
def layout_copy(ev: Evidence) -> str | None:
    """A buffer in another layout than the graphs' (inductor's channels-last convolution inputs,
    weights and results), or the row-major copy of one made for the caller (of the same shape, up to size-1
    dimensions: an unbatched convolution's result is copied out without its batch of one)."""
    where = ev.buffer
    if where is None or ev.source != "peak":  # the program held exactly; a late release is not a layout
        return None
    phase, name = where
    layouts = ev.program.channels_last_buffers(phase)
    if name in layouts:
        return f"{name} is allocated channels-last (a layout the received graphs do not have)"
    mine = ev.program.layout(phase, name)
    if "[" in name and mine is not None and channels_last(*mine):
        return f"{name} is an extern kernel's result item, channels-last (a layout the received graphs do not have)"
    for i in ev.program.writers(phase, name):
        read = [n for n in ev.program.statements[i].names()[1:] if n in layouts and n != name]
        for src in read:
            theirs = ev.program.layout(phase, src)
            if mine is None or theirs is None or _squeezed(mine[0]) == _squeezed(theirs[0]):
                return f"{name} is a row-major copy of the channels-last {src}, both alive"
    return None

