"""Extern kernels: the operand copied for one, the workspace inside one.
"""

from __future__ import annotations

import re

from conformance.checks.facts import NOT_IN_MODEL
from conformance.checks.mechanisms.evidence import Evidence
from conformance.checks.mechanisms.registry import mechanism

#: an extern kernel's or fallback op's call: ``extern_kernels.bmm(...)``, ``buf2 = torch.ops.aten.X.default(...)``
_EXTERN_CALL = re.compile(r"^(?:[\w\[\], ()]+ = )?(?:extern_kernels\.(\w+)|(?:torch\.ops\.)?aten\.(\w+)(?:\.\w+)?)\(")


_OUT_ARG = re.compile(r"\bout=(\w+)")


def _materialised_input(ev: Evidence) -> tuple[str, str, str] | None:
    """(input, kernel, op): an extern kernel or fallback op ``op`` that writes or reads the blamed buffer and
    reads a buffer a fused ``kernel`` named after ``op`` wrote just for it: the copy inductor makes of an
    operand the graph passes as a view (a broadcast ``self``, ``unfold``'s windows) in the layout the kernel
    takes.  Its origin is the extern op's node, so inductor names the copying kernel after it."""
    where = ev.buffer
    if where is None or ev.source != "peak":
        return None
    phase, blamed = where
    statements = ev.program.statements
    for i, s in enumerate(statements):
        m = _EXTERN_CALL.match(s.text)
        if s.phase != phase or not s.work or m is None:
            continue
        op = m.group(1) or m.group(2)
        out = _OUT_ARG.search(s.text)
        written = out.group(1) if out else s.text.split(" = ", 1)[0] if " = " in s.text.split("(", 1)[0] else ""
        read = [n for n in s.names()[1:] if n != written]
        cut_write = _cut_out_arg(s.text, blamed, ev.program.allocated_before(i))
        if blamed != written and blamed not in read and not cut_write:
            continue
        for name in read:
            writer = ev.program.writer_before(phase, name, i) if ev.program.allocated_bytes(phase, name) else None
            kernel = statements[writer].text.split("(", 1)[0].removesuffix("\u2026") if writer is not None else ""
            if re.fullmatch(r"\w+", kernel) and f"_{op}_" in f"{kernel}_":
                return name, kernel, op
    return None


def _cut_out_arg(text: str, name: str, allocated: list[str]) -> bool:
    """Whether a call the program model cut short (``extern_kernels.baddbmm(buf0, ..., out=b…``) writes ``name``:
    its ``out=`` argument is cut inside ``name`` (or cut off), and ``name`` was allocated right before the call."""
    if not text.endswith("\u2026") or name not in allocated:
        return False
    cut = re.search(r"\bout=(\w*)\u2026$", text)
    return name.startswith(cut.group(1)) if cut else "out=" not in text


def materialised_input_bytes(ev: Evidence) -> int:
    """The copied operand's bytes: all an extern kernel's input copy can put over the model."""
    found = _materialised_input(ev)
    return ev.program.allocated_bytes(ev.buffer[0], found[0]) if found is not None and ev.buffer else 0


@mechanism(
    'extern-input-copy',
    80,
    "an extern kernel's operand, which the graph passes as a view (a broadcast, "
        "unfold's windows), copied into a buffer of its own for the kernel and alive beside its result",
    ('an extern kernel or fallback op call writes or reads the blamed buffer and reads a program buffer that a '
     'kernel named after that op (`cpp_fused_baddbmm_0` for `extern_kernels.baddbmm`) wrote before it: the operand '
     "copied for the kernel where the graph passes a view; bounded by the copy's bytes"),
    bound=materialised_input_bytes,
    formula="the copied operand's allocated bytes",
)
def extern_input_copy(ev: Evidence) -> str | None:
    """An extern kernel's operand copied into a buffer of its own for it, alive beside the kernel's result where
    the graph hands the kernel a view of a value it already holds."""
    found = _materialised_input(ev)
    if found is None:
        return None
    name, kernel, op = found
    return f"{name} is {kernel}'s copy of an operand of {op}, which the graph passes as a view"


@mechanism(
    'extern-kernel-workspace',
    130,
    "an extern kernel's own workspace, which no graph counts",
    ('a peak blame on an allocation no model has, made inside an ATen op that the program calls as an extern kernel '
     'or fallback'),
)
def extern_kernel_workspace(ev: Evidence) -> str | None:
    """Storage an extern kernel allocates inside its own call (per-thread blocks, reorders), which
    no graph model counts."""
    f = ev.finding
    op = str(f.get("measured_op") or "")
    if ev.source != "peak" or f.get("model_death") != NOT_IN_MODEL or not op.startswith("aten::"):
        return None
    kernel = op.removeprefix("aten::")
    for s in ev.program.statements:
        if s.work and (f"aten.{kernel}" in s.text or f"extern_kernels.{kernel}(" in s.text):
            return f"allocated inside the extern kernel {kernel}'s own call"
    return None

