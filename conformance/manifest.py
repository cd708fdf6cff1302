"""Per-backend manifests of expected non-pass verdicts.

A manifest is a TOML file of ``[[expect]]`` entries: ``case`` (an id or a glob),
``status`` (an expected failing verdict), ``reason`` (required) and optionally
``issue`` (a link).  Strict: a case expected to fail that passes is ``xpass``,
which fails the run; entries that match no selected case are reported as stale.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from conformance.result import FAILURES, Result


class ManifestError(ValueError):
    """A manifest that cannot be read; the message names the file and the entry."""


@dataclass(frozen=True)
class Expectation:
    case: str
    status: str
    reason: str
    issue: str = ""

    def matches(self, case_id: str) -> bool:
        return fnmatch.fnmatchcase(case_id, self.case)


@dataclass
class Manifest:
    backend: str
    path: Path | None = None
    entries: list[Expectation] = field(default_factory=list)

    def lookup(self, case_id: str) -> Expectation | None:
        return next((e for e in self.entries if e.matches(case_id)), None)

    def stale(self, case_ids: Iterable[str]) -> list[Expectation]:
        ids = list(case_ids)
        return [e for e in self.entries if not any(e.matches(i) for i in ids)]


def load_manifest(backend: str, path: Path | None = None) -> Manifest:
    path = path or _packaged_manifest(backend)
    if path is None or not path.exists():
        return Manifest(backend, None, [])
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from exc
    raw = data.get("expect", [])
    if not isinstance(raw, list):
        raise ManifestError(f"{path}: 'expect' must be an array of tables ([[expect]])")
    unknown_keys = set(data) - {"expect"}
    if unknown_keys:
        raise ManifestError(f"{path}: unknown top-level key {sorted(unknown_keys)[0]!r}")
    entries = []
    for i, item in enumerate(raw, 1):
        where = f"{path}: entry {i}"
        if not isinstance(item, dict):
            raise ManifestError(f"{where}: must be a table")
        extra = set(item) - {"case", "status", "reason", "issue"}
        if extra:
            raise ManifestError(f"{where}: unknown key {sorted(extra)[0]!r}")
        case, status, reason = item.get("case"), item.get("status"), item.get("reason")
        if not isinstance(case, str) or not case:
            raise ManifestError(f"{where}: 'case' (an id or glob) is required")
        if status not in FAILURES:
            raise ManifestError(f"{where} ({case}): status {status!r} is not one of {', '.join(FAILURES)}")
        if not isinstance(reason, str) or not reason.strip():
            raise ManifestError(f"{where} ({case}): a 'reason' is required")
        issue = item.get("issue", "")
        if not isinstance(issue, str):
            raise ManifestError(f"{where} ({case}): 'issue' must be a string")
        entries.append(Expectation(case, status, reason.strip(), issue))
    return Manifest(backend, path, entries)


def _packaged_manifest(backend: str) -> Path | None:
    import conformance.backends as pkg

    for base in pkg.__path__:
        candidate = Path(base) / "manifests" / f"{backend}.toml"
        if candidate.exists():
            return candidate
    return None


def apply(result: Result, manifest: Manifest) -> Result:
    """Turn the backend's raw verdict into the final one, strictly."""
    result.raw_status = result.status
    expectation = manifest.lookup(result.case)
    if expectation is None or result.status == "skip":
        return result
    result.expected = expectation.status
    if result.status == expectation.status:
        result.status = "xfail"
        result.reason = f"expected: {expectation.reason}" + (f" ({expectation.issue})" if expectation.issue else "")
    elif result.status == "pass":
        result.status = "xpass"
        result.reason = f"unexpected pass: manifest expects {expectation.status} ({expectation.reason})"
    else:
        result.reason = f"manifest expects {expectation.status}, got {result.status}: {result.reason}"
    return result
