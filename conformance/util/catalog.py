"""The names a refusal needs, known before torch loads: backends and case ids an earlier command saw.

Loading the backends and cases imports torch and the compilers (seconds, a minute on a loaded machine),
yet whether ``eagr`` names a backend or ``mlp-*-infr`` matches a case follows from their names alone.
So every command that loads them (``conformance run``, ``conformance list``) records the names in a
catalog file, with everything they depend on, and a later command reads it before it imports torch:

* every module file the process had loaded (its size and modification time): the case families,
  a ``--cases`` file, an editable plugin, torch itself;
* the modification times of the import path's directories, which an install or uninstall changes;
* the ``conformance.backends`` and ``conformance.cases`` entry points.

A catalog that any of these no longer matches is not used: the command loads everything as before (and
records a fresh catalog).  A catalog never accepts a name: it only lets a name it does not hold be
refused early; anything it cannot tell (an ``--backend module:Class``, a lazy family's pattern, an id a
resolver without a declared id pattern might take) is left to the full check.

Standard library only: the command reads it before importing anything heavy.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from conformance.util.paths import cache_home
from conformance.util.text import did_you_mean

SCHEMA = 1
#: the entry point groups the names come from
GROUPS = ("conformance.backends", "conformance.cases")
_WILDCARD = re.compile(r"[*?\[]")


@dataclass
class Catalog:
    """The backend names and case ids a command saw, and what they depended on."""

    backends: list[str]
    #: plugin names that are broken (the full check says why)
    broken: list[str]
    #: registered case ids, a lazy family's excluded
    ids: list[str]
    #: for each id resolver (generated cases: ``gen-dag-1234``), the regular expression of the ids it
    #: takes; ``None`` where it declared none (then any plain id might resolve)
    resolvers: list[str | None]
    #: id prefixes of lazy families (the op sweep): their patterns are left to the full check
    lazy: list[str]
    families: dict[str, int]
    unavailable: dict[str, str]
    left_out: dict[str, str]
    #: lazy family name -> its prefix's glob (``ops`` -> ``op-*``): a family's name selects it too
    lazy_families: dict[str, str] = field(default_factory=dict)
    stamps: dict[str, list[int]] = field(default_factory=dict)
    dirs: dict[str, int] = field(default_factory=dict)
    entry_points: list[list[str]] = field(default_factory=list)

    def backend_refusal(self, name: str) -> str | None:
        """The one-line refusal of ``--backend name``, or ``None`` (known, or not for this catalog to say)."""
        if ":" in name or name in self.backends or name in self.broken:
            return None
        return unknown_backend(name, self.backends)

    def case_refusal(self, pattern: str) -> str | None:
        """The one-line refusal of ``--case pattern``, or ``None`` (it matches, or only loading can tell)."""
        if could_name_lazy(pattern, self.lazy) or pattern in self.families or pattern in self.lazy_families:
            return None  # a lazy family's pattern, or a family's name (it selects the family)
        if any(fnmatch.fnmatchcase(case_id, pattern) for case_id in self.ids):
            return None
        if not _WILDCARD.search(pattern):  # a plain id may be one a resolver builds
            if any(regex is None or re.fullmatch(regex, pattern) for regex in self.resolvers):
                return None
        return unknown_case(pattern, self.ids, self.families, self.unavailable, self.left_out, self.lazy_families)


def unknown_backend(name: str, known: Iterable[str]) -> str:
    """The refusal of a backend name nothing registered."""
    known = sorted(known)
    return (f"unknown backend {name!r}{did_you_mean(name, known)} (known: {', '.join(known) or 'none'}; "
            f"see 'conformance list backends')")


def unknown_case(pattern: str, ids: Sequence[str], families: Mapping[str, int], unavailable: Mapping[str, str],
                 left_out: Mapping[str, str], lazy_families: Mapping[str, str] | None = None) -> str:
    """The refusal of a case pattern that matches no case: the closest patterns, the families (a lazy one by
    its glob), and any install hint or left-out note that applies to it."""
    lazy = {family: glob for family, glob in (lazy_families or {}).items() if family not in families}
    known = ", ".join([*(f"{family} ({n})" for family, n in families.items()),
                       *(f"{family} ({glob})" for family, glob in lazy.items())])
    missing = "".join(f"; {family} not registered: {why}" for family, why in unavailable.items()
                      if could_name(pattern, family))
    missing += "".join(f"; {label} left out: {why}" for label, why in left_out.items()
                       if fnmatch.fnmatchcase(label, pattern) or fnmatch.fnmatchcase(f"{label}-x", pattern))[:600]
    return (f"unknown case {pattern!r}{did_you_mean(pattern, ids)} "
            f"(families: {known}; a family's name selects it; see 'conformance list cases'){missing}")


def could_name(pattern: str, family: str) -> bool:
    """Whether ``pattern`` could name a case of ``family`` (its ids start with the family's first
    word: ``zoo-*`` for ``zoo (torchvision)``), so the family's install hint applies to it."""
    word = re.split(r"[^A-Za-z0-9]", family, maxsplit=1)[0]
    literal = _WILDCARD.split(pattern, maxsplit=1)[0]
    return bool(word) and (literal.startswith(word) or word.startswith(literal))


def could_name_lazy(pattern: str, prefixes: Iterable[str]) -> bool:
    """Whether ``pattern`` could name an id of a lazy family with one of these prefixes (its literal start
    is the prefix's, or within it): that family registers only then."""
    literal = _WILDCARD.split(pattern, maxsplit=1)[0]
    return bool(literal) and any(literal.startswith(p) or p.startswith(literal) for p in prefixes)


def source_key(source: str) -> str:
    """A ``--cases`` source as the registry keys it: a file by its absolute path, a module by its name."""
    if source.endswith(".py") or os.sep in source or Path(source).is_file():
        return str(Path(source).resolve())
    return source


def _location(sources: Iterable[str]) -> Path:
    """The catalog file of this interpreter, import path setting and set of ``--cases`` sources."""
    keys = sorted(set(sources))
    modules = [k for k in keys if not k.endswith(".py")]
    basis = [SCHEMA, sys.executable, os.environ.get("PYTHONPATH", ""), keys, os.getcwd() if modules else ""]
    digest = hashlib.sha256(json.dumps(basis).encode()).hexdigest()[:20]
    return cache_home() / "catalog" / f"{digest}.json"


def _entry_points() -> list[list[str]]:
    from importlib.metadata import entry_points

    return sorted([group, ep.name, ep.value] for group in GROUPS for ep in entry_points(group=group))


def _stamp(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def _dir_times(dirs: Iterable[str]) -> dict[str, int]:
    times = {}
    for d in dirs:
        try:
            times[d] = os.stat(d).st_mtime_ns
        except OSError:
            times[d] = -1
    return times


def record(catalog: Catalog, sources: Iterable[str]) -> None:
    """Write ``catalog`` for ``sources``, with what it depends on now; a cache: a failure to write is ignored."""
    files = {f for m in list(sys.modules.values()) if isinstance(f := getattr(m, "__file__", None), str)
             and os.path.isabs(f)}
    catalog.stamps = {f: s for f in sorted(files) if (s := _stamp(f)) is not None}
    here = os.getcwd()  # where `python -m` runs from: a run writing there is no install
    catalog.dirs = _dir_times(p for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != here)
    catalog.entry_points = _entry_points()
    target = _location(sources)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f"{target.name}.{os.getpid()}")
        staged.write_text(json.dumps({"schema": SCHEMA, **asdict(catalog)}))
        os.replace(staged, target)
    except OSError:
        pass


def recorded(sources: Iterable[str]) -> Catalog | None:
    """The catalog recorded for ``sources``, if nothing it depends on has changed since."""
    try:
        data = json.loads(_location(sources).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.pop("schema", None) != SCHEMA:
        return None
    try:
        catalog = Catalog(**data)
    except TypeError:
        return None
    if any(_stamp(path) != stamp for path, stamp in catalog.stamps.items()):
        return None
    if _dir_times(catalog.dirs) != catalog.dirs or _entry_points() != catalog.entry_points:
        return None
    return catalog


def entry_point_names(group: str) -> set[str]:
    """The names registered under an entry point group (reading metadata only, importing nothing)."""
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group=group)}
