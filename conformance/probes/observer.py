"""How the CPU probe records the allocator: a native observer where one builds, the profiler otherwise.

The torch CPU allocator reports every allocation and free to whatever sits in the thread's
profiler slot.  The profiler puts a Kineto session there, and starting, stopping and
unpacking one costs about a millisecond per window plus its per-operator records: two to
three times a small model's whole step.  :file:`native/alloc_observer.cpp` sits in the same
slot and records the same reports, with operator and user-range boundaries from a
thread-local ``RecordFunction`` callback, each allocation attributed to its node range and
operators as it happens, into one flat buffer: the events the probe turns into a trace are
the same, at a few percent of a step.

The observer is built once per torch installation with the C++ compiler inductor uses
(``$CXX`` or ``g++``), against torch's own headers, into
``$XDG_CACHE_HOME/torch-conformance/observer`` (``~/.cache/...``), and loaded with ctypes.
Where it cannot be built the probe uses the profiler, with identical figures
(``tests/test_probe.py`` runs both on the same steps).  ``CONFORMANCE_PROBE=profiler`` forces
the profiler; ``=observer`` makes a missing observer an error.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import torch

from conformance.models.interpreter import NODE_RANGE_PREFIX
from conformance.util import native_preload

SOURCE = Path(__file__).resolve().with_name("native") / "alloc_observer.cpp"
PROBE_ENV = "CONFORMANCE_PROBE"
FIELDS = 6  # time ns, ptr, signed size, node label, innermost operator, outermost operator call

#: A dispatcher operator's profiler name (``aten::mm``, ``conformance_gen::accum``); user ranges such as
#: inductor's ``## Call CompiledFxGraph ... ##`` or ``autograd::engine::evaluate_function: X`` are not.
OPERATOR_NAME = re.compile(r"^[A-Za-z_][\w.]*::[\w.]+$")

#: One allocator event: (time ns, ptr, signed size, node label, innermost op, outermost op call or None)
RawEvent = tuple[int, int, int, "str | None", "str | None", "tuple[str, int] | None"]


class ObserverError(RuntimeError):
    """The native observer cannot be built, loaded or started here."""


def cache_dir() -> Path:
    return native_preload.cache_dir()


def _compiler() -> str:
    cxx = os.environ.get("CXX", "g++")
    found = shutil.which(cxx)
    if found is None:
        raise ObserverError(f"no C++ compiler ({cxx}) to build the allocator observer")
    return found


def _build(target: Path) -> None:
    torch_dir = Path(torch.__file__).resolve().parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    fd, partial = tempfile.mkstemp(prefix=target.name, suffix=".partial", dir=target.parent)
    os.close(fd)
    cmd = [_compiler(), "-O2", "-std=c++20", "-fPIC", "-shared", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           f"-I{torch_dir / 'include'}", str(SOURCE), f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu",
           f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", partial]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        if proc.returncode != 0:
            raise ObserverError(f"building the allocator observer failed: {proc.stdout.strip()[-500:]}")
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)


def library() -> Any:
    """The loaded observer, built first if this torch installation has none yet; raises ObserverError.

    Once per process, failure included: a build that failed is not tried again at every window."""
    found = _load()
    if isinstance(found, ObserverError):
        raise found
    return found


@cache
def _load() -> Any:
    try:
        return _build_and_load()
    except ObserverError as exc:
        return exc


def _build_and_load() -> Any:
    if not sys.platform.startswith("linux"):
        raise ObserverError(f"the allocator observer is built on Linux only (this is {sys.platform})")
    torch_dir = Path(torch.__file__).resolve().parent
    key = hashlib.sha256(SOURCE.read_bytes() + f"\0{torch.__version__}\0{torch_dir}".encode()).hexdigest()[:24]
    target = cache_dir() / f"alloc_observer-{key}.so"
    if not target.exists():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _build(target)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ObserverError(f"building the allocator observer failed: {exc}") from exc
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as exc:
        raise ObserverError(f"loading the allocator observer failed: {exc}") from exc
    lib.conformance_observer_start.restype = ctypes.c_int
    lib.conformance_observer_start.argtypes = [ctypes.c_char_p]
    lib.conformance_observer_count.restype = ctypes.c_int64
    lib.conformance_observer_events.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    lib.conformance_observer_call_count.restype = ctypes.c_int64
    lib.conformance_observer_calls.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    lib.conformance_observer_name.restype = ctypes.c_char_p
    lib.conformance_observer_name.argtypes = [ctypes.c_int64]
    return lib


def use_observer() -> bool:
    """Whether CPU probes record through the observer (else the profiler)."""
    choice = os.environ.get(PROBE_ENV, "").strip().lower()
    if choice == "profiler":
        return False
    try:
        library()
    except ObserverError:
        if choice == "observer":
            raise
        return False
    return True


def fallback_reason() -> str | None:
    """Why CPU probes record through the profiler here (``None``: the observer records them)."""
    if os.environ.get(PROBE_ENV, "").strip().lower() == "profiler":
        return f"{PROBE_ENV}=profiler"
    try:
        library()
    except ObserverError as exc:
        return str(exc)
    return None


class ObserverWindow:
    """One recording window of the native observer (start, then ``stop`` for its raw events)."""

    def __init__(self) -> None:
        self._lib = library()
        if self._lib.conformance_observer_start(NODE_RANGE_PREFIX.encode()) != 0:
            raise ObserverError("a profiler is already recording on this thread")

    def stop(self) -> list[RawEvent]:
        lib = self._lib
        lib.conformance_observer_stop()
        events = (ctypes.c_int64 * (FIELDS * lib.conformance_observer_count()))()
        lib.conformance_observer_events(events)
        calls = (ctypes.c_int64 * (2 * lib.conformance_observer_call_count()))()
        lib.conformance_observer_calls(calls)
        return decode(events[:], calls[:], lib.conformance_observer_name)


#: The end time of an operator call still open when the window closed: it owns every later free.
OPEN_END = 2**62


def decode(events: Sequence[int], calls: Sequence[int], name_of: Callable[[int], bytes]) -> list[RawEvent]:
    """Pure: the observer's flat records to the probe's raw events.

    ``events`` holds (time, ptr, signed size, label, op, outer call) per allocation or free,
    names as indices; ``calls`` holds (name, end time or -1 while open) per outermost operator
    call.  The native side attributed each event as the profiler's event tree does."""
    names: dict[int, str | None] = {-1: None}

    def name(index: int) -> str | None:
        if index not in names:
            names[index] = name_of(index).decode("utf-8", "replace")
        return names[index]

    owners = [(name(calls[i]) or "", calls[i + 1] if calls[i + 1] >= 0 else OPEN_END)
              for i in range(0, len(calls), 2)]
    return [(events[i], events[i + 1], events[i + 2], name(events[i + 3]), name(events[i + 4]),
             owners[events[i + 5]] if events[i + 5] >= 0 else None)
            for i in range(0, len(events), FIELDS)]
