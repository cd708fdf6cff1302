"""The native heap observer's shared library: built, and preloaded into the processes that record it.

Torch-free (the command re-executes itself with the library preloaded before it imports torch, so that
the fork server it forks from itself has it: :mod:`conformance.cli.launch`).  The recording itself is
:mod:`conformance.probes.native_heap`.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "probes" / "native" / "native_heap.c"
#: ``0``: no native domain (no preload, the domain not observed)
NATIVE_ENV = "CONFORMANCE_NATIVE"


class NativeHeapError(RuntimeError):
    """The native heap observer cannot be built or is not loaded here."""


def cache_dir() -> Path:
    """Where the harness's native observers are built (``$XDG_CACHE_HOME/torch-conformance/observer``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch-conformance" / "observer"


def wanted() -> bool:
    return os.environ.get(NATIVE_ENV, "1").strip() != "0"


def _check_platform() -> None:
    if not sys.platform.startswith("linux"):
        raise NativeHeapError(f"the native heap observer is built on Linux only (this is {sys.platform})")
    libc, _ = platform.libc_ver()
    if libc != "glibc":
        raise NativeHeapError(f"the native heap observer needs glibc (this C library: {libc or 'unknown'})")


def build() -> Path:
    """The observer's shared library, built first if this source has none yet; raises NativeHeapError."""
    found = _built()
    if isinstance(found, NativeHeapError):
        raise found
    return found


@cache
def _built() -> Path | NativeHeapError:
    try:
        _check_platform()
        key = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:24]
        target = cache_dir() / f"native_heap-{key}.so"
        if not target.exists():
            _compile(target)
        return target
    except (OSError, subprocess.SubprocessError) as exc:
        return NativeHeapError(f"building the native heap observer failed: {exc}")
    except NativeHeapError as exc:
        return exc


def _compile(target: Path) -> None:
    cc = os.environ.get("CC", "cc")
    compiler = shutil.which(cc)
    if compiler is None:
        raise NativeHeapError(f"no C compiler ({cc}) to build the native heap observer")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=target.name, suffix=".partial", dir=target.parent)
    os.close(fd)
    cmd = [compiler, "-O2", "-std=gnu11", "-fPIC", "-shared", "-fvisibility=hidden", "-ftls-model=initial-exec",
           str(SOURCE), "-ldl", "-o", partial]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                              env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
        if proc.returncode != 0:
            raise NativeHeapError(f"building the native heap observer failed: {proc.stdout.strip()[-500:]}")
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)


def worker_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the observer preloaded (``LD_PRELOAD``), where it builds and is wanted; else as it is."""
    if not wanted():
        return env
    try:
        path = str(build())
    except NativeHeapError:
        return env
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p]
    if path in preload:
        return env
    return {**env, "LD_PRELOAD": " ".join([path, *preload])}


def preloaded() -> bool:
    """Whether this process has the observer loaded (it was started with it preloaded)."""
    try:
        ctypes.CDLL(None).conformance_native_start  # noqa: B018 (the lookup is the question)
    except (OSError, AttributeError):
        return False
    return True


#: set on the command's re-execution with the observer preloaded: it is not re-executed twice
REEXEC_ENV = "CONFORMANCE_NATIVE_REEXEC"


def reexec_with_preload(argv: list[str]) -> None:
    """Re-execute this command with the observer preloaded, where it builds, is wanted and is not loaded yet
    (the command forks its fork server from itself: the workers then have it).  Returns only where not."""
    if not wanted() or preloaded() or os.environ.get(REEXEC_ENV):
        return
    env = worker_environment(dict(os.environ))
    if env.get("LD_PRELOAD") == os.environ.get("LD_PRELOAD"):
        return
    env[REEXEC_ENV] = "1"
    os.execve(sys.executable, [sys.executable, *argv], env)
