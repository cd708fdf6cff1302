"""Cause signatures: what a failure *is*, named by mechanism, never by case, kernel, op or size.

A nightly run over hundreds of programs finds the same backend behaviour again and again;
grouping by case id (or by the fused kernel that happened to show it) calls each repeat news.  A
:class:`Cause` is made from the deciding check's own findings (never from the case id), as a set
of *parts*, each prefixed by the check that found it.  Each finding is first described in
shape-free words:

* **program**: per finding of the generated-program model, the kind of reference that held the
  storage (a ``list`` such as a ``while_loop`` carry list, a result ``tuple``, a plain ``name``),
  whether it was inside a ``while_loop``, how long it was held and the kind of statement that let it go;
* **peak**, **residual**: per blamed buffer, who made it (a fused kernel, an extern kernel, an
  op), never the kernel's or op's name nor its size;
* **parity**: the kind of the first bad output (output or gradient) and why it failed;
* **errors** (``fail-compile``, ``fail-run``, ``crash``, ``timeout``): the exception type and
  message, normalised, and its innermost frame (file name and function).

then offered, with the evidence around it, to the recognisers of
:mod:`conformance.checks.mechanism`: a recognised finding's part is ``<check>: <mechanism>``
(``peak: layout-copy``); the words stay for evidence no recogniser knows (a new mechanism).

Every text goes through :func:`normalise`: numbers, sizes, addresses, paths and generated
names (``buf12``, ``arg0_1``, ``add_4``) are stripped.  Manifests match parts
(:mod:`conformance.checks.manifest`); triage groups by the primary part.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from conformance.api.result import MemoryFigures, Result
from conformance.api.verdict import CauseFinding, Check, CheckName, Status, check_spec, combine
from conformance.checks.facts import NOT_IN_MODEL, ProgramPart, parse_event, share
from conformance.checks.mechanisms import Evidence, Program, graph_breaks_of, mechanism_of, recognise, recognise_rest
from conformance.util.text import without_escapes

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
    #: why each recognised part is its mechanism (the recogniser's reason)
    why: tuple[tuple[str, str], ...] = ()
    #: bytes a bound's percentage covers beside the model peak, per part whose mechanism says (Mechanism.scale)
    scales: tuple[tuple[str, int], ...] = ()
    #: the most bytes each part can show where its evidence says (Mechanism.bound: the backend's program declares it)
    bounds: tuple[tuple[str, int], ...] = ()

    @property
    def signature(self) -> str:
        """The parts, sorted: one mechanism set is one signature whatever the shares."""
        return SEPARATOR.join(sorted(self.parts))

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The mechanisms named, the primary (largest share) first."""
        return tuple(m for m in (mechanism_of(p) for p in self.parts) if m)

    def reason(self, part: str) -> str:
        """Why ``part`` is its mechanism ("" for a part no recogniser knew)."""
        return dict(self.why).get(part, "")

    def scale(self, part: str) -> int:
        """Bytes ``part``'s manifest bound covers beside the model peak (0 for most mechanisms)."""
        return dict(self.scales).get(part, 0)

    def evidence_bound(self, part: str) -> int | None:
        """The most bytes ``part`` can show as its evidence declares it (``None``: its manifest entry says)."""
        return dict(self.bounds).get(part)

    def share(self, part: str) -> int | None:
        """``part``'s bytes of the excess; ``None`` when the check did not split it."""
        return dict(self.shares).get(part)


# --------------------------------------------------------------------------- normalising text

_DTYPES = re.compile(r"\b(?:b?float\d+|u?int\d+|complex\d+|float8\w*|bool)\b")
#: a real path, never a vendor's words with a slash in them ("ONNX export/session failed", "NCHW/NHWC"): one rooted
#: (``/tmp/x``, ``~/x``, ``./x``, ``../x``, ``C:\\x``, a URL's ``//host/x``), or a relative one whose last part has a
#: file's extension (``src/core/node.cpp``, ``torch/_inductor/lowering.py``)
_PATH = re.compile(r"(?:(?<![\w.~+-])(?:~|\.{1,2})?/|\b[A-Za-z]:[\\/])[\w.~+@%=-]*(?:[\\/][\w.~+@%=-]+)*"
                   r"|\b(?:[\w.+-]+/)+[\w+-]*\.[A-Za-z][A-Za-z0-9]{0,7}\b")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
#: a file named without its directory (a generated module's ``c2bqx....py``, a kernel's ``.so``)
_FILE = re.compile(r"\b[\w.+-]+\.(?:py|pyc|cpp|cc|c|h|hpp|cu|so|o|mlir|vmfb|json|txt|log|pt)\b")
#: a digest: hexadecimal of 8 or more characters with a digit and a letter, or any run of 20 or more lower-case
#: letters and digits (inductor names its generated modules by a base-32 hash of their code)
_HASH = re.compile(r"\b(?:(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}|[a-z0-9]{20,})\b")
_GENERATED = re.compile(r"\b(buf|arg|tmp|primals_|tangents_|getitem_|while_loop_(?:body|cond)_graph_)\d+(?:_\d+)*")
_NUMBER = re.compile(r"(?<![A-Za-z])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_NUMBERS = re.compile(r"N(?:\s*[,x]\s*N)+")
_QUOTED_NAME = re.compile(r"'<[^'>]*>'")


def normalise(text: str, limit: int = 200) -> str:
    """``text`` without what changes between instances of one cause: paths, file names, addresses, digests,
    sizes, generated names and numbers (dtype names such as ``float32`` are kept), whitespace collapsed."""
    kept: list[str] = []

    def keep(match: re.Match[str]) -> str:
        kept.append(match.group(0))
        return "\x00" + "".join(chr(ord("a") + int(d)) for d in str(len(kept) - 1)) + "\x00"

    text = without_escapes(text)  # a coloured message's words only
    text = _PATH.sub("<path>", text)  # before dtypes are set aside: a path may hold a dtype's name
    text = _DTYPES.sub(keep, text)
    text = _FILE.sub("<file>", text)
    text = _HEX.sub("0x?", text)
    text = _HASH.sub("<hash>", text)
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

def _in_loop(label: object) -> bool:
    event = parse_event(label)
    return event is not None and event.in_loop


def statement_kind(event: str) -> str:
    """The kind of a program statement, from its event label (``fw:line 214 del buf0`` -> ``del``)."""
    if not event or event.startswith("never"):
        return "never freed"
    parsed = parse_event(event.strip())
    stmt = parsed.statement if parsed is not None else event.strip()
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


def _what(finding: Mapping[str, Any]) -> str:
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
    return part_facts(finding).words()


def part_facts(finding: Mapping[str, Any]) -> ProgramPart:
    """One program finding's shape-free facts (:class:`~conformance.checks.facts.ProgramPart`)."""
    kind = finding.get("finding", "")
    if kind == "never-used":
        return ProgramPart("never-used")
    if kind not in ("late", "late-reference", "outlives-step"):  # the measured timeline's findings
        return ProgramPart("timeline", timeline_finding=f"{str(kind).replace('-', ' ')} "
                                                        f"({_maker(str(finding.get('op') or ''))})")
    held_in = str(finding.get("held_in") or "name")
    if "in_loop" in finding:  # recorded by the program model
        loop, freed_in_loop = bool(finding["in_loop"]), bool(finding.get("released_in_loop"))
    else:  # a record from before: where the program model's event labels put the statements
        loop = _in_loop(finding.get("last_use")) or _in_loop(finding.get("should_die_before"))
        freed_in_loop = _in_loop(finding.get("freed_after"))
    container = _CONTAINER.get(held_in, held_in)
    if loop and held_in == "list":
        container = "the carry list"
    freed = str(finding.get("freed_after", ""))
    if kind == "outlives-step" or freed.startswith("never"):
        span = "past the step"
    elif loop and freed_in_loop:
        span = "across the loop body"
    elif loop:
        span = "until after the loop"
    else:
        span = "past its last use"
    return ProgramPart("reference" if kind == "late-reference" else "held", _what(finding), container, loop, span,
                       statement_kind(freed))


def program_parts(findings: Iterable[dict[str, Any]], timeline_differs: bool = False) -> list[str]:
    """The distinct parts of every finding of a program check (:func:`conformance.checks.judge.judge_program`)."""
    parts = {program_part(f) for f in findings if f.get("finding")}
    if timeline_differs:
        parts.add(TIMELINE_PART)
    return sorted(parts)


# --------------------------------------------------------------------------- the other checks


def _buffer_words(b: dict[str, Any]) -> str:
    """A blamed buffer in words free of kernel and op names, sizes and roles: who made it."""
    op = str(b.get("op") or b.get("measured_op") or "")
    if b.get("model_death") == NOT_IN_MODEL:
        return "storage the model does not have"
    return f"buffer made by {_maker(op)}"


def _maker(op: str) -> str:
    """Who made a storage, in words free of its name: a fused kernel, an extern kernel, an op."""
    if re.match(r"^(?:cpp|cpu|triton|cuda)_", op_kind(op)):
        return "a fused kernel"
    if op.startswith("extern_kernels"):
        return "an extern kernel"
    return "no operator" if op.startswith("(outside") or not op else "an op"


def _blamed_parts(check: Check, what: str) -> list[tuple[str, dict[str, Any]]]:
    """Each blamed entry of a peak or residual check with its shape-free words."""
    return [(f"{what}: {_buffer_words(b)}", b) for b in check.blamed]


def _parity_parts(check: Check, result: Result) -> list[str]:
    figures = check.figures or result.parity or {}
    for call in sorted(figures, key=lambda k: str(k)):
        data = figures[call]
        if not isinstance(data, dict):
            continue
        for failure in sorted(data.get("failures") or [], key=_severity):
            name = str(failure.get("name", "?"))
            kind = op_kind(str(failure.get("op") or "")) if failure.get("op") else _output_kind(name)
            miss = failure.get("miss")  # the typed kind of miss (parity.Miss); a record from before: its note
            what = str(miss) if isinstance(miss, str) and miss else \
                normalise(str(failure.get("note") or "outside tolerance"), 80)
            return [f"first bad {kind}: {what}"]
    return [f"outputs differ: {normalise(check.reason, 120)}"]


def _severity(failure: dict[str, Any]) -> int:
    """A near miss of the noise floor after every other kind: a pair with a wrong value anywhere is a wrong value."""
    return 1 if failure.get("miss") == "near the noise floor" else 0


def _output_kind(name: str) -> str:
    """``output[0]`` -> ``output``; ``grad[p0]`` -> ``gradient``: the names carry numbering only."""
    head = name.split("[", 1)[0]
    return {"grad": "gradient", "output": "output"}.get(head, normalise(head, 40))


_Finding = CauseFinding


# each built-in check's cause vocabulary (its ``CheckSpec.cause``, registered in conformance.checks.registry)


def program_findings(check: Check, result: Result) -> list[CauseFinding]:
    """The program check's findings: the parts it recorded from every finding (its blamed list is cut
    to ten), each with the entries behind it; the part's share of the excess on its first entry."""
    recorded = check.figures.get(PARTS_KEY) if check.figures else None
    details = list(recorded) if isinstance(recorded, list) and all(isinstance(p, str) for p in recorded) \
        else program_parts(check.blamed, check.figures.get("timeline") == "differs")
    if not details:
        details = ["generated program " + normalise(check.reason, 120)]
    shares = check.figures.get(SHARES_KEY) if check.figures else None
    shares = shares if isinstance(shares, dict) else {}
    out: list[CauseFinding] = []
    for d in details:
        entries: list[dict[str, Any] | None] = [b for b in check.blamed if b.get("finding") and program_part(b) == d]
        share = shares.get(d)
        out.extend(CauseFinding(d, e, share if i == 0 else 0) for i, e in enumerate(entries or [None]))
    return out


#: the cause part of a memory check whose measurement lies under its model's range: the model holds bytes the
#: measured step never held (an op modelled as allocating more than its kernel does), a harness fault to read in
#: the model, never an excess to blame on a storage
MODEL_ABOVE_MEASUREMENT = "model above the measurement"


def _storage_findings(check: Check, alive: str, unblamed: str) -> list[CauseFinding]:
    if check.contract is not None and check.contract.excess_bytes < 0:
        return [CauseFinding(MODEL_ABOVE_MEASUREMENT, None, -check.contract.excess_bytes)]
    what = alive if check.blamed else unblamed
    found = [CauseFinding(d, b, int(b.get("bytes") or 0)) for d, b in _blamed_parts(check, what)]
    return found or [CauseFinding(what, None, None)]


def peak_findings(check: Check, result: Result) -> list[CauseFinding]:
    """The peak check's findings: who made each storage alive past its modelled death."""
    return _storage_findings(check, "alive past modelled death", "peak over the model with nothing blamed")


def residual_findings(check: Check, result: Result) -> list[CauseFinding]:
    """The residual check's findings: who made each storage still alive after the step."""
    return _storage_findings(check, "still alive after the step", "residual differs with nothing blamed")


def parity_findings(check: Check, result: Result) -> list[CauseFinding]:
    """The parity check's finding: the kind of the first bad output and why it failed."""
    return [CauseFinding(p, None, None) for p in _parity_parts(check, result)]


def _check_findings(check: Check, result: Result) -> list[CauseFinding]:
    """The deciding check's findings in its own vocabulary (a check that recorded its parts is read
    as the program check is; one with no vocabulary, by its normalised reason)."""
    recorded = check.figures.get(PARTS_KEY) if check.figures else None
    if isinstance(recorded, list) and recorded:
        return program_findings(check, result)
    spec = check_spec(check.name)
    if spec is not None and spec.cause is not None:
        return spec.cause(check, result)
    return [CauseFinding(normalise(check.reason, 160), None, None)]


# --------------------------------------------------------------------------- errors

_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\S+)')


def innermost_frame(detail: str) -> str:
    """The function of the innermost frame of a Python traceback, or of a faulthandler dump (which lists the
    most recent call first); ``""`` when there is none.  Never its file: a generated module's name is a hash
    of its code (inductor's ``c2bqx....py``), so one bug on two programs would be two causes."""
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
    return normalise(frames[0].group(2), 80)


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


def _evidence(result: Result, source: str, check: Check | None) -> Evidence:
    memory = result.memory
    events: list[str | tuple[str, int | None]] = \
        list(_held(memory.program_timeline)) if memory is not None else []
    if not events and check is not None:  # no timeline recorded: the statements the findings name
        events = [str(b[k]) for b in check.blamed if isinstance(b, dict)
                  for k in ("last_use", "should_die_before", "freed_after") if b.get(k)]
    graphs = tuple(_held(memory.model_timeline)) if memory is not None else ()
    figures = check.figures if check is not None and isinstance(check.figures, dict) else {}
    model_source = str(figures.get("model_source") or (memory.model_source if memory is not None else "") or "")
    runtime = memory.findings if memory is not None and isinstance(memory.findings, dict) else {}
    program = next((c for c in result.checks if c.name == CheckName.PROGRAM), None)
    exact = program is not None and program.status == Status.PASS and isinstance(program.figures, dict) \
        and program.figures.get("timeline") == "exact"
    return Evidence(source, "", {}, Program.from_events(events), tuple(e for e, _ in graphs),
                    tuple(b for _, b in graphs), model_source,
                    figures=figures, runtime=runtime, graph_breaks=graph_breaks_of(result.notes), program_exact=exact,
                    model_made_bytes=_made_bytes(memory))


def _made_bytes(memory: MemoryFigures | None) -> int:
    """The bytes of every value the user-level model makes; a record from before that figure: what its user-level
    model timeline grows by (never more: an event that frees as it allocates grows by less)."""
    if memory is None:
        return 0
    if isinstance(memory.user_model_made_bytes, int):
        return memory.user_model_made_bytes
    if memory.model_source != "user-graph":
        return 0
    held = [b for _, b in _held(memory.model_timeline) if b is not None]
    return sum(max(0, b - a) for a, b in zip([0, *held], held))


def _held(timeline: object) -> list[tuple[str, int | None]]:
    """The ``(event, bytes held)`` pairs of a timeline (a figure that is not an int reads as none)."""
    if not isinstance(timeline, (list, tuple)):
        return []
    return [(str(p[0]), p[1] if len(p) > 1 and isinstance(p[1], int) and not isinstance(p[1], bool) else None)
            for p in timeline if isinstance(p, (list, tuple)) and p]


def cause_of(result: Result) -> Cause | None:
    """The cause of a failing verdict (before any manifest is applied); ``None`` for a pass or skip.

    Each finding of the deciding check (or the error) is offered to the mechanism recognisers
    (:mod:`conformance.checks.mechanism`); a recognised one is the part ``<check>: <mechanism>``,
    any other keeps its shape-free words.  Parts are ordered by their share of the excess, the
    largest (the primary mechanism) first."""
    status = raw_status(result)
    if not status.is_failure:
        return None
    deciding = combine(result.checks)
    error = status in (Status.FAIL_COMPILE, Status.FAIL_RUN, Status.CRASH, Status.TIMEOUT)
    if error or deciding is None:
        error = True
        source = status.value
        base = replace(_evidence(result, source, None), error=error_text(result) + "\n" + "\n".join(result.notes))
        found = [_Finding(p, None, None) for p in _error_parts(result)]
    else:
        source = deciding.name.value
        base = _evidence(result, source, deciding)
        found = _check_findings(deciding, result)
    if not error and deciding is not None:
        found = _unnamed_rest(deciding, base, found)
    recorded = _recorded_part_facts(deciding) if not error and deciding is not None else {}
    parts: dict[str, int | None] = {}
    why: dict[str, str] = {}
    scales: dict[str, int] = {}
    bounds: dict[str, int] = {}
    once: dict[tuple[str, str], int] = {}
    for f in found:
        held = None if source != CheckName.PROGRAM.value else \
            recorded.get(f.detail) or (part_facts(f.entry) if f.entry else None)
        seen = recognise(replace(base, part=f.detail, finding=f.entry or {}, held=held))
        part = f"{source}: {seen.mechanism if seen else f.detail}"
        if seen and part not in why:
            why[part] = seen.why
        if seen and seen.scale:
            scales[part] = max(scales.get(part, 0), seen.scale)
        if seen and seen.bound is not None and seen.bound_per_pair:
            # once per pair; for the program check once per finding part (its words), as the check counts its shares
            key = (part, f.detail if source == CheckName.PROGRAM.value else "")
            once[key] = max(once.get(key, 0), seen.bound)
        elif seen and seen.bound is not None:
            bounds[part] = bounds.get(part, 0) + seen.bound
        if f.share is not None:
            parts[part] = (parts.get(part) or 0) + f.share
        else:
            parts.setdefault(part, None)
    for (part, _), bound in once.items():
        bounds[part] = bounds.get(part, 0) + bound
    shares = {} if error else _split(deciding, parts)
    order = sorted(parts, key=lambda p: (-(shares.get(p) or 0), p))
    return Cause(source, tuple(order), tuple(sorted(shares.items())), tuple(sorted(why.items())),
                 tuple(sorted(scales.items())), tuple(sorted(bounds.items())))


def program_part_facts(findings: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each program part's facts by its words (the check records them: a part whose entries its blamed list cut
    is recognised from these, never from its words)."""
    held: dict[str, int] = {}
    for f in findings:
        if f.get("finding"):
            words = part_facts(f).words()
            held[words] = held.get(words, 0) + share(f)
    return {facts.words(): replace(facts, held_statement_bytes=held[facts.words()]).to_json()
            for facts in (part_facts(f) for f in findings if f.get("finding"))}


def _recorded_part_facts(check: Check) -> dict[str, ProgramPart]:
    recorded = check.figures.get(ProgramPart.KEY) if isinstance(check.figures, dict) else None
    if not isinstance(recorded, dict):
        return {}
    return {words: facts for words, value in recorded.items() if (facts := ProgramPart.from_json(value)) is not None}


#: the words of the part of a peak's excess that blame's named storages leave over
UNNAMED_REST = "peak over the model beyond the storages blamed"


def _unnamed_rest(check: Check, base: Evidence, found: list[CauseFinding]) -> list[CauseFinding]:
    """The findings of a peak with the excess blame's storages leave unnamed as a finding of its own, where a
    mechanism recognises it from the program alone (``finding`` empty, as where blame names nothing): blame names
    what is alive past its modelled death, never what a fused kernel made before the graphs' schedule makes it
    (its buffers allocated together), so that part of an excess has no storage to name.  A step output the
    forward made, blamed at a peak the program reaches in its backward (:func:`_output_at_backward_peak`), names
    no excess either and leaves its bytes to that rest.  Only mechanisms that read such a rest from the program
    are asked (:func:`~conformance.checks.mechanism.recognise_rest`); unrecognised, the findings stay as they were
    (the rest with the largest part: :func:`_split`)."""
    if check.name != CheckName.PEAK or check.excess_bytes is None or not check.blamed \
            or any(f.share is None for f in found):
        return found
    named = [f for f in found if not _output_at_backward_peak(base, f) and not _operand_at_program_peak(base, f)]
    rest = check.excess_bytes - sum(int(f.share or 0) for f in named)
    if rest <= 0 or recognise_rest(replace(base, part=UNNAMED_REST, finding={})) is None:
        return found
    return [*named, CauseFinding(UNNAMED_REST, None, rest)]


def _output_at_backward_peak(base: Evidence, f: CauseFinding) -> bool:
    """A blamed forward buffer the program holds as a step output (``role`` output, alive until the caller drops
    the outputs), at a peak the program reaches in its backward: the received graphs hold every step output there
    too, so blame's size-and-order match put it on a storage of the same size that dies early (a buffer inductor
    reuses for the output, ``buf6 = buf0``), and it names none of the excess."""
    where = replace(base, finding=f.entry or {}).buffer
    peak = base.program.peak_statement()
    return f.entry is not None and f.entry.get("role") == "output" and where is not None and where[0] == "fw" \
        and peak is not None and base.program.statements[peak].phase == "bw"


def _operand_at_program_peak(base: Evidence, f: CauseFinding) -> bool:
    """A blamed buffer that the op making the peak of a program the measurement follows exactly reads (a saved
    value of the forward by its backward name too): any schedule holds an op's operands while the op makes its
    results, so blame, which put the peak's excess on it by size and order, names none of the excess with it."""
    peak = base.program.peak_statement()
    where = replace(base, finding=f.entry or {}).buffer
    if f.entry is None or not base.program_exact or peak is None or where is None:
        return False
    statement = base.program.statements[peak]
    if not statement.work or "(" not in statement.text:
        return False
    phase, name = where
    own = name if phase == statement.phase else \
        base.program.backward_name(name) if (phase, statement.phase) == ("fw", "bw") else None
    operands = statement.text.split("(", 1)[1]
    return own is not None and own in re.findall(r"\b\w+\b", operands)


def _split(check: Check | None, parts: dict[str, int | None]) -> dict[str, int]:
    """Each part's bytes of the check's excess: as the check split it (the program check does), else
    by the blamed storages of each part, the part that explains most taking what blame left over."""
    if check is None or check.excess_bytes is None:
        return {}
    if len(parts) == 1:
        return {next(iter(parts)): check.excess_bytes}
    shares = {p: int(n or 0) for p, n in parts.items()}
    if isinstance((check.figures or {}).get(SHARES_KEY), dict):  # the check split its excess itself
        return shares
    rest = check.excess_bytes - sum(shares.values())
    if rest > 0 and shares:
        shares[max(shares, key=lambda p: shares[p])] += rest
    return shares


def fill_cause(result: Result) -> None:
    """Give a record its cause by mechanism (in place): one written before records carried causes, or
    before they named mechanisms, is judged again from its evidence.  A record with no evidence
    (no checks, notes or memory figures: made outside) keeps the cause it has.  Where the parts
    change, a record that had new parts keeps as new those that are still no known mechanism (all
    of them, where every part is now one)."""
    if result.cause and not (result.checks or result.notes or result.memory):
        return
    cause = cause_of(result)
    if cause is None or sorted(cause.parts) == sorted(result.cause_parts):
        return
    was_new = bool(result.new_cause_parts)
    result.cause, result.cause_parts = cause.signature, list(cause.parts)
    unknown = [p for p in cause.parts if not mechanism_of(p)]
    result.new_cause_parts = (unknown or list(cause.parts)) if was_new else []
