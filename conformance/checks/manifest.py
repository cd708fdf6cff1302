"""Per-backend manifests of expected non-pass verdicts.

A manifest is a TOML file of ``[[expect]]`` entries: ``case`` (an id or a glob),
``status`` (an expected failing verdict), ``reason`` (required) and optionally
``issue`` (a link) and ``when`` (a condition on installed versions, ``"torch<2.9"`` or a
list of such, all of which must hold: the entry applies only there, and there it comes
before entries without a condition).  An expected memory failure (``fail-peak``, ``fail-residual``)
also says how far over its contract it is expected to be: ``excess = N`` (exactly
N bytes) or ``max_excess = N`` (at most N bytes), so an entry for a 1-byte excess
cannot hide an 18 KB leak added on top.  Strict: a case expected to fail that
passes is ``xpass``, which fails the run; a larger (or, for ``excess``, any
other) excess is a failure; entries that apply here and match no selected case
are reported as stale.

``strict = false`` marks a case entry for a wrong value that only some drawn values show (``fail-parity``
only): IREE's max_unpool1d loses a value only where a call's pooled indices fall in two windows' overlap.
Where a pair does not show it, the entry steps aside: a pass is a pass (not ``xpass``), and another
failure is judged as if the entry were not there (by its cause).  Where it shows, it is held as strictly.

An entry may name a *cause* instead of a case: ``cause = "<part>"`` is one part of a failure's
cause signature (:mod:`conformance.checks.cause`: ``results.jsonl``'s ``cause_parts``), with
``status``, ``reason``, ``issue`` and ``when`` as above and, for a memory failure, a bound per
instance, ``max_excess = N`` bytes or ``max_excess_pct = P`` percent of the pair's model peak (a
bound that scales with the case; given both, the bound is their sum: a fixed part plus a part
that scales).  A failure no case entry names is expected when every part of its cause is a known
one; the bounds of the parts' entries add up to the excess it may show.  A part no entry knows, or
an excess beyond the bound, is a failure.  ``case`` (a glob) may narrow a cause entry to some
cases; a case entry comes before cause entries.

An entry may name a *mechanism* (:mod:`conformance.checks.mechanism`): ``mechanism =
"layout-copy"`` expects every part that names it, whichever check found it (``peak: layout-copy``,
``program: layout-copy``), on every case, with the same keys and bounds as a cause entry.  This is
how a known backend behaviour on a program nobody here wrote (a user's own model) is ``xfail``
with the mechanism's reason, while growth beyond the bound still fails.  A mechanism whose evidence
declares its own bound (``lowering-transients``: what the backend's compiled program allocates of its
own, read from its stream IR) needs none in the entry: each instance is held to that figure.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import tomllib
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from conformance.api.result import FAILURES, Result
from conformance.api.verdict import Status
from conformance.checks.cause import Cause, cause_of
from conformance.checks.mechanisms import NAMES as MECHANISMS
from conformance.checks.mechanisms import SELF_BOUNDED, mechanism_of
from conformance.util.paths import inside, safe_name
from conformance.util.text import printable
from conformance.util.writes import write_whole


class ManifestError(ValueError):
    """A manifest that cannot be read; the message names the file and the entry."""


@dataclass(frozen=True)
class Expectation:
    case: str
    status: str
    reason: str
    issue: str = ""
    excess: int | None = None  # exact bytes over the contract an expected memory failure shows
    max_excess: int | None = None  # or a bound on them
    when: tuple[str, ...] = ()  # requirement-style conditions on installed versions, all must hold
    cause: str = ""  # a cause part (conformance.checks.cause) this entry expects on any case ``case`` matches
    max_excess_pct: float | None = None  # a cause entry's bound: percent of the pair's model peak
    mechanism: str = ""  # a mechanism (conformance.checks.mechanism) this entry expects on any case ``case`` matches
    #: False: a wrong value only some drawn values show; a pair that does not show it is judged without the entry
    strict: bool = True

    @property
    def by_cause(self) -> bool:
        """An entry that expects a cause part or a mechanism, not a case."""
        return bool(self.cause or self.mechanism)

    def matches(self, case_id: str) -> bool:
        """A case entry naming ``case_id`` (cause and mechanism entries match causes: :meth:`covers`)."""
        return not self.by_cause and fnmatch.fnmatchcase(case_id, self.case)

    def covers(self, case_id: str, status: str, part: str) -> bool:
        """A cause entry expecting ``part``, or a mechanism entry expecting the mechanism it names,
        of a ``status`` failure on ``case_id``."""
        named = (self.mechanism and mechanism_of(part) == self.mechanism) or (self.cause and self.cause == part)
        return bool(named) and self.status == status and fnmatch.fnmatchcase(case_id, self.case)

    def bound(self, model_peak: int | None, beside: int = 0) -> int | None:
        """The bytes over its contract one instance of this cause may show (``None``: not known here):
        ``max_excess`` plus ``max_excess_pct`` of the model peak, whichever are given; ``beside``: bytes
        the percentage also covers, for a mechanism whose storage scales with more than the model's
        peak (a layout copy copies the graph's inputs: :attr:`conformance.checks.mechanism.Mechanism.scale`)."""
        if self.max_excess_pct is not None and model_peak is None:
            return None
        if self.max_excess is None and self.max_excess_pct is None:
            return None
        base = (model_peak or 0) + beside
        scaled = int(base * self.max_excess_pct / 100) if self.max_excess_pct is not None and base else 0
        return (self.max_excess or 0) + scaled

    def applies(self, versions: Mapping[str, str] | None = None) -> bool:
        """Whether every ``when`` condition holds for ``versions`` (default: what is installed)."""
        return all(condition_holds(c, versions) for c in self.when)

    @property
    def unsized(self) -> bool:
        """An expected memory failure that does not say by how much: it cannot tell a bigger one."""
        return (Status(self.status).is_memory and self.excess is None and self.max_excess is None
                and self.max_excess_pct is None)

    def excess_problem(self, observed: int | None) -> str | None:
        """Why an observed excess is not the one expected (``None``: it is)."""
        if self.unsized:
            return (f"manifest entry {self.case!r} records no expected excess (measured "
                    f"{observed if observed is not None else '?'} B; --update-manifest records it)")
        if self.excess is None and self.max_excess is None:
            return None
        if observed is None:
            return "no excess measured"
        if self.excess is not None and observed != self.excess:
            return f"excess {observed} B, manifest expects {self.excess} B"
        if self.max_excess is not None and observed > self.max_excess:
            return f"excess {observed} B, manifest allows at most {self.max_excess} B"
        return None

    def describe_excess(self) -> str:
        if self.excess is not None:
            return f" (+{self.excess} B)"
        if self.max_excess_pct is not None:
            fixed = f"{self.max_excess} B + " if self.max_excess is not None else ""
            return f" (<= +{fixed}{self.max_excess_pct:g}% of the model peak)"
        return f" (<= +{self.max_excess} B)" if self.max_excess is not None else ""

    @property
    def label(self) -> str:
        """How messages name the entry: its case, its cause or its mechanism."""
        if self.mechanism:
            return f"mechanism {self.mechanism!r}"
        return f"cause {self.cause!r}" if self.cause else repr(self.case)


def condition_holds(condition: str, versions: Mapping[str, str] | None = None) -> bool:
    """``"torch<2.9"`` against the installed torch (or ``versions["torch"]``); a distribution
    that is not installed satisfies no condition.  Local labels (``2.8.0+cpu``) are ignored,
    as pip ignores them."""
    req = Requirement(condition)
    if versions is None:
        version = _installed(req.name)
    else:
        version = {canonicalize_name(k): v for k, v in versions.items()}.get(canonicalize_name(req.name))
    return version is not None and req.specifier.contains(version, prereleases=True)


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _parse_when(value: object, where: str) -> tuple[str, ...]:
    conditions = [value] if isinstance(value, str) else value
    if not isinstance(conditions, list) or not conditions or not all(isinstance(c, str) for c in conditions):
        raise ManifestError(f"{where}: 'when' must be a condition like \"torch<2.9\" or a list of them")
    for c in conditions:
        try:
            req = Requirement(c)
        except InvalidRequirement as exc:
            raise ManifestError(f"{where}: 'when' condition {c!r} is not NAME SPECIFIER ({exc})") from None
        if req.extras or req.url or req.marker:
            raise ManifestError(f"{where}: 'when' condition {c!r} may only name a distribution and versions")
    return tuple(conditions)


@dataclass
class Manifest:
    backend: str
    path: Path | None = None
    entries: list[Expectation] = field(default_factory=list)
    #: the versions ``when`` conditions are judged against; ``None``: what is installed
    versions: Mapping[str, str] | None = None

    def active(self) -> list[Expectation]:
        """The entries whose ``when`` holds here."""
        return [e for e in self.entries if e.applies(self.versions)]

    def lookup(self, case_id: str) -> Expectation | None:
        """The first active entry matching ``case_id``; one with a ``when`` that holds here is the
        more specific statement and comes before any entry without one."""
        matching = [e for e in self.active() if e.matches(case_id)]
        return next((e for e in matching if e.when), None) or next(iter(matching), None)

    def unsized(self, case_ids: Iterable[str]) -> list[Expectation]:
        """Active memory entries without their excess that match one of ``case_ids``: the ones that
        fail this run until ``--update-manifest`` records them (an entry for another torch, or for a
        case the run does not select, cannot)."""
        ids = list(case_ids)
        return [e for e in self.active() if e.unsized and any(e.matches(i) for i in ids)]

    def stale(self, case_ids: Iterable[str]) -> list[Expectation]:
        """Active case entries that match no selected case (a cause entry expects a cause on any case)."""
        ids = list(case_ids)
        return [e for e in self.active() if not e.by_cause and not any(e.matches(i) for i in ids)]

    def covering(self, case_id: str, status: str, part: str) -> Expectation | None:
        """The active cause entry expecting ``part``; one with a ``when`` comes first."""
        matching = [e for e in self.active() if e.covers(case_id, status, part)]
        return next((e for e in matching if e.when), None) or next(iter(matching), None)


def load_manifest(backend: str, path: str | os.PathLike[str] | None = None,
                  versions: Mapping[str, str] | None = None) -> Manifest:
    """``versions`` (distribution -> version) stands in for what is installed when judging ``when``;
    ``path`` as the adapter declares it (``manifest_path``: a string, as the vendor guide shows, or a Path)."""
    path = Path(path) if path else manifest_location(backend)
    if not path.exists():
        return Manifest(backend, None, [], versions)
    try:
        data = tomllib.loads(_read_text(path))
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
        entries.append(_entry(item, where))
    return Manifest(backend, path, entries, versions)


@dataclass(frozen=True)
class _Field:
    """One key of an ``[[expect]]`` entry: what its value must be, checked the same way for every entry."""

    kind: type | tuple[type, ...]
    says: str  # what the value must be, as the one-line error says it
    low: float | None = None  # a number's range: low <= value < high
    high: float | None = None

    def check(self, value: object) -> bool:
        if isinstance(value, bool) and bool not in (self.kind if isinstance(self.kind, tuple) else (self.kind,)):
            return False  # TOML's true is no number
        if not isinstance(value, self.kind):
            return False
        if isinstance(value, float) and value != value:
            return False
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (self.low is None or value >= self.low) and (self.high is None or value < self.high)
        return True


_BYTES = _Field(int, "a whole number of bytes >= 0", 0, 2**63)
#: every key an entry may have, and the rule its value is held to (the one place values are checked)
FIELDS: dict[str, _Field] = {
    "case": _Field(str, "an id or glob (a string)"),
    "status": _Field(str, "a failing status (a string)"),
    "reason": _Field(str, "a string"),
    "issue": _Field(str, "a string"),
    "cause": _Field(str, "a cause part (a string from results.jsonl's cause_parts)"),
    "mechanism": _Field(str, "a mechanism's name (a string)"),
    "excess": _BYTES,
    "max_excess": _BYTES,
    "max_excess_pct": _Field((int, float), "a percentage (a number >= 0 and < 1000000)", 0, 1e6),
    "when": _Field((str, list), 'a condition like "torch<2.9" or a list of them'),
    "strict": _Field(bool, "true or false"),
}


def _checked_values(item: Mapping[str, object], where: str) -> None:
    """Every key known and every value of its type and in its range, or one :class:`ManifestError` naming
    the file, the entry (and its case where it has a readable one) and the key."""
    extra = set(item) - set(FIELDS)
    if extra:
        raise ManifestError(f"{where}: unknown key {sorted(extra)[0]!r}")
    case = item.get("case")
    named = f"{where} ({printable(case)})" if isinstance(case, str) and case else where
    for key, rule in FIELDS.items():
        if key in item and not rule.check(item[key]):
            raise ManifestError(f"{named}: {key!r} must be {rule.says}, got {_shown(item[key])}")


def _shown(value: object) -> str:
    text = printable(repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _entry(item: Mapping[str, Any], where: str) -> Expectation:
    """One ``[[expect]]`` table, checked: types and ranges first (:data:`FIELDS`), then how the keys combine."""
    _checked_values(item, where)
    cause = item.get("cause", "")
    if "cause" in item and not cause.strip():
        raise ManifestError(f"{where}: 'cause' must be a cause part (a string from results.jsonl's cause_parts)")
    mechanism = item.get("mechanism", "")
    if "mechanism" in item and mechanism not in MECHANISMS:
        raise ManifestError(f"{where}: 'mechanism' {mechanism!r} is not a known mechanism "
                            f"({', '.join(sorted(MECHANISMS))})")
    if cause and mechanism:
        raise ManifestError(f"{where}: give 'cause' or 'mechanism', not both")
    named = cause or mechanism
    case, status, reason = item.get("case", "*" if named else None), item.get("status"), item.get("reason")
    if not isinstance(case, str) or not case:
        raise ManifestError(f"{where}: 'case' (an id or glob) or 'cause' is required")
    entry_at = f"{where} ({printable(case)})"  # the case as text: a manifest's string may hold anything
    if status not in FAILURES:
        raise ManifestError(f"{entry_at}: status {status!r} is not one of {', '.join(FAILURES)}")
    if not isinstance(reason, str) or not reason.strip():
        raise ManifestError(f"{entry_at}: a 'reason' is required")
    issue = item.get("issue", "")
    excess, max_excess = item.get("excess"), item.get("max_excess")
    if excess is not None and max_excess is not None:
        raise ManifestError(f"{entry_at}: give 'excess' or 'max_excess', not both")
    pct = _parse_pct(item, named, excess, f"{where} ({named or case})")
    self_bounded = mechanism in SELF_BOUNDED
    if named and Status(status).is_memory and max_excess is None and pct is None and not self_bounded:
        raise ManifestError(f"{where} ({named!r}): a memory cause needs its bound per instance, "
                            "'max_excess' (bytes) or 'max_excess_pct' (percent of the model peak)")
    when = _parse_when(item["when"], f"{entry_at}") if "when" in item else ()
    strict = item.get("strict", True)
    if not strict and (named or status != Status.FAIL_PARITY):
        raise ManifestError(f"{entry_at}: 'strict = false' is for a case entry expecting fail-parity (a wrong "
                            "value only some drawn values show)")
    return Expectation(case, status, reason.strip(), issue, excess, max_excess, when, cause.strip(), pct,
                       mechanism, strict)


def _parse_pct(item: Mapping[str, object], cause: str, excess: object, where: str) -> float | None:
    """A cause or mechanism entry's ``max_excess_pct`` (its value checked by :data:`FIELDS`); a cause has no
    exact ``excess`` across cases."""
    if cause and excess is not None:
        raise ManifestError(f"{where}: a cause entry bounds each instance ('max_excess' or 'max_excess_pct'), "
                            "it has no exact 'excess'")
    if "max_excess_pct" not in item:
        return None
    if not cause:
        raise ManifestError(f"{where}: 'max_excess_pct' is for cause entries; a case entry gives bytes")
    return float(item["max_excess_pct"])  # type: ignore[arg-type]


def _read_text(path: Path) -> str:
    """The manifest's text; a directory, unreadable file or non-UTF-8 bytes are a ManifestError naming it."""
    if path.is_dir():
        raise ManifestError(f"{path}: is a directory, not a manifest file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text (byte {exc.start}); TOML manifests are UTF-8") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from None


def manifest_location(backend: str) -> Path:
    """Where a built-in backend's manifest lives (whether or not it exists yet): ``<name>.toml`` in the
    manifests directory, the name made safe (:func:`safe_name`) so that none points elsewhere."""
    import conformance.backends as pkg

    dirs = [Path(base) / "manifests" for base in pkg.__path__]
    name = safe_name(backend) + ".toml"
    found = [d / name for d in dirs if (d / name).exists()]
    return inside(found[0].parent if found else dirs[0], name)


def apply(result: Result, manifest: Manifest) -> Result:
    """Turn the backend's raw verdict into the final one, strictly; a failure gets its cause."""
    result.raw_status = result.status
    cause = cause_of(result)
    if cause is not None:
        result.cause, result.cause_parts = cause.signature, list(cause.parts)
    expectation = manifest.lookup(result.case)
    if expectation is not None and not expectation.strict and result.status != expectation.status:
        note = (f"manifest entry {expectation.case!r} (strict = false, {expectation.status}) did not show on "
                "these values: judged without it")
        result.notes.append(note)
        expectation = None  # a wrong value these values did not show: the pair is judged as if unlisted
    if expectation is None and cause is not None:
        return _apply_cause(result, manifest, cause)
    if expectation is None or result.status == Status.SKIP:
        return result
    result.expected = expectation.status
    problem = expectation.excess_problem(result.excess_bytes) if result.status == expectation.status else None
    if result.status == expectation.status and problem is None:
        result.status = Status.XFAIL
        result.reason = f"expected: {expectation.reason}" + (f" ({expectation.issue})" if expectation.issue else "")
        if expectation.when:
            result.reason += f" [when {', '.join(expectation.when)}]"
    elif result.status == Status.PASS:
        result.status = Status.XPASS
        result.reason = f"unexpected pass: manifest expects {expectation.status} ({expectation.reason})"
    elif problem is not None:
        result.reason = f"{problem}: {result.reason}"
    else:
        result.reason = f"manifest expects {expectation.status}, got {result.status}: {result.reason}"
    return result


def _apply_cause(result: Result, manifest: Manifest, cause: Cause) -> Result:
    """A failure no case entry names: expected when every part of its cause is known and within bounds."""
    status = str(result.status)
    known = {p: manifest.covering(result.case, status, p) for p in result.cause_parts}
    result.new_cause_parts = [p for p, e in known.items() if e is None]
    entries = [e for e in known.values() if e is not None]
    if result.new_cause_parts:
        if entries:
            result.reason = (f"new cause beside {len(entries)} known: {'; '.join(result.new_cause_parts)}: "
                             f"{result.reason}")
        return result
    result.expected = status
    if Status(status).is_memory:
        problem = _beyond_bounds(result, cause, known)
        if problem:
            result.reason = f"known cause beyond its bound: {problem}: {result.reason}"
            return result
    first_part = max(known, key=lambda p: cause.share(p) or 0)  # the part that explains most
    first_entry = known[first_part]
    assert first_entry is not None
    result.status = Status.XFAIL
    more = f" [+{len(entries) - 1} more known cause part(s)]" if len(entries) > 1 else ""
    why = cause.reason(first_part)
    named = f" ({first_entry.mechanism}{': ' + why if why else ''})" if first_entry.mechanism else ""
    result.reason = (f"expected cause{named}: {first_entry.reason}"
                     + (f" ({first_entry.issue})" if first_entry.issue else "")
                     + (f" [when {', '.join(first_entry.when)}]" if first_entry.when else "") + more)
    return result


def _beyond_bounds(result: Result, cause: Cause, known: Mapping[str, Expectation | None]) -> str:
    """Which known part shows more bytes than its entry allows ("" when none does).  Each part is held
    to its own bound where the check split its excess (the program check does); otherwise the pair's
    excess to the bounds' sum."""
    peak = result.memory.model_peak_bytes if result.memory is not None else None
    over = []
    unsplit: list[tuple[str, Expectation]] = []
    for part, entry in known.items():
        assert entry is not None
        share, bound = cause.share(part), entry.bound(peak, cause.scale(part))
        if bound is None and entry.max_excess is None and entry.max_excess_pct is None:
            bound = cause.evidence_bound(part)  # the mechanism's own figure (Mechanism.bound)
            if bound is None:
                return f"{part!r}: its bound is the figure its evidence declares, and none was read"
        if bound is None:
            return f"{part!r}: its bound is a share of the model peak, and no model peak was measured"
        if share is None:
            unsplit.append((part, entry))
        elif share > bound:
            over.append(f"{part!r} {share} B > {bound} B")
    if unsplit:
        total = sum(e.bound(peak, cause.scale(p)) or cause.evidence_bound(p) or 0 for p, e in unsplit)
        observed = result.excess_bytes
        if observed is None or observed > total:
            over.append(f"excess {observed if observed is not None else '?'} B > {total} B")
    return "; ".join(over)


UNEXPLAINED = "UNEXPLAINED"


def _is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


def update(manifest: Manifest, results: Iterable[Result]) -> tuple[Manifest, list[str]]:
    """The manifest a run says it should be, and what changed (for the user to review).

    Existing reasons are kept; a new failure gets an entry whose reason starts with
    ``UNEXPLAINED`` for a human to replace; a case that now passes loses its entry (a
    glob that now over-matches is narrowed to the ids that still fail); entries this
    run did not exercise are left alone.
    """
    mine = [r for r in results if r.backend == manifest.backend and (r.raw_status or r.status) != Status.SKIP]
    runs = {r.case: str(r.raw_status or r.status) for r in mine}
    excess = {r.case: r.excess_bytes for r in mine}
    notes: list[str] = []
    entries: list[Expectation] = []
    by_cause = {r.case for r in mine if r.status == Status.XFAIL and r.cause_parts and not r.new_cause_parts}
    for e in manifest.entries:
        matched = {c: s for c, s in runs.items() if e.matches(c)} if e.applies(manifest.versions) else {}
        if not matched:
            entries.append(e)
            continue
        still = sorted(c for c, s in matched.items() if s == e.status)
        # a non-strict entry's passes are values that did not show its fault, not a fix
        changed = sorted(c for c, s in matched.items() if s != e.status and (e.strict or s in FAILURES))
        memory = Status(e.status).is_memory
        sizes = {excess[c] for c in still} if memory else set()
        bound_holds = e.max_excess is not None and all((excess[c] or 0) <= e.max_excess for c in still)
        resize = memory and not bound_holds and sizes != {e.excess}
        if not changed and not resize:
            entries.append(e)
            continue
        if _is_glob(e.case) and (changed or len(sizes) > 1):
            notes.append(f"narrowed {e.case!r} to the cases that still give {e.status}")
            entries.extend(_sized(Expectation(c, e.status, e.reason, e.issue, when=e.when, strict=e.strict), excess[c],
                                  memory) for c in still)
        elif still:
            if resize:
                notes.append(f"{e.case}: excess {e.describe_excess().strip() or 'unset'} -> +{excess[still[0]]} B")
            entries.append(_sized(e, excess[still[0]], memory) if resize else e)
        for c in changed:
            status = matched[c]
            if status in FAILURES:
                notes.append(f"{c}: {e.status} -> {status} (reason kept; re-check it)")
                entries.append(_sized(Expectation(c, status, f"{e.reason} [was {e.status}; re-check]", e.issue,
                                                  when=e.when), excess[c], Status(status).is_memory))
            else:
                notes.append(f"{c}: now passes; entry removed")
    for case, status in runs.items():
        if case in by_cause:  # expected by its cause, on any case: no entry of its own
            continue
        if status in FAILURES and not any(x.matches(case) and x.applies(manifest.versions) for x in entries):
            notes.append(f"{case}: new {status}; needs a reason")
            entries.append(_sized(Expectation(case, status, f"{UNEXPLAINED}: observed {status}; explain or fix"),
                                  excess[case], Status(status).is_memory))
    return Manifest(manifest.backend, manifest.path, entries, manifest.versions), notes


def _sized(e: Expectation, observed: int | None, memory: bool) -> Expectation:
    """``e`` expecting exactly the observed excess (memory failures only)."""
    if not memory:
        return e
    return Expectation(e.case, e.status, e.reason, e.issue, observed if observed is not None else 0, None, e.when)


def dump(manifest: Manifest, header: str = "") -> str:
    """TOML text for a manifest; entries still needing a reason get a TODO comment."""
    lines = [header.rstrip("\n")] if header.strip() else []
    for e in manifest.entries:
        lines.append("")
        if e.reason.startswith(UNEXPLAINED):
            lines.append("# TODO: explain this expectation, then replace the reason")
        lines.append("[[expect]]")
        if e.cause:
            lines.append(f"cause = {json.dumps(e.cause)}")
        if e.mechanism:
            lines.append(f"mechanism = {json.dumps(e.mechanism)}")
        if not e.by_cause or e.case != "*":
            lines.append(f"case = {json.dumps(e.case)}")
        lines.append(f"status = {json.dumps(e.status)}")
        lines.append(f"reason = {json.dumps(e.reason)}")
        if e.issue:
            lines.append(f"issue = {json.dumps(e.issue)}")
        if e.excess is not None:
            lines.append(f"excess = {e.excess}")
        if e.max_excess is not None:
            lines.append(f"max_excess = {e.max_excess}")
        if e.max_excess_pct is not None:
            lines.append(f"max_excess_pct = {e.max_excess_pct:g}")
        if e.when:
            lines.append(f"when = {json.dumps(e.when[0] if len(e.when) == 1 else list(e.when))}")
        if not e.strict:
            lines.append("strict = false")
    return "\n".join(lines).lstrip("\n") + "\n"


def header_of(path: Path | None) -> str:
    """The comment block a manifest file starts with, kept across rewrites."""
    if path is None or not path.exists():
        return ""
    head = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            head.append(line)
        else:
            break
    while head and (not head[-1].strip() or head[-1].startswith("# TODO")):
        head.pop()
    return "\n".join(head)


def entry_blocks(text: str, entries: int) -> tuple[str, list[str]] | None:
    """A manifest's text cut at its ``[[expect]]`` lines: the part before the first, and each entry's lines as
    written (the comment lines right above it and inside it included); ``None`` where the cut does not
    give ``entries`` blocks (an inline ``expect = [...]``, a ``[[expect]]`` inside a string)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == "[[expect]]"]
    if len(starts) != entries:
        return None
    for n, i in enumerate(starts[1:], 1):  # the comment lines right above an entry are its own (a TODO, a note);
        while i > starts[n - 1] + 1 and lines[i - 1].lstrip().startswith("#"):  # above the first: the header's
            i -= 1
        starts[n] = i
    head = "".join(lines[: starts[0]]) if starts else text
    blocks = ["".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)])]
    return head, blocks


def updated_text(manifest: Manifest, new: Manifest, header: str) -> str:
    """The updated manifest's text: an entry the update kept as it was keeps its lines as written (comments,
    keys in their order, what this release does not use), the others are written by :func:`dump`."""
    text = _read_text(manifest.path) if manifest.path is not None and manifest.path.exists() else ""
    cut = entry_blocks(text, len(manifest.entries)) if text else None
    if cut is None:
        return dump(new, header)
    head, blocks = cut
    as_written = {id(e): block for e, block in zip(manifest.entries, blocks)}
    out = head if head.strip() else header.rstrip("\n") + "\n\n"
    for n, e in enumerate(new.entries):
        block = as_written.get(id(e))
        if not (n == 0 and head.strip()) and not out.endswith("\n\n"):
            out += "\n"  # a blank line between entries (the first one follows its header as written)
        out += block.rstrip("\n") + "\n" if block is not None else dump(Manifest(new.backend, None, [e]))
    return out.lstrip("\n")


def write_updated(manifest: Manifest, results: Iterable[Result],
                  path: str | os.PathLike[str] | None = None) -> tuple[Path, list[str]]:
    """Rewrite the manifest as the run says it should be: entries it kept keep their text (comments too), the
    file is written whole (beside it, then renamed) and read back before it replaces the old one.  ``path`` as
    the adapter declares it (``manifest_path``: a string, as the vendor guide shows, or a Path)."""
    target = Path(path) if path else manifest.path or manifest_location(manifest.backend)
    new, notes = update(manifest, results)
    if not new.entries and not target.exists():
        return target, ["nothing expected to fail: no manifest written"]
    target.parent.mkdir(parents=True, exist_ok=True)
    header = header_of(manifest.path) or f"# Expected non-pass verdicts for `{printable(manifest.backend)}`."
    text = updated_text(manifest, new, header)

    def write(staged: Path) -> None:
        staged.write_text(text, encoding="utf-8")
        if load_manifest(manifest.backend, staged, manifest.versions).entries != new.entries:
            staged.write_text(dump(new, header), encoding="utf-8")  # as written did not read back as the update

    write_whole(target, write)  # never a torn manifest
    load_manifest(manifest.backend, target, manifest.versions)  # what we wrote must read back
    return target, notes
