"""What the harness derives from a graph, a program or a case's inputs, kept on disk across runs (issue 59).

A nightly run repeats the same cases on the same torch: the float64 references, the user-level
model, the received graphs' models and the generated programs' models it made last night are the
ones it would make again.  Like inductor's FX graph cache, each is stored under a key naming
everything it depends on (the graph's or program's text, the inputs' values, the torch and backend
versions, the CPU, and a digest of the harness's own code that makes it: :func:`source_digest`), so
a changed graph, a new torch or a change to the model's code misses.  Only derivations are stored:
a measurement (a probe's trace, a backend's results) never is, so the cache cannot hide a fault.

An entry is one file, ``<root>/<kind>/<key[:2]>/<key>``: a header line (this format's magic and
version, the kind, the key, the body's length and SHA-256) and the body (JSON, or ``torch.save``'s
bytes read back with ``weights_only``).  It is written whole (a temporary file renamed into place),
and read back only when every field of its header matches and the body's digest is right: a torn
file, another version's, a file of another key or any garbage is rebuilt and written again, never
trusted.  A cache that cannot be written only makes the run slower.

Where: ``$XDG_CACHE_HOME/torch-conformance/results`` (the harness's cache folder, beside inductor's
and IREE's) or ``$CONFORMANCE_RESULT_CACHE`` (``off`` turns it off); ``conformance run --no-cache``
turns it off for one run.  A process uses the cache made active
(:func:`active`) for the pair it runs; with none active (the engine called without a run's options,
a test) nothing is read or written.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import platform
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from conformance.util.paths import cache_home

#: the first bytes of every entry, and the version of the entry format (bumped when the header changes)
MAGIC = b"conformance-result-cache"
FORMAT = 1
#: the kinds of entries: what a pair's ``Result.cache`` counts hits and misses of
KINDS = ("reference", "user-model", "received-model", "program-model")
#: a kind's outcomes: found, made (nothing stored), made again over an entry that could not be trusted
HIT, MISS, REBUILT = "hit", "miss", "rebuilt"


#: names the result cache's folder (``off``: no cache), as ``$CONFORMANCE_IREE_CACHE`` does IREE's
CACHE_ENV = "CONFORMANCE_RESULT_CACHE"
_OFF = ("", "0", "off", "none", "false")


def default_root() -> Path | None:
    """``$CONFORMANCE_RESULT_CACHE`` (``off``: none), else ``$XDG_CACHE_HOME/torch-conformance/results``: the run's
    cache folder, beside inductor's and IREE's."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    return cache_home() / "results"


def digest(*parts: Any) -> str:
    """A key from JSON-able parts (sorted keys; anything else by ``str``)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@cache
def source_digest(*modules: str) -> str:
    """The SHA-256 of the sources of ``modules`` (``conformance.models``: a package is all its files) and of every
    ``conformance`` module they import, at any depth: the harness's own version of what that code makes.  Any
    change to that code is another key, so no stored result outlives the code that made it (and there is no
    version constant to forget to bump)."""
    return sources_digest(Path(__file__).resolve().parents[2], modules)


def sources_digest(base: Path, modules: Iterable[str]) -> str:
    """:func:`source_digest` of the package tree under ``base`` (the directory holding ``conformance``)."""
    h = hashlib.sha256()
    for f in sorted(module_files(base, modules)):
        h.update(str(f.relative_to(base)).encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except OSError:  # a module that cannot be read: a key nothing stored matches
            h.update(os.urandom(16))
        h.update(b"\0")
    return h.hexdigest()


def module_files(base: Path, modules: Iterable[str]) -> set[Path]:
    """The files of ``modules`` (a package: all of its files) and of every ``conformance`` module they import (in
    any function too; an imported package: its ``__init__``), at any depth."""
    found: set[Path] = set()
    todo = [(name, True) for name in modules]
    while todo:
        name, whole = todo.pop()
        for f in _files_of(base, name, whole):
            if f in found:
                continue
            found.add(f)
            try:
                tree = ast.parse(f.read_bytes())
            except (OSError, SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    todo.append((node.module, False))
                    todo.extend((f"{node.module}.{a.name}", False) for a in node.names)
                elif isinstance(node, ast.Import):
                    todo.extend((a.name, False) for a in node.names)
    return found


def _files_of(base: Path, module: str, whole: bool) -> list[Path]:
    """A ``conformance`` module's file (a package's ``__init__``, or with ``whole`` every file under it); nothing
    for any other module."""
    if module != "conformance" and not module.startswith("conformance."):
        return []
    path = base.joinpath(*module.split("."))
    if path.is_dir():
        return sorted(path.rglob("*.py")) if whole else [path / "__init__.py"]
    file = path.with_suffix(".py")
    return [file] if file.is_file() else []


@cache
def machine() -> dict[str, Any]:
    """What a derivation may read of the machine and torch: its version and CPU (oneDNN's workspaces follow it)."""
    import torch

    return {"torch": torch.__version__, "cpu": platform.machine(), "cpus": os.cpu_count(),
            "capability": torch.backends.cpu.get_cpu_capability(), "mkldnn": torch.backends.mkldnn.is_available()}


@dataclass
class ResultCache:
    """One cache folder, with this process's hits and misses per kind (a pair's, between :meth:`counts` calls)."""

    root: Path
    #: per kind: hits, misses, entries rebuilt
    tally: dict[str, dict[str, int]] = field(default_factory=dict)

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def read(self, kind: str, key: str) -> bytes | None:
        """The body stored under ``key``, or ``None`` (counted as a miss; as rebuilt where a file was there but
        could not be trusted).  A hit is counted by the caller once the body decodes (:meth:`hit`)."""
        path = self.path(kind, key)
        try:
            data = path.read_bytes()
        except OSError:
            self.count(kind, MISS)
            return None
        body = _body(data, kind, key)
        if body is None:
            self.count(kind, REBUILT)
        return body

    def hit(self, kind: str) -> None:
        self.count(kind, HIT)

    def rejected(self, kind: str) -> None:
        """A body whose header was right but which did not decode (another version of its codec): rebuilt."""
        self.count(kind, REBUILT)

    def write(self, kind: str, key: str, body: bytes) -> bool:
        """Store ``body`` under ``key``, whole or not at all; ``False`` when it cannot be stored."""
        path = self.path(kind, key)
        head = b"%s %d %s %s %d %s\n" % (MAGIC, FORMAT, kind.encode(), key.encode(), len(body),
                                         hashlib.sha256(body).hexdigest().encode())
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(head)
                f.write(body)
            os.replace(tmp, path)
            return True
        except OSError:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False

    def count(self, kind: str, outcome: str) -> None:
        counts = self.tally.setdefault(kind, {})
        counts[outcome] = counts.get(outcome, 0) + 1

    def counts(self) -> dict[str, dict[str, int]]:
        """The hits and misses since the last call (then reset): what one pair's ``Result.cache`` records."""
        counts, self.tally = self.tally, {}
        return counts


def _body(data: bytes, kind: str, key: str) -> bytes | None:
    """The body of an entry read whole, or ``None`` where anything in it does not match."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    fields = head.split(b" ")
    expected = [MAGIC, str(FORMAT).encode(), kind.encode(), key.encode()]
    if len(fields) != 6 or fields[:4] != expected or fields[4] != str(len(body)).encode():
        return None
    if hashlib.sha256(body).hexdigest().encode() != fields[5]:
        return None
    return body


#: the cache the pairs of this process use (:func:`active`); ``None``: off
_ACTIVE: ResultCache | None = None


def current() -> ResultCache | None:
    """The cache active in this process, or ``None``."""
    return _ACTIVE


@contextlib.contextmanager
def active(cache: ResultCache | None) -> Iterator[ResultCache | None]:
    """Inside: ``cache`` is the one every derivation of this process reads and writes (``None``: none)."""
    global _ACTIVE
    before, _ACTIVE = _ACTIVE, cache
    try:
        yield cache
    finally:
        _ACTIVE = before


def merge_counts(counts: Iterable[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Hits and misses per kind summed over pairs (the run's line of ``--profile-harness``)."""
    total: dict[str, dict[str, int]] = {}
    for per_kind in counts:
        for kind, outcomes in per_kind.items():
            for outcome, n in outcomes.items():
                total.setdefault(kind, {})[outcome] = total.setdefault(kind, {}).get(outcome, 0) + n
    return total
