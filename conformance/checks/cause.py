"""Cause signatures: what a failure *is*, in words that do not depend on which case showed it.

A nightly run over hundreds of generated programs finds the same backend behaviour again and
again; grouping by case id calls each repeat news.  A :class:`Cause` is made from the deciding
check's own findings (never from the case id), as a sorted set of *parts*, one per distinct
behaviour, each prefixed by the check that found it:

* **program**: per finding of the generated-program model, the kind of reference that held the
  storage (a ``list`` such as a ``while_loop`` carry list, a result ``tuple``, a plain ``name``),
  whether it was inside a ``while_loop``, how long it was held (across the loop body, until after
  the loop, until its ``del``) and the kind of statement that let it go;
* **peak**, **residual**: the producing ops blamed (``cat``, ``addmm``);
* **parity**: the kind of the first bad output (output or gradient) and why it failed;
* **errors** (``fail-compile``, ``fail-run``, ``crash``, ``timeout``): the exception type and
  message, normalised, and its innermost frame (file name and function).

Every text goes through :func:`normalise`: numbers, sizes, addresses, paths and generated
names (``buf12``, ``arg0_1``, ``add_4``) are stripped, so two programs that differ only in seed,
shapes and buffer numbering get one signature.  Manifests match parts
(:mod:`conformance.checks.manifest`); triage groups by the whole signature.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from conformance.api.result import Result
from conformance.api.verdict import Check, CheckName, Status, combine

#: joins a cause's parts into its signature
SEPARATOR = " + "
#: ``figures`` key under which a check records its own cause parts (the program check does:
#: its blamed list is cut to ten entries, the parts are made from every finding)
PARTS_KEY = "cause_parts"
#: ``figures`` key of each part's share of the check's excess bytes (what a cause entry's bound holds)
SHARES_KEY = "cause_excess"
#: the program check's part for a measured timeline that departs from the program's
TIMELINE_PART = "measured timeline departs from the program"


@dataclass(frozen=True)
class Cause:
    """A failure's cause: the deciding check (or error status) and its sorted, distinct parts."""

    source: str
    parts: tuple[str, ...]
    #: each part's share of the deciding check's excess bytes (memory failures; empty otherwise)
    shares: tuple[tuple[str, int], ...] = ()

    @property
    def signature(self) -> str:
        return SEPARATOR.join(self.parts)

    def share(self, part: str) -> int | None:
        """``part``'s bytes of the excess; ``None`` when the check did not split it."""
        return dict(self.shares).get(part)


# --------------------------------------------------------------------------- normalising text

_DTYPES = re.compile(r"\b(?:b?float\d+|u?int\d+|complex\d+|float8\w*|bool)\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.~+-]*/)+[\w.+-]+")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_GENERATED = re.compile(r"\b(buf|arg|tmp|primals_|tangents_|getitem_|while_loop_(?:body|cond)_graph_)\d+(?:_\d+)*")
_NUMBER = re.compile(r"(?<![A-Za-z])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_NUMBERS = re.compile(r"N(?:\s*[,x]\s*N)+")
_QUOTED_NAME = re.compile(r"'<[^'>]*>'")


def normalise(text: str, limit: int = 200) -> str:
    """``text`` without what changes between instances of one cause: paths, addresses, sizes,
    generated names and numbers (dtype names such as ``float32`` are kept), whitespace collapsed."""
    kept: list[str] = []

    def keep(match: re.Match[str]) -> str:
        kept.append(match.group(0))
        return "\x00" + "".join(chr(ord("a") + int(d)) for d in str(len(kept) - 1)) + "\x00"

    text = _DTYPES.sub(keep, text)
    text = _PATH.sub("<path>", text)
    text = _HEX.sub("0x?", text)
    text = _GENERATED.sub(lambda m: f"{m.group(1)}N", text)
    text = _NUMBER.sub("N", text)
    text = _NUMBERS.sub("N,...", text)
    text = _QUOTED_NAME.sub("'<?>'", text)
    text = re.sub("\x00([a-j]+)\x00", lambda m: kept[int("".join(str(ord(c) - ord("a")) for c in m.group(1)))], text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def op_kind(op: str | None) -> str:
    """``aten::cat``, ``aten.cat.default``, ``torch.ops.aten.cat.default`` -> ``cat``; a generated
    kernel's name loses its number (``cpp_fused_add_tanh_3`` -> ``cpp_fused_add_tanh``)."""
    if not op:
        return "?"
    name = op.strip()
    name = re.sub(r"^(?:torch\.ops\.)?aten(?:::|\.)", "", name)
    name = re.sub(r"^extern_kernels\.", "", name)
    if "." in name and not name.startswith("("):
        head, _, tail = name.rpartition(".")
        name = head if tail in ("default", "Tensor", "Scalar", "int", "dim", "out", "self", "using_ints",
                                "Tensor_Scalar", "Scalar_Tensor", "Tensor_Tensor") else name
    name = re.sub(r"^[\w.]*:", "", name) if ":" in name and "::" not in name else name
    return re.sub(r"_\d+$", "", name)


# --------------------------------------------------------------------------- the program check

_EVENT_PREFIX = re.compile(r"^(?:\w+:)?(?:line \d+|[\w.]+#\d+:\d+)\s*(?:\[trip \d+\]\s*)?")
_IN_LOOP = re.compile(r"\[trip \d+\]|while_loop\w*#\d+:")


def _in_loop(event: str) -> bool:
    return bool(_IN_LOOP.search(event or ""))


def statement_kind(event: str) -> str:
    """The kind of a program statement, from its event label (``fw:line 214 del buf0`` -> ``del``)."""
    if not event or event.startswith("never"):
        return "never freed"
    stmt = _EVENT_PREFIX.sub("", event.strip())
    if stmt.startswith("del "):
        return "del"
    if stmt.startswith("return"):
        return "return"
    target, eq, value = stmt.partition(" = ")
    if not eq:
        return "call" if "(" in stmt else "statement"
    if "(" in value:
        return "assignment from a call" + (" to container items" if "[" in target else "")
    if re.fullmatch(r"[\w.]+", value.strip(" …")):
        return "rebinding"
    return "assignment"


_CONTAINER = {"list": "a list", "tuple": "a result tuple", "name": "a name"}


def _what(finding: dict[str, Any]) -> str:
    """The held storage in shape-free words: ``bool scalar`` (a loop predicate), ``int64 scalar``, ``buffer``."""
    kinds = finding.get("holds_kinds")
    if isinstance(kinds, list) and kinds:
        return " and ".join(str(k) for k in kinds)
    shape, dtype = finding.get("shape"), str(finding.get("dtype") or "")
    if shape == [] and dtype:
        return f"{dtype.removeprefix('torch.')} scalar"
    return "buffer"


def program_part(finding: dict[str, Any]) -> str:
    """One program finding (an entry of the program check's ``blamed``) as a cause part."""
    kind = finding.get("finding", "")
    if kind == "never-used":
        return "buffer allocated and never used"
    if kind not in ("late", "late-reference", "outlives-step"):  # the measured timeline's findings
        return f"measured timeline: {kind.replace('-', ' ')} ({op_kind(finding.get('op'))})"
    held_in = str(finding.get("held_in") or "name")
    if "in_loop" in finding:  # recorded by the program model
        loop, freed_in_loop = bool(finding["in_loop"]), bool(finding.get("released_in_loop"))
    else:  # a record from before: read the program model's event labels
        loop = _in_loop(str(finding.get("last_use", ""))) or _in_loop(str(finding.get("should_die_before", "")))
        freed_in_loop = _in_loop(str(finding.get("freed_after", "")))
    container = _CONTAINER.get(held_in, held_in)
    if loop and held_in == "list":
        container = "the carry list"
    where = "while_loop " if loop else ""
    freed = str(finding.get("freed_after", ""))
    if kind == "outlives-step" or freed.startswith("never"):
        span = "past the step"
    elif loop and freed_in_loop:
        span = "across the loop body"
    elif loop:
        span = "until after the loop"
    else:
        span = "past its last use"
    stmt = statement_kind(freed)
    what = _what(finding)
    if kind == "late-reference":
        return f"{where}reference by {container} to {what} kept past its last use, released {_released(span)} ({stmt})"
    return f"{where}{what} held by {container} {span} ({stmt})"


def _released(span: str) -> str:
    return {"across the loop body": "on the next trip", "until after the loop": "after the loop",
            "past the step": "never", "past its last use": "later"}.get(span, span)


def program_parts(findings: Iterable[dict[str, Any]], timeline_differs: bool = False) -> list[str]:
    """The distinct parts of every finding of a program check (:func:`conformance.checks.judge.judge_program`)."""
    parts = {program_part(f) for f in findings if f.get("finding")}
    if timeline_differs:
        parts.add(TIMELINE_PART)
    return sorted(parts)


# --------------------------------------------------------------------------- the other checks


def _blamed_ops(check: Check, what: str) -> list[str]:
    ops = {op_kind(b.get("op") or b.get("measured_op")) for b in check.blamed}
    if not ops:
        return [f"{what} with nothing blamed"]
    return [f"{what}: {op}" for op in sorted(ops)]


def _parity_parts(check: Check, result: Result) -> list[str]:
    figures = check.figures or result.parity or {}
    for call in sorted(figures, key=lambda k: str(k)):
        data = figures[call]
        if not isinstance(data, dict):
            continue
        for failure in data.get("failures") or []:
            name = str(failure.get("name", "?"))
            kind = op_kind(str(failure.get("op") or "")) if failure.get("op") else _output_kind(name)
            note = normalise(str(failure.get("note") or "outside tolerance"), 80)
            return [f"first bad {kind}: {note}"]
    return [f"outputs differ: {normalise(check.reason, 120)}"]


def _output_kind(name: str) -> str:
    """``output[0]`` -> ``output``; ``grad[p0]`` -> ``gradient``: the names carry numbering only."""
    head = name.split("[", 1)[0]
    return {"grad": "gradient", "output": "output"}.get(head, normalise(head, 40))


def _check_parts(check: Check, result: Result) -> list[str]:
    recorded = check.figures.get(PARTS_KEY) if check.figures else None
    if isinstance(recorded, list) and recorded and all(isinstance(p, str) for p in recorded):
        return list(recorded)
    if check.name == CheckName.PROGRAM:
        differs = check.figures.get("timeline") == "differs"
        return program_parts(check.blamed, differs) or ["generated program " + normalise(check.reason, 120)]
    if check.name == CheckName.PEAK:
        return _blamed_ops(check, "alive past modelled death" if check.blamed else "peak over the model")
    if check.name == CheckName.RESIDUAL:
        return _blamed_ops(check, "still alive after the step" if check.blamed else "residual differs")
    if check.name == CheckName.PARITY:
        return _parity_parts(check, result)
    return [normalise(check.reason, 160)]


# --------------------------------------------------------------------------- errors

_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\S+)')


def innermost_frame(detail: str) -> str:
    """``file.py:function`` of the innermost frame of a Python traceback, or of a faulthandler dump
    (which lists the most recent call first); ``""`` when there is none."""
    lines = detail.splitlines()
    recent_first = any("most recent call first" in line for line in lines)
    frames = [m for m in (_FRAME.search(line) for line in lines) if m]
    if recent_first:
        start = next(i for i, line in enumerate(lines) if "most recent call first" in line)
        after = [m for m in (_FRAME.search(line) for line in lines[start:]) if m]
        frames = after[:1] or frames
    elif frames:
        frames = frames[-1:]
    if not frames:
        return ""
    path, func = frames[0].group(1), frames[0].group(2)
    return f"{path.rsplit('/', 1)[-1]}:{func}"


_EXCEPTION = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Failed|Interrupt|Exit|Warning|Unsupported|Fault))\b:?\s*(.*)$")


def error_text(result: Result) -> str:
    """The exception line of an error verdict: the last ``Type: message`` line of its traceback,
    else its reason."""
    detail = "\n".join(result.notes)
    lines = [line.strip() for line in detail.splitlines()]
    found = [line for line in lines if _EXCEPTION.match(line)]
    return found[-1] if found else result.reason


def _error_parts(result: Result) -> list[str]:
    status = raw_status(result)
    if status == Status.TIMEOUT:
        return ["no verdict within the time limit"]
    if status == Status.CRASH:
        head = normalise(result.reason.split(";")[0], 80)
        frame = innermost_frame("\n".join(result.notes))
        return [head + (f" in {frame}" if frame else "")]
    text = error_text(result)
    frame = innermost_frame("\n".join(result.notes))
    return [normalise(text, 160) + (f" @ {frame}" if frame else "")]


# --------------------------------------------------------------------------- the cause


def raw_status(result: Result) -> Status:
    """The backend's own verdict: ``raw_status`` (a record from outside may hold any text there), else the status."""
    try:
        return Status.parse(result.raw_status or result.status)
    except ValueError:
        return Status.parse(result.status)


def cause_of(result: Result) -> Cause | None:
    """The cause of a failing verdict (before any manifest is applied); ``None`` for a pass or skip."""
    status = raw_status(result)
    if not status.is_failure:
        return None
    deciding = combine(result.checks)
    if status in (Status.FAIL_COMPILE, Status.FAIL_RUN, Status.CRASH, Status.TIMEOUT) or deciding is None:
        source = status.value
        parts = _error_parts(result)
    else:
        source = deciding.name.value
        parts = _check_parts(deciding, result)
        shares = _shares(deciding, parts)
        return Cause(source, tuple(sorted({f"{source}: {p}" for p in parts})),
                     tuple(sorted((f"{source}: {p}", n) for p, n in shares.items())))
    return Cause(source, tuple(sorted({f"{source}: {p}" for p in parts})))


def _shares(check: Check, parts: list[str]) -> dict[str, int]:
    """Each part's bytes of the check's excess: as the check split it (program), else by the blamed
    storages of each op, the part that explains most taking what blame left unexplained."""
    if check.excess_bytes is None:
        return {}
    recorded = check.figures.get(SHARES_KEY) if check.figures else None
    if isinstance(recorded, dict) and all(isinstance(v, int) for v in recorded.values()):
        return {p: int(recorded.get(p, 0)) for p in parts}
    if len(parts) == 1:
        return {parts[0]: check.excess_bytes}
    shares = dict.fromkeys(parts, 0)
    for b in check.blamed:
        for p in parts:
            if p.endswith(f": {op_kind(b.get('op') or b.get('measured_op'))}"):
                shares[p] += int(b.get("bytes") or 0)
                break
    rest = check.excess_bytes - sum(shares.values())
    if rest > 0 and shares:
        shares[max(shares, key=lambda p: shares[p])] += rest
    return shares


def fill_cause(result: Result) -> None:
    """Give a record written before records carried causes its cause (in place)."""
    cause = cause_of(result)
    if cause is not None:
        result.cause, result.cause_parts = cause.signature, list(cause.parts)
