"""Reading ``results.jsonl`` defensively: each line checked against the shipped JSON Schema.

Files reach ``report``, ``merge`` and ``--resume`` from anywhere: a run killed mid-write
(its last line cut short), a hand edit, another tool.  So every line is validated on
its own; good records are kept, each bad one is named by its line number, and a
truncated last line (what a killed writer leaves) is a warning rather than an error.
The schema is ``conformance/output/schemas/results.schema.json``; docs/results-schema.md
describes it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from conformance.api.result import Result
from conformance.api.verdict import registered_checks

SCHEMA_PATH = Path(__file__).with_name("schemas") / "results.schema.json"  # package data
MESSAGE_CHARS = 160  # a schema message quotes the offending value: keep the line readable
QUOTED_CHARS = 48  # ... and of that value, this much (a 400-digit figure would hide what is wrong with it)


class RecordsError(ValueError):
    """A results file that cannot be used at all; the message names it."""


@dataclass(frozen=True)
class LineProblem:
    line: int
    message: str
    truncated: bool = False  # the unterminated last line a killed writer leaves

    def describe(self, path: Path) -> str:
        return f"{path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class ForeignLine:
    """A whole line that is no record this release reads (a newer ``schema_version``, another tool's line):
    set apart from the records, and kept byte for byte by whatever rewrites the file."""

    line: int
    raw: bytes


@dataclass
class RecordFile:
    """The good records of one file, the lines set apart, and what was wrong with them."""

    path: Path
    results: list[Result] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)  # each result's line as written (kept verbatim on resume)
    line_numbers: list[int] = field(default_factory=list)  # each result's line number (1-based)
    problems: list[LineProblem] = field(default_factory=list)
    foreign: list[ForeignLine] = field(default_factory=list)  # every problem but a truncated last line

    def warnings(self, limit: int = 10, kept_in: Path | None = None) -> list[str]:
        """One line per problem (at most ``limit``, then a count), each naming file and line.  ``kept_in``: the
        file a rewrite keeps the lines it cannot read in (otherwise the file is only read, and left as it is)."""
        keep = f"line kept as it is in {kept_in}" if kept_in is not None else "line not read; left as it is"
        lines = [p.describe(self.path) + ("" if p.truncated else f" ({keep})") for p in self.problems[:limit]]
        if len(self.problems) > limit:
            more = f"kept as they are in {kept_in}" if kept_in is not None else "not read"
            lines.append(f"{self.path}: {len(self.problems) - limit} more lines that are no results record ({more})")
        return lines


def schema() -> dict[str, Any]:
    """The JSON Schema of one ``results.jsonl`` record: the shipped file, its check names the registry's
    now (:func:`conformance.api.verdict.registered_checks`: a check added as a module is a name at once)."""
    return _schema(_check_names())


def _check_names() -> tuple[str, ...]:
    return tuple(spec.name.value for spec in registered_checks())


@cache
def _schema(checks: tuple[str, ...]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    item = data["properties"]["checks"]
    item["items"]["properties"]["name"]["enum"] = list(checks)
    item["description"] = (f"The checks the verdict was combined from: the first failing one in the order "
                           f"{', '.join(checks)} decides it.")
    return data


def _validator() -> jsonschema.protocols.Validator:
    return _validator_for(_check_names())


@cache
def _validator_for(checks: tuple[str, ...]) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(_schema(checks))
    return cls(_schema(checks))  # type: ignore[no-any-return]


ItemCheck = Callable[[Any], bool]
#: the keywords beside ``items`` that leave an array's items to be checked one by one, apart from the rest
_ARRAY_KEYWORDS = frozenset({"type", "items", "description", "title", "minItems", "maxItems"})
_INT64 = (-(2**63), 2**63 - 1)


def _scalar_check(schema: object) -> ItemCheck | None:
    """A check of one value against ``schema`` where it is ``{"type": "string" | "number" | "integer"}`` with at
    most ``minimum``/``maximum`` beside it (``None``: any other schema).  It accepts only what the schema
    accepts; what it refuses, jsonschema decides (an integer written ``5.0`` is one)."""
    if not isinstance(schema, dict) or not set(schema) <= {"type", "minimum", "maximum", "description"}:
        return None
    kind, low, high = schema.get("type"), schema.get("minimum", _INT64[0]), schema.get("maximum", _INT64[1])
    if not (type(low) is int and type(high) is int):
        return None
    if kind == "string" and set(schema) <= {"type", "description"}:
        return lambda v: type(v) is str
    if kind == "number":
        return lambda v: type(v) in (int, float) and low <= v <= high
    if kind == "integer":
        return lambda v: type(v) is int and low <= v <= high
    return None


def _item_check(schema: object) -> ItemCheck | None:
    """:func:`_scalar_check`, or one for a fixed-length array of such values (``prefixItems`` with ``minItems`` and
    ``maxItems`` its length: a timeline point); ``None`` for any other item schema."""
    scalar = _scalar_check(schema)
    if scalar is not None or not isinstance(schema, dict):
        return scalar
    prefix = schema.get("prefixItems")
    if set(schema) - {"description"} != {"type", "prefixItems", "minItems", "maxItems"} \
            or schema["type"] != "array" or not isinstance(prefix, list) \
            or not schema["minItems"] == schema["maxItems"] == len(prefix) or type(schema["minItems"]) is not int:
        return None
    checks = [_scalar_check(p) for p in prefix]
    if any(c is None for c in checks):
        return None
    each = [c for c in checks if c is not None]
    return lambda v: type(v) is list and len(v) == len(each) and all(c(x) for c, x in zip(each, v))


@dataclass(frozen=True)
class _FastSchema:
    """The record schema less the ``items`` of its long arrays (timelines: most of a record's values), and a
    check compiled for those items: a valid record passes both far sooner than jsonschema walks every point."""

    rest: jsonschema.protocols.Validator
    items: tuple[tuple[tuple[str, ...], ItemCheck], ...]


@cache
def _fast_for(checks: tuple[str, ...]) -> _FastSchema:
    rest = copy.deepcopy(_schema(checks))
    found: list[tuple[tuple[str, ...], ItemCheck]] = []

    def strip(node: dict[str, Any], path: tuple[str, ...]) -> None:
        for name, sub in (node.get("properties") or {}).items():
            if not isinstance(sub, dict):
                continue
            check = _item_check(sub.get("items")) if set(sub) <= _ARRAY_KEYWORDS else None
            if check is not None:
                del sub["items"]
                found.append(((*path, name), check))
            strip(sub, (*path, name))

    strip(rest, ())
    return _FastSchema(jsonschema.validators.validator_for(rest)(rest), tuple(found))


def _items_pass(data: object, path: tuple[str, ...], check: ItemCheck) -> bool:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return True  # absent, or under a value the rest of the schema already refused or allows (null)
        data = data[key]
    return data is None or (type(data) is list and all(check(x) for x in data))


def check_record(data: object) -> str | None:
    """Why ``data`` is not a valid record (the most relevant schema error), or ``None``."""
    fast = _fast_for(_check_names())
    if fast.rest.is_valid(data) and all(_items_pass(data, path, check) for path, check in fast.items):
        return None
    error = jsonschema.exceptions.best_match(_validator().iter_errors(data))
    if error is None:
        return None
    where = error.json_path if error.json_path != "$" else "record"
    message, shown = error.message, repr(error.instance)
    if len(shown) > QUOTED_CHARS and message.startswith(shown):  # the value first: what is wrong must still show
        message = f"{shown[:QUOTED_CHARS - 3]}...({len(shown)} characters){message[len(shown):]}"
    return _shorten(f"{where}: {message}")


def read_records(path: Path) -> RecordFile:
    """Every valid record of ``path``; raises :class:`RecordsError` only when the file cannot be read."""
    data = _read_bytes(path)
    loaded = RecordFile(path)
    lines = data.split(b"\n")
    unterminated = len(lines) - 1 if lines[-1].strip() else None  # index of a last line with no newline
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        record, problem = _parse(raw)
        if record is None:
            cut = index == unterminated and str(problem).startswith("not JSON")
            message = "truncated last line (the run writing it was killed?); ignored" if cut else str(problem)
            loaded.problems.append(LineProblem(index + 1, message, truncated=cut))
            if not cut:  # a whole line this release does not read: set apart, never dropped by a rewrite
                loaded.foreign.append(ForeignLine(index + 1, raw.rstrip(b"\r")))
            continue
        loaded.results.append(Result.from_json(record))
        loaded.lines.append(raw.strip())
        loaded.line_numbers.append(index + 1)
    return loaded


def read_results(path: Path) -> list[Result]:
    """Every record of a results file; raises ValueError naming the first bad line.

    Input from outside the run (``report``, ``merge``) goes through
    :func:`read_records` instead, which keeps the good lines.
    """
    loaded = read_records(path)
    if loaded.problems:
        raise ValueError(loaded.problems[0].describe(path))
    return loaded.results


def read_usable(path: Path) -> RecordFile:
    """:func:`read_records`, but a file without one valid record is an error naming its first problem."""
    loaded = read_records(path)
    if not loaded.results:
        first = f" ({loaded.problems[0].describe(path)})" if loaded.problems else ""
        raise RecordsError(f"{path}: no valid result records{first}")
    return loaded


def _read_bytes(path: Path) -> bytes:
    if path.is_dir():
        raise RecordsError(f"{path}: is a directory, not a results.jsonl file")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise RecordsError(f"{path}: not found (no results.jsonl; run `conformance run` first)") from None
    except OSError as exc:
        raise RecordsError(f"{path}: cannot read: {exc.strerror}") from None


def _parse(raw: bytes) -> tuple[dict[str, Any], None] | tuple[None, str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start})"
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})"
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        return None, f"not a results record: {_shorten(str(exc))}"
    except RecursionError:
        return None, "not a results record: nested too deeply"
    problem = check_record(record)
    if problem is not None:
        return None, f"not a results record: {problem}"
    return record, None


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."
