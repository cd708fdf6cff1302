"""IREE's compiled modules kept across runs, keyed by the program, the compiler version and its flags.

IREE compiles every graph anew in every process (turbine's ``Launchable.jit_compile`` keeps
nothing unless given a directory per program), so a run paid seconds per graph for modules it
had built the night before.  Here a module's file name is the SHA-256 of the IREE compiler's
version, the device's compile flags and the MLIR source, so a new compiler, other flags or any
change to the graph is a miss; files are written whole (a temporary file renamed into place),
so runs sharing the directory (``-n 2``, iree and iree-boxed compiling the same graph) never
read half a module.

Where: ``$CONFORMANCE_IREE_CACHE`` (``off`` turns it off), else
``$XDG_CACHE_HOME/torch-conformance/iree`` (``~/.cache/...``).  A module loaded from the
cache is the same bytes the compiler produced, loaded the same way (``VmModule.copy_buffer``),
so verdicts do not depend on the cache's state (``tests/test_cache_state.py`` holds both
routes to that).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_ENV = "CONFORMANCE_IREE_CACHE"
_OFF = ("", "0", "off", "none", "false")


@dataclass
class CacheStats:
    """Hits and misses in this process (the adapter's notes say them per pair)."""

    hits: int = 0
    misses: int = 0


STATS = CacheStats()


def cache_root() -> Path | None:
    """The cache directory, or ``None`` when ``$CONFORMANCE_IREE_CACHE`` turns it off."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch-conformance" / "iree"


def module_key(source: str | bytes, flags: Sequence[str]) -> str:
    """The cache key: compiler version, compile flags and program text."""
    from iree.compiler.version import VERSION

    digest = hashlib.sha256(VERSION.encode())
    for flag in flags:
        digest.update(b"\0" + flag.encode())
    digest.update(b"\0\0")
    digest.update(source.encode() if isinstance(source, str) else source)
    return digest.hexdigest()


def cached_file(source: str | bytes, flags: Sequence[str], suffix: str, compute: Callable[[], bytes]) -> bytes:
    """What ``compute`` makes of ``source`` with ``flags``, read from the cache (``<key><suffix>``) or made and
    stored there.  A cache that cannot be read or written only makes the run slower."""
    root = cache_root()
    if root is None:
        return compute()
    path = root / f"{module_key(source, flags)}{suffix}"
    try:
        return path.read_bytes()
    except OSError:
        pass
    data = compute()
    try:
        root.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, path)
    except OSError:
        pass
    return data


def cached_module(source: str | bytes, flags: Sequence[str], compile_fn: Callable[[], bytes]) -> bytes:
    """The compiled module for ``source``: read from the cache, or compiled and stored there."""
    for collector in _COLLECTORS:
        collector.append(source.decode() if isinstance(source, bytes) else source)
    compiled = False

    def compile_now() -> bytes:
        nonlocal compiled
        compiled = True
        return compile_fn()

    data = cached_file(source, flags, ".vmfb", compile_now)
    if compiled:
        STATS.misses += 1
    else:
        STATS.hits += 1
    return data


#: the lists :func:`compiled_sources` is filling, innermost last
_COLLECTORS: list[list[str]] = []


@contextmanager
def compiled_sources() -> Iterator[list[str]]:
    """Inside: every program source a module is compiled from (or read from the cache for) is appended to
    the list yielded, so a backend can look at the program it ran again (:mod:`.iree_stream`)."""
    found: list[str] = []
    _COLLECTORS.append(found)
    try:
        yield found
    finally:
        _COLLECTORS.remove(found)


def jit_loader(source: str) -> Callable[[Any], Any]:
    """What turbine's ``_jit_callback`` does for a device (same session flags, same diagnostics), through the cache."""
    from iree.compiler.api import Output, Session, Source
    from iree.runtime import VmModule

    def callback(device: Any) -> Any:
        flags = list(device.compile_target_flags)

        def compile_now() -> bytes:
            session = Session()
            session.set_flags(*flags)
            inv = session.invocation()
            output = Output.open_membuffer()
            inv.enable_console_diagnostics()
            inv.parse_source(Source.wrap_buffer(session, source.encode()))
            if not inv.execute():
                raise RuntimeError("JIT compilation failed. See diagnostics.")
            inv.output_vm_bytecode(output)
            return bytes(output.map_memory())

        return VmModule.copy_buffer(device.vm_instance, cached_module(source, flags, compile_now))

    return callback


@contextmanager
def turbine_module_cache() -> Iterator[None]:
    """Inside: turbine's ``Launchable.jit_compile`` gets its modules through the cache (a straight compile
    where the cache is off), and :func:`compiled_sources` sees their sources; restored on exit.

    Everything else turbine does (its passes, the importer, ``preload``, how it calls the
    module) is untouched: only where the module's bytes come from changes."""
    from iree.turbine.runtime.launch import Launchable

    shipped = Launchable.__dict__["jit_compile"]

    def jit_compile(source: Any, *, parameter_providers: Sequence[Any] = (), entry_point: str = "main$async",
                    file_cache_dir: Any = None) -> Any:
        if file_cache_dir is not None or not isinstance(source, str):
            return shipped.__func__(source, parameter_providers=parameter_providers, entry_point=entry_point,
                                    file_cache_dir=file_cache_dir)
        return Launchable.from_vm_module(jit_loader(source), parameter_providers=parameter_providers,
                                         entry_point=entry_point)

    Launchable.jit_compile = staticmethod(jit_compile)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Launchable.jit_compile = shipped  # type: ignore[method-assign]
