"""What an adapter returns, checked where it enters the harness, before any of it reaches a record.

An adapter's hooks are typed, but nothing stops a vendor's ``notes()`` from returning ``42`` or its
``memory_findings()`` from returning a ``timeline`` of its own.  Left unchecked, the first writes a
``results.jsonl`` line the harness's own reader rejects (that pair's verdict is lost) and the second
overwrites the harness's figures with the backend's.  Each function here returns the value as the
engine uses it, or raises :class:`HookError` with one line naming the hook and what was wrong: the
pair's verdict is then ``fail-run`` with that line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from conformance.api.adapter import Fallback
from conformance.api.result import MemoryFigures
from conformance.api.verdict import Check, Status
from conformance.models.lifetime import LifetimeModel
from conformance.util.text import clip

#: the engine's own memory figures: a finding of that name would overwrite one in the flat ``memory`` object
OWN_FIGURES = frozenset(f.name for f in fields(MemoryFigures))


class HookError(ValueError):
    """An adapter hook returned something the harness cannot record; the message names the hook."""


def _shown(value: object) -> str:
    return f"{clip(repr(value), 80)} ({type(value).__name__})"


def notes(value: object, hook: str = "CompiledStep.notes()") -> list[str]:
    if not isinstance(value, list | tuple):
        raise HookError(f"{hook} returned {_shown(value)}, not a list of str")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise HookError(f"{hook} returned a list whose item {i} is {_shown(item)}, not a str")
    return list(value)


def fallbacks(value: object, hook: str = "CompiledStep.fallbacks()") -> list[Fallback]:
    """A list of :class:`conformance.api.adapter.Fallback` whose fields are strings."""
    if not isinstance(value, list | tuple):
        raise HookError(f"{hook} returned {_shown(value)}, not a list of Fallback")
    for i, item in enumerate(value):
        if not isinstance(item, Fallback) or not all(isinstance(op, str) for op in item.ops) \
                or not all(isinstance(v, str) for v in (item.part, item.ran_in, item.why)):
            raise HookError(f"{hook} returned a list whose item {i} is {_shown(item)}, not a Fallback of str")
    return list(value)


def files(value: object, hook: str = "CompiledStep.program_files()") -> frozenset[str]:
    if not isinstance(value, set | frozenset | list | tuple):
        raise HookError(f"{hook} returned {_shown(value)}, not a set of file names")
    for item in value:
        if not isinstance(item, str):
            raise HookError(f"{hook} returned a set holding {_shown(item)}, not a str")
    return frozenset(value)


def findings(value: object, hook: str = "CompiledStep.memory_findings()") -> dict[str, Any]:
    """A dict of JSON values under keys of the backend's own: never one of the engine's figures."""
    if not isinstance(value, Mapping):
        raise HookError(f"{hook} returned {_shown(value)}, not a dict")
    for key, item in value.items():
        if not isinstance(key, str):
            raise HookError(f"{hook} returned a key {_shown(key)}, not a str")
        if key in OWN_FIGURES:
            raise HookError(f"{hook} returned {key!r}, one of the harness's own memory figures; "
                            f"a backend's findings go under names of its own")
        problem = _json_problem(item)
        if problem:
            raise HookError(f"{hook} returned {key!r}: {problem}")
    return dict(value)


def _json_problem(value: object) -> str | None:
    """Why ``value`` cannot be written as ``results.jsonl`` writes it (other values become strings), or None."""
    try:
        json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"{clip(str(exc), 120)}"
    return None


def contract(value: object, hook: str = "CompiledStep.contract_check()") -> Check | tuple[str, str] | None:
    if value is None or isinstance(value, Check):
        return value
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value):
        try:
            Status.parse(value[0])
        except ValueError:
            raise HookError(f"{hook} returned the status {value[0]!r}, not a verdict") from None
        return value
    raise HookError(f"{hook} returned {_shown(value)}, not a Check, a (status, reason) pair or None")


def versions(value: object, hook: str = "Backend.versions()") -> dict[str, str]:
    """Package name -> version: str keys, and values the results schema takes (str, number, bool, None)."""
    if not isinstance(value, Mapping):
        raise HookError(f"{hook} returned {_shown(value)}, not a dict of str")
    for key, item in value.items():
        if not isinstance(key, str) or not (item is None or isinstance(item, str | int | float)):
            raise HookError(f"{hook} returned {_shown(key)}: {_shown(item)}; keys must be str and values str")
        if isinstance(item, float) and not math.isfinite(item):
            raise HookError(f"{hook} returned {key!r}: {item!r}, not a finite number")
    return dict(value)


def model(value: object, hook: str) -> LifetimeModel | None:
    if value is None or isinstance(value, LifetimeModel):
        return value
    raise HookError(f"{hook} returned {_shown(value)}, not a LifetimeModel or None")
