"""The native memory domain (``native``): every byte any library allocates during a step, outside torch.

A runtime that keeps its tensors in its own memory (ONNX Runtime's results as numpy arrays, an
OpenVINO arena) allocates nothing torch's CPU allocator sees.  :file:`native/native_heap.c` is
built once with the system C compiler (``$CC`` or ``cc``) into
``$XDG_CACHE_HOME/torch-conformance/observer`` and preloaded (``LD_PRELOAD``) into the isolation
workers' fork server and workers (:func:`worker_environment`): it interposes malloc, calloc,
realloc, the aligned allocations, operator new and anonymous mmap / munmap, and records, while a
window is open, each allocation under its pointer with the address of the call that made it.

No byte is counted in two domains: calls from torch's own libraries (its CPU allocator, c10's
``alloc_cpu``, whose bytes are the ``torch-cpu`` domain's; its C++ bookkeeping), from the
interpreter (Python's objects are no tensor's bytes) and from the harness's own observer are not
recorded (:func:`excluded_code`).  What is left is the libraries': numpy's arrays, a runtime's
buffers and arenas, a ``ctypes`` malloc.  Each allocation names the library that made it (``op``:
``native:<file name>``, resolved after the window).

Where the library cannot be built or preloaded (no C compiler, not Linux with glibc, a process
not started with it, ``CONFORMANCE_NATIVE=0``), the domain is not observed, and a pair that needs
it says so (:mod:`conformance.checks.domains`): never a pass on memory nobody measured.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sysconfig
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import torch

from conformance.probes.cpu import MemoryTrace, build_trace
from conformance.util.native_preload import (
    NATIVE_ENV,
    SOURCE,
    NativeHeapError,
    build,
    cache_dir,
    preloaded,
    wanted,
    worker_environment,
)

__all__ = ["NATIVE_ENV", "SOURCE", "NativeHeapError", "build", "preloaded", "worker_environment"]

DOMAIN = "native"
FIELDS = 4  # time ns, ptr, signed size, caller address
#: the prefix of an allocation's ``op``: the library that made it
LIBRARY_PREFIX = "native:"


def excluded_code() -> list[str]:
    """The code whose allocations are other domains' or no tensor's (path substrings; ``<main>``: the
    program): the interpreter, torch's libraries, the harness's own observers, the dynamic loader and the
    C library's own calls (thread-local storage, a thread's start, stdio), numpy's code but for its
    arrays' data (allocated through its data handler: :func:`_numpy_without_cache`), and libstdc++'s own calls:
    the strings and locales it makes for whichever library called it, never a tensor's bytes (a training step
    run wholly by PyTorch showed 513-byte blocks made inside libstdc++ on behalf of torch in every probed call);
    operator new, aligned too, is recorded with the library that called it."""
    spec = importlib.util.find_spec("torch")  # torch's path before torch is imported (the fork server)
    torch_dir = Path(spec.origin if spec is not None and spec.origin else torch.__file__).resolve().parent
    dynload = Path(sysconfig.get_path("platstdlib")).resolve() / "lib-dynload"
    numpy = importlib.util.find_spec("numpy")
    numpy_dir = [str(Path(numpy.origin).resolve().parent)] if numpy is not None and numpy.origin else []
    return ["<main>", "libpython", str(dynload), str(torch_dir), str(cache_dir()), "/ld-linux", "/libc.so", *numpy_dir,
            "/libstdc++.so"]


@cache
def _library() -> Any:
    if not wanted():
        return NativeHeapError(f"{NATIVE_ENV}=0")
    try:
        lib = ctypes.CDLL(None)
        start = lib.conformance_native_start
    except (OSError, AttributeError):
        return NativeHeapError("the native heap observer is not preloaded in this process (isolation workers "
                               "start with it)")
    start.restype = ctypes.c_int
    lib.conformance_native_exclude.restype = ctypes.c_int
    lib.conformance_native_pause.restype = None
    lib.conformance_native_resume.restype = None
    lib.conformance_native_exclude.argtypes = [ctypes.c_char_p]
    for name in ("count", "live", "peak", "lost"):
        getattr(lib, f"conformance_native_{name}").restype = ctypes.c_int64
    lib.conformance_native_events.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    lib.conformance_native_library.restype = ctypes.c_char_p
    lib.conformance_native_library.argtypes = [ctypes.c_int64]
    lib.conformance_native_owner.restype = ctypes.c_int
    lib.conformance_native_owner.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
    lib.conformance_native_numpy.restype = ctypes.c_int
    lib.conformance_native_numpy.argtypes = [ctypes.c_void_p]
    for pattern in excluded_code():
        lib.conformance_native_exclude(pattern.encode())
    lib.conformance_native_track()
    _numpy_without_cache(lib)
    return lib


#: numpy's C API table: PyDataMem_DefaultHandler's slot (numpy/_core/include/numpy/__multiarray_api.h)
_DEFAULT_HANDLER_SLOT = 306


def _numpy_without_cache(lib: Any) -> None:
    """numpy's default data allocator pointed at the observer's (:file:`native/native_heap.c`), which has no
    cache of small blocks: every array's bytes are allocated and freed when the array is made and dies."""
    try:
        multiarray = importlib.import_module("numpy._core._multiarray_umath")
    except ImportError:
        return
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
    table = ctypes.cast(get(id(multiarray._ARRAY_API), None), ctypes.POINTER(ctypes.c_void_p))
    handler_object = ctypes.cast(table[_DEFAULT_HANDLER_SLOT], ctypes.POINTER(ctypes.c_void_p))[0]
    if lib.conformance_native_numpy(get(handler_object, b"mem_handler")) != 0:
        raise NativeHeapError("numpy's default data allocator is not the version this observer knows")


def start_tracking() -> None:
    """Keep the libraries' allocations from now on (the fork server and each worker call it as they start,
    before any compile), so memory a runtime makes before a window is known; nothing where the observer
    is not loaded."""
    if wanted():
        _library()


def rescan() -> None:
    """Read the excluded code's addresses again (after imports loaded more of it)."""
    lib = _library()
    if not isinstance(lib, NativeHeapError):
        lib.conformance_native_rescan()


def library() -> Any:
    """The preloaded observer, its exclusions set; raises NativeHeapError where it is not loaded."""
    found = _library()
    if isinstance(found, NativeHeapError):
        raise found
    return found


def unavailable_reason() -> str | None:
    """Why the native domain is not observed in this process (``None``: it is)."""
    try:
        library()
    except NativeHeapError as exc:
        return str(exc)
    return None


class NativeHeapProbe:
    """Live native bytes over one window (allocations by pointer, a timeline and a peak)."""

    domain = DOMAIN

    def __init__(self) -> None:
        self._lib = library()
        self._raw: list[int] | None = None
        self._trace: MemoryTrace | None = MemoryTrace(self.domain, exact=False)
        #: events the observer could not keep (its table or buffer was full): the figures are then low
        self.lost = 0
        self._pooled: list[tuple[int, int, int, str]] = []

    def __enter__(self) -> NativeHeapProbe:
        self._trace = None
        if self._lib.conformance_native_start() != 0:
            raise NativeHeapError("the native heap observer could not map its tables")
        return self

    def __exit__(self, *exc: object) -> None:
        lib = self._lib
        lib.conformance_native_stop()
        events = (ctypes.c_int64 * (FIELDS * lib.conformance_native_count()))()
        lib.conformance_native_events(events)
        self._raw = events[:]
        self.lost = int(lib.conformance_native_lost())

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Nothing recorded inside (the harness's own copies of the results, made in the window)."""
        self._lib.conformance_native_pause()
        try:
            yield
        finally:
            self._lib.conformance_native_resume()

    @property
    def trace(self) -> MemoryTrace:
        if self._trace is None:
            if self._raw is None:
                raise RuntimeError("the probe's window is still open")
            self._trace = native_trace(self._raw, self._library_of, self._pooled)
            self._raw = None
        return self._trace

    def count_pooled(self, held: list[tuple[OutsideStorage, int, int | None]]) -> None:
        """Count results that lie in a pool (memory a library made before the window) as the window's while
        the caller holds them: each ``(storage, from, until)`` (times in ns; ``None``: to the end)."""
        for s, start, end in held:
            name = f"{LIBRARY_PREFIX}{s.pool} (pool)"
            self._pooled.append((start, s.ptr, s.nbytes, name))
            if end is not None:
                self._pooled.append((end, s.ptr, -s.nbytes, name))

    def pooled(self, storages: list[OutsideStorage]) -> list[OutsideStorage]:
        """``storages`` with the library that made the memory each lies in before the window (``pool``),
        where the observer knows it (read after the window, while that memory is still live)."""
        out = []
        for s in storages:
            found = (ctypes.c_int64 * 3)()
            if self._lib.conformance_native_owner(s.ptr, found):
                s = replace(s, pool=self._library_of(found[2]) or "unknown", pool_bytes=int(found[1]))
            out.append(s)
        return out

    def _library_of(self, address: int) -> str | None:
        found = self._lib.conformance_native_library(address)
        return os.path.basename(found.decode("utf-8", "replace")) if found else None


def native_trace(raw: list[int], library_of: Any, pooled: Iterable[tuple[int, int, int, str]] = ()) -> MemoryTrace:
    """Pure but for ``library_of`` (caller address to file name): the observer's flat records, and the pooled
    results' ``(time, ptr, signed bytes, name)`` held in the window, to a trace."""
    names: dict[int, str | None] = {0: None}

    def op(address: int) -> str | None:
        if address not in names:
            found = library_of(address)
            names[address] = f"{LIBRARY_PREFIX}{found}" if found else None
        return names[address]

    events: list[tuple[int, int, int, str | None, str | None]] = [
        (raw[i], raw[i + 1], raw[i + 2], None, op(raw[i + 3])) for i in range(0, len(raw), FIELDS)]
    extra = [(t, ptr, size, None, name) for t, ptr, size, name in pooled]
    if extra:
        events = sorted([*events, *extra], key=lambda e: e[0])
    trace = build_trace(DOMAIN, events)
    trace.exact = False  # every library's allocations, not one program's
    return trace


def by_library(trace: MemoryTrace, still_alive: bool = False) -> dict[str, int]:
    """Bytes per library (allocated in the window, or only those still alive at its end)."""
    out: dict[str, int] = {}
    for a in trace.still_alive() if still_alive else trace.allocations:
        name = (a.op or "").removeprefix(LIBRARY_PREFIX) or "unknown"
        out[name] = out.get(name, 0) + a.nbytes
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


@dataclass(frozen=True)
class OutsideStorage:
    """A result of a step (an output, a gradient) whose storage torch's allocator did not make."""

    what: str
    ptr: int
    nbytes: int
    #: the library whose allocation, made before the window, holds it (a runtime's pool), if known
    pool: str | None = None
    pool_bytes: int = 0


def outside_storages(named: dict[str, torch.Tensor], known: Iterable[int] = ()) -> list[OutsideStorage]:
    """The CPU results in ``named`` whose storage torch's allocator did not make (one it did is resizable;
    ``torch.from_numpy``'s, DLPack's and a runtime's own buffers are not), but for ``known`` storages
    (the parameters' and buffers', made before the step), one entry per storage."""
    seen = set(known)
    out = []
    for what, t in named.items():
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.layout != torch.strided:
            continue
        try:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # no storage of its own (autograd's zero tensor): no bytes
            continue
        if storage.nbytes() == 0 or storage.resizable() or ptr in seen:
            continue
        seen.add(ptr)
        out.append(OutsideStorage(what, ptr, storage.nbytes()))
    return out
