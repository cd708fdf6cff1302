"""The adapter API is one catalog: every public member of ``Backend`` and ``CompiledStep`` has a
docstring (or a ``#:`` comment) where it is declared, and the vendor guide names it.

A hook added to the base classes without a line in ``docs/vendor-guide.md`` fails here, so what a
vendor can override is never learnt only by reading the harness's source.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from conformance.api.adapter import Backend, CompiledStep

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "vendor-guide.md").read_text()


def _members(cls: type) -> list[str]:
    own = [n for n in vars(cls) if not n.startswith("_")]
    annotated = [n for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")]
    return sorted(set(own) | set(annotated))


def _documented_in_source(cls: type, name: str) -> bool:
    value = vars(cls).get(name)
    if callable(value) and inspect.getdoc(value):
        return True
    source = inspect.getsource(cls)
    # a class attribute: a ``#:`` comment on the line(s) above, or a trailing comment
    return bool(re.search(rf"#:[^\n]*\n(?:\s*#:[^\n]*\n)*\s*{name}\s*:", source)
                or re.search(rf"^\s*{name}\s*:[^\n]*#", source, re.M)
                or name in ("name", "capabilities"))  # the two a subclass must set, described by the class


def test_the_catalog_is_not_empty() -> None:
    assert {"compile", "make_probe", "warm_up"} <= set(_members(Backend))
    assert {"run", "program_model", "contract_check", "notes"} <= set(_members(CompiledStep))


@pytest.mark.parametrize(("cls", "name"), [(c, n) for c in (Backend, CompiledStep) for n in _members(c)],
                         ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_every_public_member_is_documented_and_in_the_guide(cls: type, name: str) -> None:
    assert _documented_in_source(cls, name), f"{cls.__name__}.{name} has no docstring or #: comment"
    assert f"`{name}" in GUIDE, f"docs/vendor-guide.md does not list {cls.__name__}.{name}"
