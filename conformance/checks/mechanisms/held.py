"""Buffers the generated program holds past their last use: a saved tensor never read, an op's result tuple, an
early gradient, a tangent the call keeps.
"""

from __future__ import annotations

import re

from conformance.checks.facts import parse_event
from conformance.checks.mechanisms.evidence import BLAMED_BYTES, Evidence, blamed_bytes
from conformance.checks.mechanisms.program import ALLOC, CUT_UNPACK, UNPACK
from conformance.checks.mechanisms.registry import mechanism


def _statement_index(ev: Evidence, key: str, start: int = 0) -> int | None:
    """The index in the program of the statement a finding's event label names (``last_use``, ``freed_after``)."""
    m = parse_event(ev.finding.get(key))
    if m is None:
        return None
    phase, text = m.phase, m.statement
    return next((i for i in range(start, len(ev.program.statements))
                 if ev.program.statements[i].phase == phase and ev.program.statements[i].text == text), None)


#: the formula of :func:`held_in_program`
HELD_IN_PROGRAM = ("`held_in_program`: the held buffer's bytes x the statements doing work (a kernel, an op, an "
                   "allocation) from its last use to the statement releasing it (the tuple's `del`, the backward's "
                   "`return`), both named in the generated program; the program check counts a late release the same "
                   "way, so a longer hold, a larger buffer or bytes the measurement adds beside it exceed it")


def held_in_program(ev: Evidence) -> int | None:
    """What a buffer held past its last use can put in the program check's excess, read from the generated program:
    its bytes times the statements doing work (a kernel, an op, an allocation) from its last use to the statement
    that releases it (at least one),
    both named in the program (``None``: the finding names no statement the program has; a buffer never freed
    has no bound).  The program check counts a late release the same way, so the instance is held to its own
    buffer and the program's own ``del``: a longer hold, a larger buffer or bytes the measurement adds are beyond."""
    nbytes = ev.finding.get("bytes")
    last = _statement_index(ev, "last_use")
    freed = _statement_index(ev, "freed_after", last) if last is not None else None
    if not isinstance(nbytes, int) or last is None or freed is None:
        return None
    work = sum(1 for s in ev.program.statements[last + 1:freed + 1] if s.work or ALLOC.match(s.text))
    return nbytes * max(work, 1)


@mechanism(
    'unused-saved-tensor',
    60,
    "the backward unpacks a saved tensor it never reads and keeps its name",
    ('a program finding of the backward whose last use is the argument unpack (`a, b, c = args`): saved, never read,'
     ' its name kept; bounded by `held_in_program` (below)'),
    bound=held_in_program,
    formula=HELD_IN_PROGRAM,
)
def unused_saved_tensor(ev: Evidence) -> str | None:
    """A saved tensor the backward unpacks from its arguments and never reads, its name kept."""
    f = ev.finding
    if ev.source != "program" or not f or f.get("finding") != "late":
        return None
    last = ev.statement("last_use").rstrip()
    if UNPACK.match(last) and str(f.get("last_use", "")).startswith("bw:"):
        return "unpacked from the backward's arguments, never read, its name kept to the return"
    return None


@mechanism(
    'result-tuple-held',
    70,
    "an op's result tuple keeps its items alive past their last use",
    ("a program finding held by a result tuple (an op's result kept after its items were taken: "
     'pytorch/pytorch#163227); bounded by `held_in_program` (below)'),
    bound=held_in_program,
    formula=HELD_IN_PROGRAM,
)
def result_tuple_held(ev: Evidence) -> str | None:
    """An op's result tuple kept after its items were taken: it keeps them alive past their last
    use (the class of pytorch/pytorch#163227)."""
    if ev.source == "program" and ev.finding.get("held_in") == "tuple":
        return "held by an op's result tuple past its last use"
    if ev.source == "program" and not ev.finding and ev.held is not None and ev.held.container == "a result tuple":
        return "held by an op's result tuple past its last use"
    return None


@mechanism(
    'early-gradient',
    100,
    "the backward computes a gradient before the graph's schedule does",
    "a peak blame on a backward buffer the backward returns (a gradient made before the graph's schedule makes it)",
)
def early_gradient(ev: Evidence) -> str | None:
    """A gradient the backward program computes before the received graph's schedule does, alive
    at the peak."""
    where = ev.buffer
    if where is None or where[0] != "bw" or ev.source != "peak":
        return None
    phase, name = where
    for s in ev.program.statements:
        if s.phase == phase and s.text.startswith("return") and name in s.names():
            return f"{name} is a gradient the backward returns, made before the peak"
    return None


@mechanism(
    'tangent-held-by-call',
    120,
    "a gradient the compiled backward receives stays alive to the end of the "
        "call: the runtime's grad_outputs hold it after the program dels it",
    ('a peak blame on a backward graph input named `tangents_N`, made by the argument unpack (`a, b, tangents_1 = '
     "args`): AOTAutograd's `backward(ctx, *flat_args)` keeps it to the end of the call; bounded by its bytes"),
    bound=blamed_bytes,
    formula=BLAMED_BYTES,
)
def tangent_held_by_call(ev: Evidence) -> str | None:
    """A gradient the compiled backward receives (``tangents_N``, unpacked from its arguments) alive after the
    program dels it: AOTAutograd's ``CompiledFunction.backward(ctx, *grad_outputs)`` clears the argument list it
    hands the program, and its own ``grad_outputs`` tuple holds the tangents until the call returns."""
    where = ev.buffer
    if where is None or ev.source != "peak" or where[0] != "bw" or not re.fullmatch(r"tangents_\d+", where[1]):
        return None
    made = ev.program_buffer
    if made is None or not (UNPACK.match(made.made_by) or CUT_UNPACK.match(made.made_by)):  # a graph input
        return None
    return f"{where[1]}, a gradient the backward receives, is held by the call's grad_outputs until it returns"

