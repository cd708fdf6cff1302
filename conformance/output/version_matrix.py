"""Verdicts side by side per torch version: one column per backend and torch release.

Results directories from runs on different torch releases (``tox -e torch28``,
``tox -e torch29``, the pinned one) hold the same case x backend pairs; the report's main
matrix keeps one verdict per pair, and this view keeps all of them, so what changed
between releases is one row of colours.  Each result says its torch version in
``versions["torch"]`` (the backend's ``versions()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from conformance.api.result import Result


@dataclass(frozen=True)
class Column:
    backend: str
    torch: str

    @property
    def label(self) -> str:
        return f"{self.backend} · torch {self.torch}"


@dataclass
class VersionMatrix:
    columns: list[Column]
    rows: list[tuple[str, dict[Column, Result]]]  # case id, its verdict per column
    differing: set[str] = field(default_factory=set)  # cases whose verdicts on one backend differ by version


def torch_version(result: Result) -> str:
    return result.versions.get("torch", "unknown")


def _version_key(version: str) -> tuple[int, Version | str]:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def version_matrix(results: Sequence[Result]) -> VersionMatrix | None:
    """The side-by-side view, or ``None`` when no backend ran on more than one torch version.

    For a pair run twice on the same torch version, the later result wins."""
    versions_per_backend: dict[str, set[str]] = {}
    for r in results:
        versions_per_backend.setdefault(r.backend, set()).add(torch_version(r))
    if all(len(v) < 2 for v in versions_per_backend.values()):
        return None
    columns = [Column(b, v) for b in versions_per_backend
               for v in sorted(versions_per_backend[b], key=_version_key)]
    cells: dict[str, dict[Column, Result]] = {}
    for r in results:
        cells.setdefault(r.case, {})[Column(r.backend, torch_version(r))] = r
    rows = sorted(cells.items())
    differing = {
        case for case, row in rows
        if any(len({row[c].status for c in columns if c.backend == b and c in row}) > 1 for b in versions_per_backend)
    }
    return VersionMatrix(columns, rows, differing)
