"""Layout copies: a buffer in another layout than the graphs' (inductor's channels-last convolutions).
"""

from __future__ import annotations

from collections.abc import Sequence

from conformance.checks.mechanisms.evidence import Evidence
from conformance.checks.mechanisms.program import ITEMSIZE, channels_last
from conformance.checks.mechanisms.registry import mechanism


def _squeezed(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape without its size-1 dimensions: an unbatched convolution's result is copied out squeezed."""
    return tuple(n for n in shape if n != 1)


def graph_input_bytes(ev: Evidence) -> int:
    """The bytes of the forward graph's inputs (the step's inputs and parameters, as the generated
    program asserts them), in the blamed buffer's dtype: what a layout copy copies.  A convolution
    whose output is small beside its input and weight copies more than the model's peak holds."""
    itemsize = ITEMSIZE.get(str(ev.finding.get("dtype") or "").removeprefix("torch."), 4)
    return ev.program.input_numel("fw") * itemsize


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
    scale=graph_input_bytes,
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

