"""Path vocabulary shared by the command line and the output directory, importing nothing heavy.

The pytest plugin declares its options from these in every pytest session, so this module
stays free of torch and of the results schema.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import os
import re
from pathlib import Path

#: what a run does with an output directory that already holds a run's files
EXISTING_MODES = ("refuse", "overwrite", "resume")


def path_arg(text: str) -> Path:
    """argparse ``type`` for path options: an empty string would quietly mean the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or directory")
    return Path(text)


def symlink_loop(path: Path) -> Path | None:
    """The first component of ``path`` that is a symbolic link loop, or ``None``.

    ``Path.exists`` calls such a path absent and ``Path.resolve`` raises a bare ``RuntimeError``
    on it, so a path a command writes to is checked for one before either is asked."""
    for part in [*reversed(path.parents), path]:
        try:
            os.stat(part)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return part
    return None


#: characters a file name made from a case id or a backend name keeps as they are
_SAFE_CHAR = re.compile(r"[A-Za-z0-9._+=-]")
#: marks a name that was changed; never one of the kept characters, so a changed name cannot equal a kept one
CHANGED = "~"
#: the longest name component made from one id or backend name (two of them fit in a file name)
MAX_NAME = 96


def safe_name(text: str, limit: int = MAX_NAME) -> str:
    """A file name component for ``text`` (a case id, a backend name): ``text`` itself when it is made of
    ``[A-Za-z0-9._+=-]``, does not start with a dot and has at most ``limit`` characters; otherwise
    its safe characters (cut to fit), ``~`` and a hash of the whole text.

    Distinct texts give distinct names (a kept name has no ``~``; a changed one carries its text's
    hash), and no name is empty, ``.``, ``..``, hidden, or holds a path separator."""
    if text and not text.startswith(".") and len(text) <= limit and all(_SAFE_CHAR.fullmatch(c) for c in text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    kept = "".join(c if _SAFE_CHAR.fullmatch(c) else "_" for c in text).lstrip(".")
    return f"{kept[: max(0, limit - len(digest) - 1)]}{CHANGED}{digest}"


def pair_file_name(case: str, backend: str, suffix: str) -> str:
    """``<case>@<backend><suffix>`` of safe names: neither part keeps an ``@``, so no two pairs share one."""
    return f"{safe_name(case)}@{safe_name(backend)}{suffix}"


def inside(base: Path, name: str) -> Path:
    """``base / name`` for a file name made here (:func:`safe_name`), checked to resolve inside ``base``."""
    path = base / name
    if path.parent != base or not path.resolve().is_relative_to(base.resolve()):
        raise ValueError(f"{name!r} would be written outside {base}")
    return path


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/torch-conformance`` (``~/.cache/torch-conformance``): the harness's caches."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch-conformance"


def caches_outside_tmp() -> None:
    """A run leaves nothing in the temporary directory: inductor's compile cache, which torch keeps there
    (``$TMPDIR/torchinductor_<user>``) unless told otherwise, goes under :func:`cache_home` instead.

    Set in the environment before torch's compilers load, so every process of the run (isolation
    workers, pytest-xdist workers) inherits it; a ``TORCHINDUCTOR_CACHE_DIR`` the user set is kept."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_home() / "torchinductor"))
