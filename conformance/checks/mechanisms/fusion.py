"""Fusion: a fused kernel's buffers allocated together, an early reader fused into a later kernel.
"""

from __future__ import annotations

import re

from conformance.checks.mechanisms.evidence import BLAMED_BYTES, Evidence, as_int, blamed_bytes
from conformance.checks.mechanisms.program import ALLOC, Program
from conformance.checks.mechanisms.registry import mechanism


def _fused_together(ev: Evidence) -> tuple[str, str, list[str]] | None:
    """The buffer fusion keeps alive, as (phase, name, the buffers allocated together before the fused kernel
    that writes it); ``None``: not one.  The buffer is the blamed one or, where blame could name no single
    buffer (several of one size), the one whose allocation makes the peak of a program the measurement
    follows exactly (:func:`_fused_at_program_peak`)."""
    where = ev.buffer
    if ev.source != "peak":  # the program held exactly; a late release is not fusion
        return None
    if where is None:
        return _fused_at_program_peak(ev)
    phase, name = where
    writer = str(ev.finding.get("op") or "").split(" ", 1)[0]
    for i, s in enumerate(ev.program.statements):
        callee = s.text.split("(", 1)[0].removesuffix("\u2026")
        if s.phase != phase or not s.work or not re.fullmatch(r"\w+", callee):
            continue  # an assignment from a call, an extern kernel, an op: not a fused kernel's own call
        if not (writer and s.calls(writer)) and name not in s.names()[1:]:
            continue  # (a buffer the wrapper renamed for reuse is written under its new name: renames())
        together = _written_together(ev.program, i, name)
        if together is not None:
            return phase, name, together
    return None


def _written_together(program: Program, i: int, name: str) -> list[str] | None:
    """The buffers allocated together before statement ``i``, a fused kernel's call, when ``name`` is one of two
    or more of them and the call writes it (names it, under a reuse name too, or is cut short)."""
    s = program.statements[i]
    callee = s.text.split("(", 1)[0].removesuffix("\u2026")
    if not s.work or not re.fullmatch(r"\w+", callee):
        return None
    together = program.allocated_before(i)
    named = name in s.names() or bool(program.renames(s.phase, name, i) & set(s.names()))
    return together if name in together and len(together) >= 2 and (named or s.text.endswith("\u2026")) else None


def _fused_at_program_peak(ev: Evidence) -> tuple[str, str, list[str]] | None:
    """Fusion at the peak, where blame named nothing: the program the measurement follows exactly reaches its
    peak allocating one of the buffers of the next fused kernel, or running an op (an extern kernel, a fallback)
    while the buffers an earlier fused kernel wrote together are all still alive (the kernel computed values
    the graphs' schedule makes only after that op); and the excess is no more than those buffers less the
    largest (the one any schedule has alive there).  A backend that also kept something past its last use fails
    the program check (not exact), and one that kept more shows an excess beyond that."""
    if ev.finding or not ev.program_exact:
        return None
    program = ev.program
    peak = program.peak_statement()
    if peak is None:
        return None
    phase = program.statements[peak].phase
    if (m := ALLOC.match(program.statements[peak].text)) is not None:
        name = m.group(1)
        k = next((j for j in range(peak + 1, len(program.statements)) if program.statements[j].phase == phase
                  and program.statements[j].work), None)
        together = _written_together(program, k, name) if k is not None else None
    elif program.statements[peak].work:
        found = _fused_alive_at(program, peak)
        if found is None:
            return None
        name, together = found
    else:
        return None
    if together is None:
        return None
    sizes = [program.allocated_bytes(phase, n) for n in together]
    excess = as_int(ev.figures.get("measured_peak_bytes")) - as_int(ev.figures.get("model_peak_bytes"))
    return (phase, name, together) if 0 < excess <= sum(sizes) - max(sizes) else None


def _fused_alive_at(program: Program, peak: int) -> tuple[str, list[str]] | None:
    """(a buffer, the buffers allocated together with it) of the last fused kernel before statement ``peak``
    that wrote two or more buffers all still alive at ``peak`` (no ``del`` of them or of a name the wrapper
    gave them since), else ``None``."""
    phase = program.statements[peak].phase
    for k in range(peak - 1, -1, -1):
        s = program.statements[k]
        if s.phase != phase:
            return None
        if not s.work:
            continue
        together = program.allocated_before(k)
        written = [n for n in together if _written_together(program, k, n) is not None]
        if len(written) >= 2 and all(program.alive_between(phase, n, k, peak) for n in written):
            return written[0], written
    return None


def fused_buffers_bytes(ev: Evidence) -> int:
    """The bytes of the buffers allocated together for the fused kernel: what fusion keeps alive at once grows
    with how many values one kernel writes (bicubic's backward: 17 taps), not with the model's peak.  It bounds
    the excess too: at worst the graphs' schedule held none of those buffers at its peak."""
    found = _fused_together(ev)
    if found is None:
        return 0
    phase, _, together = found
    return sum(ev.program.allocated_bytes(phase, n) for n in together)


#: the generated program's ``del`` of names, and its ``return`` (inductor's wrapper text)
_DEL = re.compile(r"del [\w, ]+")
_RETURN = re.compile(r"return\b")


def _release(ev: Evidence) -> tuple[str, list[str], int] | None:
    """Where the program releases the blamed buffer, as (phase, the names released, the releasing statement's
    index): its ``del``, or the ``return`` of a program whose last kernel read it (inductor writes no ``del`` for
    a buffer whose last use is the last kernel: the return drops it), when the return does not hand it out and the
    program has no ``del`` of it (one the model holds to the return past its ``del`` is held by something else)."""
    release = ev.release
    if release is None or not release.phase or release.trip is not None:
        return None
    phase = release.phase
    if _DEL.fullmatch(release.statement):
        names = [n.strip() for n in release.statement.removeprefix("del ").split(",")]
        at = [i for i, s in enumerate(ev.program.statements) if s.phase == phase and s.text.startswith("del ")
              and [n.strip() for n in s.text.removeprefix("del ").split(",")] == names]
    elif _RETURN.match(release.statement) and ev.buffer is not None and ev.buffer[0] == phase:
        names = [ev.buffer[1]]
        at = [i for i, s in enumerate(ev.program.statements) if s.phase == phase and s.text == release.statement]
        if not at or names[0] in ev.program.statements[at[0]].names():
            return None  # returned: an output, not a release
        if any(s.phase == phase and s.text.startswith("del ") and names[0] in s.names() for s in ev.program.statements):
            return None  # the program dels it: what holds it to the return is not the program (a tangent's caller)
    else:
        return None
    return (phase, names, at[0]) if at else None


def _fused_reader(ev: Evidence) -> tuple[str, str] | None:
    """The blamed buffer's name where the program releases it, and the fused kernel that reads it last, when
    the program's release of it (its ``del``, or the ``return``) comes right after that kernel (no work between)
    and the kernel's buffers are allocated before it runs: fusion moved the buffer's last use to a kernel that
    writes later values."""
    if ev.buffer is None or ev.source != "peak":
        return None
    released = _release(ev)
    if released is None:
        return None
    phase, names, i = released
    statements = ev.program.statements
    k = next((j for j in range(i - 1, -1, -1) if statements[j].phase == phase and statements[j].work), None)
    if k is None:
        return None
    kernel = statements[k]
    callee = kernel.text.split("(", 1)[0].removesuffix("\u2026")
    if not re.fullmatch(r"\w+", callee) or not ev.program.allocated_before(k):
        return None  # not a fused kernel's own call, or one that writes no buffer of its own
    read = [n for n in names if n in kernel.names()[1:]]
    if not read and kernel.text.endswith("\u2026"):  # the program model cut the call's arguments short
        read = names
    return (read[0], callee) if read else None


@mechanism(
    'fused-kernel-outputs',
    90,
    "a fused kernel's buffers are allocated together before it runs",
    ('the blamed buffer is one of two or more buffers allocated together (no work statement between them) right '
     'before the call of the fused kernel that writes it (its writer; the call names it, or is shortened); the '
     "wrapper's reuse renames (`buf5 = buf3; del buf3`) followed; its bound is its own, once per pair: the bytes of "
     "the buffers allocated together (at worst the graphs' schedule held none of them at its peak; an entry's "
     'percentage, where one gives it, also covers them: `Mechanism.scale`). Where blame names no buffer (several of '
     'one size, none alone accounting for the excess), the buffer is the one whose allocation makes the peak of a '
     'program the measurement follows exactly (the program check passed, timeline exact), when the next work '
     "statement is such a fused kernel, or the op making that peak runs while the last such kernel's buffers are all"
     ' still alive (no `del` of them, their renames or views since); and the excess is at most those buffers less '
     'the largest'),
    scale=fused_buffers_bytes,
    bound=fused_buffers_bytes,
    names_rest=True,
    bound_per_pair=True,
    formula=("the bytes of the buffers allocated together before the fused kernel (`fused_buffers_bytes`), "
             "once per pair"),
)
def fused_kernel_outputs(ev: Evidence) -> str | None:
    """One fused kernel writing several buffers that are all allocated before it runs, so they are
    alive together where the graphs' op-by-op schedule has fewer.  The kernel is the one the blamed
    buffer's writer names, called right after the run of allocations the buffer is in; its call
    names the buffer (or is cut short where the program model shortened a long statement)."""
    found = _fused_together(ev)
    if found is None:
        return None
    _, name, together = found
    return f"{name} is one of {len(together)} buffers allocated together before the fused kernel writing them"


@mechanism(
    'fused-input-read-late',
    110,
    "a buffer an early op reads is read last by the later kernel that op was "
        "fused into, and stays alive beside that kernel's buffers",
    ("a peak blame whose release in the program (`model_death`: `del X`, or the `return` where the program's last "
     'kernel read `X` and the return does not hand it out: inductor writes no `del` there) comes right after a fused'
     " kernel's call (no work between) that reads `X` (or whose call the model shortened), and that kernel's buffers"
     ' are allocated before it: inductor fused an early reader of `X` into a later kernel, so `X` lives beside that '
     "kernel's outputs; a backend keeping `X` past its reader is not matched; bounded by the blamed bytes"),
    bound=blamed_bytes,
    formula=BLAMED_BYTES,
)
def fused_input_read_late(ev: Evidence) -> str | None:
    """A buffer the graph's schedule frees after an early op, which inductor fused into a later kernel: the
    program frees it right after that kernel, whose buffers are allocated before it runs, so it is alive beside
    them.  The program releases it at its (moved) last use; a backend that kept it longer would not."""
    found = _fused_reader(ev)
    if found is None:
        return None
    return (f"{found[0]} is read last by the fused kernel {found[1]} and freed right after it, beside that kernel's "
            "buffers")

