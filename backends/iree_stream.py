"""What a compiled IREE program says about its own memory: the buffers each call allocates besides its results.

IREE's lowering can split an op the graph holds as one into several dispatches whose intermediates
no graph has (addbmm: a transpose into a buffer, then a matmul).  After its stream phase the program
says so itself: each such buffer is a ``stream.resource.alloca`` the function does not export as a
result (freed by a ``stream.resource.dealloca``, or dropped: a seed read back into a staging buffer,
the random generator's new seed replacing the old in its global), its size an ``arith.constant``
where the shapes are static.  A call's *program transients* are the most bytes of those that are
allocated at once, in program order (one without a ``dealloca`` counted to the function's end, a
loop's carried buffers twice: the previous trip's beside the next), a size that depends on the data
taken at its most where the program clamps it, one computed from a counted loop's counter at its most
over the values the loop counts (batched linalg.det's per-column scratch).  An upper bound, read the
same way for every program.

That is a figure the compiler commits to, not one fitted to a sample: the peak check can hold a
call's measured transients to it (``lowering-transients`` applies only where they are at or under
it), and a runtime that allocates more than the program asks for stays unexplained.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from .iree_cache import cached_file

_FUNC = re.compile(r"^\s*(?:util|func)\.func\b", re.M)
_NAME = r"%[\w$.#-]+"
_ALLOCA = re.compile(rf"({_NAME}), {_NAME} = stream\.resource\.alloca\b.*?!stream\.resource<\w+>\{{([^}}]*)\}}")
_DEALLOCA = re.compile(rf"stream\.resource\.dealloca\b.*?=> ({_NAME}) : !stream\.resource<\w+>\{{([^}}]*)\}}")
#: a value that is another once a timepoint is reached (``%3 = stream.timepoint.await %2 => %result_0 : ...``)
_AWAIT = re.compile(rf"({_NAME}) = stream\.timepoint\.await\b.*?=> ({_NAME}) :")
_EXPORT = re.compile(rf"stream\.tensor\.export\b.*? ({_NAME}) : ")
#: an index computation: ``%17 = arith.muli %16, %c8 : index``, ``%20 = util.align %17, %c64 : index``
_INDEX_OP = re.compile(rf"^\s*({_NAME}) = (arith\.\w+|util\.align) ([^:]*?)(?: : (\w+))?\s*(?:loc\(.*)?$")
_BLOCK = re.compile(r"^\s*\^(bb\d+)\b")
_BRANCH_TARGET = re.compile(r"\^(bb\d+)")

Interval = tuple[float, float]
_ANY: Interval = (float("-inf"), float("inf"))


def _combine(op: str, args: list[Interval]) -> Interval:
    """The values ``op`` can take over ``args``' ranges (``_ANY`` for an op not read here)."""
    if op in ("arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi") and len(args) == 1:
        return args[0]
    if len(args) == 3 and op == "arith.select":
        return min(args[1][0], args[2][0]), max(args[1][1], args[2][1])
    if len(args) != 2:
        return _ANY
    (alo, ahi), (blo, bhi) = args
    if op == "arith.addi":
        return alo + blo, ahi + bhi
    if op == "arith.subi":
        return alo - bhi, ahi - blo
    if op == "arith.muli" and all(abs(v) != float("inf") for v in (alo, ahi, blo, bhi)):
        products = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        return min(products), max(products)
    if op in ("arith.minsi", "arith.minui"):
        return min(alo, blo), min(ahi, bhi)
    if op in ("arith.maxsi", "arith.maxui"):
        return max(alo, blo), max(ahi, bhi)
    if op == "util.align" and blo == bhi and blo > 0 and alo >= 0:
        return (-(-alo // blo) * blo, -(-ahi // blo) * blo if ahi != float("inf") else ahi)
    if op in ("arith.divui", "arith.divsi") and blo == bhi and blo > 0 and alo >= 0:
        return alo // blo, ahi // blo if ahi != float("inf") else ahi
    return _ANY


def _index_ranges(body: str, known: dict[str, Interval] | None = None) -> dict[str, Interval]:
    """Each index value's range, from constants (and ``known`` ones: a loop's counter) through the arithmetic
    on them: a size computed from a value the program reads at run time (a mask's count) is bounded where
    the program clamps it."""
    ranges: dict[str, Interval] = dict(known or {})
    for line in body.splitlines():
        m = _INDEX_OP.match(line)
        if m is None:
            continue
        name, op, operands = m[1], m[2], m[3].strip()
        if op == "arith.constant":
            value = re.fullmatch(r"(-?\d+)", operands)
            ranges[name] = (int(value[1]), int(value[1])) if value and m[4] in ("index", "i64", "i32") else _ANY
            continue
        args = [ranges.get(a.strip(), _ANY) for a in operands.split(",")]
        ranges[name] = _combine(op, args)
    return ranges


_BLOCK_ARGS = re.compile(r"^\s*\^(bb\d+)\((.*)\)\s*:")
_BRANCH_ARGS = re.compile(rf"\^(bb\d+)\(((?:{_NAME}(?:, )?)+) :")
_GUARD = re.compile(rf"({_NAME}) = arith\.cmpi (slt|ult|sle|ule), ({_NAME}), ({_NAME})\b")
_COND_BR = re.compile(rf"cf\.cond_br ({_NAME}), \^(bb\d+)")
_STEP = re.compile(rf"^\s*({_NAME}) = arith\.addi ({_NAME}), ({_NAME})\b")


def _blocks(lines: list[str]) -> dict[str, tuple[int, int]]:
    """Each block's lines (first, past the last), by name."""
    starts = [(m[1], i) for i, line in enumerate(lines) if (m := _BLOCK.match(line))]
    ends = [i for _, i in starts[1:]] + [len(lines)]
    return {name: (i, end) for (name, i), end in zip(starts, ends[:len(starts)], strict=True)}


def _induction_ranges(lines: list[str], ranges: dict[str, Interval]) -> dict[str, Interval]:
    """The range of each counted loop's induction variable, as ``scf.for`` lowers to blocks: a header
    block argument that enters as a constant, comes back as itself plus a positive step (``arith.addi``)
    made in the block the header's guard (``arith.cmpi slt %iv, %bound``, then ``cf.cond_br``) enters,
    so it is at most the bound less one plus the step, its value on leaving.  Anything else is not read."""
    blocks = _blocks(lines)
    params = {m[1]: re.findall(rf"({_NAME}):", m[2]) for line in lines if (m := _BLOCK_ARGS.match(line))}
    incoming: dict[str, list[list[str]]] = {}
    for line in lines:
        for target, operands in _BRANCH_ARGS.findall(line):
            incoming.setdefault(target, []).append([o.strip() for o in operands.split(",")])
    sums: dict[str, tuple[str, str, str]] = {}  # a sum -> its operands and the block it is made in
    for name, (first, end) in blocks.items():
        sums.update({m[1]: (m[2], m[3], name) for line in lines[first:end] if (m := _STEP.match(line))})
    found: dict[str, Interval] = {}
    for header, names in params.items():
        first, end = blocks[header]
        body = "\n".join(lines[first:end])
        for position, iv in enumerate(names):
            guard = next((g for g in _GUARD.finditer(body) if g[3] == iv), None)
            enter = next((b[2] for b in _COND_BR.finditer(body) if guard and b[1] == guard[1]), None)
            values = [args[position] for args in incoming.get(header, []) if position < len(args)]
            if guard is None or enter is None or not values:
                continue
            inits: list[Interval] = []
            step_hi = 0.0
            for value in values:
                a, b, made_in = sums.get(value, ("", "", ""))
                step = ranges.get(b if a == iv else a if b == iv else "", _ANY)
                if made_in == enter and step[0] > 0:
                    step_hi = max(step_hi, step[1])
                elif value in ranges and ranges[value] != _ANY:
                    inits.append(ranges[value])
                else:
                    break
            else:
                bound = ranges.get(guard[4], _ANY)[1] + (1 if guard[2] in ("sle", "ule") else 0)
                if inits and step_hi > 0 and bound != float("inf") and step_hi != float("inf"):
                    lo = min(lo for lo, _ in inits)
                    found[iv] = (lo, max(max(hi for _, hi in inits), bound - 1 + step_hi))
    return found


def _size(text: str, ranges: dict[str, Interval]) -> int | None:
    """The most bytes a resource size (``%c512``, ``%23``) can be; ``None`` where no bound is read."""
    hi = ranges.get(text.strip(), _ANY)[1]
    return int(hi) if hi != float("inf") else None


def _loop_headers(lines: list[str]) -> dict[int, set[str]]:
    """Per line that starts a loop's header block (a block some later block branches back to), the names
    of the buffers the loop allocates and does not free in it: the previous trip's are alive when the
    next trip allocates its own (IREE carries them as block arguments)."""
    starts = {m[1]: i for i, line in enumerate(lines) if (m := _BLOCK.match(line))}
    loops: dict[int, set[str]] = {}
    current = None
    for i, line in enumerate(lines):
        block = _BLOCK.match(line)
        current = i if block else current
        if current is None or not re.search(r"\bcf\.(?:cond_)?br\b", line):
            continue
        for target in _BRANCH_TARGET.findall(line):
            head = starts.get(target)
            if head is not None and head <= current:  # a back edge: lines head..i are the loop
                span = lines[head:i + 1]
                made = {m[1] for ln in span if (m := _ALLOCA.search(ln))}
                freed = {m[1] for ln in span if (m := _DEALLOCA.search(ln))}
                loops.setdefault(head, set()).update(made - freed)
    return loops


def _function_transients(body: str) -> int | None:
    """The most bytes of the function's own allocations alive at once, in program order: every
    ``stream.resource.alloca`` whose buffer it does not export as a result, alive until its ``dealloca``
    or, with none (a staging read-back, a global's new value replacing the old), to the function's end;
    in a loop, the previous trip's buffers it carries are counted too.  A size is its most (a
    data-dependent one clamped by the program); ``None`` where one is unbounded."""
    ranges = _index_ranges(body)
    induction = _induction_ranges(body.splitlines(), ranges)
    if induction:  # the sizes computed from a loop's counter, again with its range
        ranges = _index_ranges(body, induction)
    alias = {m[1]: m[2] for m in _AWAIT.finditer(body)}
    exported = set()
    for export in _EXPORT.finditer(body):
        name: str | None = export[1]
        while name is not None and name not in exported:
            exported.add(name)
            name = alias.get(name)
    lines = body.splitlines()
    own = {a[1]: a[2] for ln in lines if (a := _ALLOCA.search(ln)) and a[1] not in exported}
    sizes: dict[str, int] = {}
    for buffer, text in own.items():
        size = _size(text, ranges)
        if size is None:
            return None
        sizes[buffer] = size
    carried = _loop_headers(lines)
    live = peak = 0
    alive: set[str] = set()
    for i, line in enumerate(lines):
        live += sum(sizes.get(n, 0) for n in carried.get(i, ()))  # the previous trip's, to the end
        alloca = _ALLOCA.search(line)
        if alloca and alloca[1] in sizes:
            alive.add(alloca[1])
            live += sizes[alloca[1]]
            peak = max(peak, live)
            continue
        dealloca = _DEALLOCA.search(line)
        if dealloca and dealloca[1] in alive:
            alive.discard(dealloca[1])
            live -= sizes[dealloca[1]]
    return peak


def program_transients(stream_ir: str) -> int | None:
    """A program's transients (the module docstring), the largest over its functions; ``None`` where a
    function's cannot be read statically."""
    starts = [m.start() for m in _FUNC.finditer(stream_ir)]
    bodies = [stream_ir[a:b] for a, b in zip(starts, [*starts[1:], len(stream_ir)], strict=True)]
    found = [_function_transients(body) for body in bodies]
    if any(t is None for t in found):
        return None
    return max((t for t in found if t is not None), default=0)


def stream_ir(source: str, flags: Sequence[str]) -> str:
    """``source`` compiled by IREE up to the end of its stream phase, with the flags its module was built with."""
    from iree.compiler.tools import compile_str

    out = compile_str(source, input_type="auto", extra_args=[*flags, "--compile-to=stream"])
    return out.decode() if isinstance(out, bytes) else str(out)


def declared_transients(source: str, flags: Sequence[str]) -> int | None:
    """:func:`program_transients` of ``source`` as compiled with ``flags`` (kept beside the compiled modules:
    a tenth of a second per graph, once); ``None`` where its stream IR does not say, or cannot be made."""

    def compute() -> bytes:
        try:
            found = program_transients(stream_ir(source, flags))
        except Exception as exc:  # the module compiled; only this second look failed: no figure, with why
            return json.dumps({"bytes": None, "why": f"{type(exc).__name__}: {str(exc)[:200]}"}).encode()
        return json.dumps({"bytes": found}).encode()

    key_flags = [*flags, "--compile-to=stream", f"reader={_reader_digest()}"]
    return json.loads(cached_file(source, key_flags, ".transients.json", compute))["bytes"]


@cache
def _reader_digest() -> str:
    """This module's own text: a kept figure is read again once the reader changes."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
