"""A case's references made once per run and shared by its backends (issue 35).

A pair's parity check needs the float64 reference, eager float32 and the perturbed float64
runs of the noise floor, for every call the pair made (:class:`conformance.checks.state.StateReferences`).
They depend on the case and its calls only, not on the backend, yet each pair made them again: in the
default matrix they were 45% of the workers' time.  Now the first pair of a case to need them makes
them and writes them to the run's directory of shared references (:class:`SharedReferences`); its other
pairs, in whatever worker they run, load them and are held to the same checks.

A stored reference is found only under a :func:`reference_key` naming everything it depends on:
the case (its id, seed, kind, optimizer, shape schedule; a generated case's program), the calls
compared, the torch version, torch's thread count (eager float32's sums run on the backend's threads) and the
settings eager's arithmetic reads (default dtype, float32 matmul precision, oneDNN, deterministic algorithms), and a
digest of the inputs, parameters and buffers the pair's backend was given (:class:`InputDigest`), so a case
whose builder draws other values in another process never shares one.  Each load reads fresh tensors from
the file, so nothing a pair does to them reaches another pair.  A reference that fails to be made is
never stored: each pair makes its own attempt and gets its own verdict.  Files are written whole
(a temporary file renamed into place), so a worker never reads a half-written one; a file that cannot be
read is made again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from conformance.api.case import Case
from conformance.checks.parity import Noise
from conformance.util import result_cache
from conformance.util.result_cache import ResultCache

#: bumped when what a stored reference holds changes shape
FORMAT = 2


@dataclass(frozen=True)
class CallReference:
    """One call's references: the float64 results and state, eager float32's, and the rounding noise around them."""

    ref64: dict[str, torch.Tensor]
    eager32: dict[str, torch.Tensor]
    noise: Noise
    #: the carried state (parameters, buffers, optimizer state) before the case's first call, in float64 and in
    #: eager's dtype: what the first call's changes are measured from (empty on every other call's reference:
    #: a call's changes are measured from the previous compared call's state)
    initial64: dict[str, torch.Tensor] = field(default_factory=dict)
    initial32: dict[str, torch.Tensor] = field(default_factory=dict)


class InputDigest:
    """A digest of the tensors a pair's backend was given (call 0's state, every call's inputs), in order."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def add(self, label: str, tensors: Mapping[str, Any] | Iterable[Any]) -> None:
        named = tensors.items() if isinstance(tensors, Mapping) else enumerate(tensors)
        self._hash.update(f"<{label}>".encode())
        for name, t in named:
            self._hash.update(f"{name}:".encode())
            self._hash.update(_tensor_bytes(t) if isinstance(t, torch.Tensor) else repr(t).encode())

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _tensor_bytes(t: torch.Tensor) -> bytes:
    """A tensor's dtype, shape and values as bytes (on the CPU; a layout without plain storage by its values)."""
    head = f"{t.dtype}{tuple(t.shape)}".encode()
    t = t.detach().to("cpu")
    try:
        return head + t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    except (RuntimeError, TypeError):  # sparse, quantized, a subclass: its values in full
        return head + repr(t.tolist() if t.layout == torch.strided else t.to_dense().tolist()).encode()


def reference_key(case: Case, calls: Sequence[int], inputs: str) -> str:
    """What a case's references depend on, as a file name: a stored reference is shared under this key only."""
    parts = {
        "format": FORMAT,
        # what the references are made from; spelled out: a repr would hold a frozenset, ordered per process
        "case": [case.id, case.kind, case.seed, case.trains, case.optimizer, repr(case.shapes)],
        "program": case.program.to_json() if case.program is not None else None,
        "calls": list(calls),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        # process settings eager's arithmetic reads, should a backend's pair change them before its references
        "settings": [str(torch.get_default_dtype()), torch.get_float32_matmul_precision(),
                     torch.backends.mkldnn.enabled, torch.are_deterministic_algorithms_enabled()],
        "inputs": inputs,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:40]


def _to_file(refs: Mapping[int, CallReference]) -> dict[str, Any]:
    return {"format": FORMAT, "calls": {
        str(call): {"ref64": r.ref64, "eager32": r.eager32, "eps": r.noise.eps, "spread": dict(r.noise.spread),
                    "random": sorted(r.noise.random), "update_spread": dict(r.noise.update_spread),
                    "initial64": r.initial64, "initial32": r.initial32}
        for call, r in refs.items()}}


def _from_file(data: dict[str, Any]) -> dict[int, CallReference]:
    if data.get("format") != FORMAT:
        raise ValueError(f"stored reference format {data.get('format')!r}, not {FORMAT}")
    return {int(call): CallReference(r["ref64"], r["eager32"],
                                     Noise(r["eps"], r["spread"], frozenset(r["random"]), r["update_spread"]),
                                     r["initial64"], r["initial32"])
            for call, r in data["calls"].items()}


@dataclass(frozen=True)
class SharedReferences:
    """The run's directory of references, shared by every worker of the run (removed when the run ends)."""

    directory: Path

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.pt"

    def load(self, key: str) -> dict[int, CallReference] | None:
        """The references stored under ``key`` (fresh tensors, the pair's own), or ``None``."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            return _from_file(torch.load(path, weights_only=True))
        except Exception:  # unreadable (a disk that filled up): made again
            return None

    def store(self, key: str, refs: Mapping[int, CallReference]) -> bool:
        """Write ``refs`` under ``key``, whole or not at all; ``False`` when they cannot be stored."""
        tmp = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                torch.save(_to_file(refs), f)
            os.replace(tmp, self.path(key))
            return True
        except Exception:  # a tensor torch cannot save, a full disk: this pair's references stay its own
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False


# --------------------------------------------------------------------------- across runs

#: the result cache's kind of entry for a case's references
KIND = "reference"
#: the harness code a reference is made by (a case's step and optimizer, the references, the noise floor), with
#: what it imports (:func:`conformance.util.result_cache.source_digest`)
REFERENCE_SOURCES = ("conformance.checks.state",)


def cached_reference_key(case: Case, calls: Sequence[int], inputs: str, graph: str) -> str:
    """The key a case's references are kept under in the run's result cache (:mod:`conformance.util.result_cache`):
    :func:`reference_key` (the case, the calls, torch, its settings, the inputs' values), the case's step as
    traced (``graph``: :func:`conformance.models.lifetime.cached.graph_digest` of its user-level graph), the
    sources of the module that builds the case and of the harness code that makes references, and the machine."""
    return result_cache.digest(KIND, reference_key(case, calls, inputs), graph, _case_sources(case),
                               result_cache.source_digest(*REFERENCE_SOURCES), result_cache.machine())


def _case_sources(case: Case) -> str:
    """A digest of the files of the modules that define the case's builder and its inputs."""
    h = hashlib.sha256()
    for fn in (case.builder, case.make_inputs):
        fn = getattr(fn, "func", fn)  # a functools.partial: its function
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        path = getattr(module, "__file__", None)
        h.update(f"{getattr(fn, '__module__', None)}:{getattr(fn, '__qualname__', None)}".encode())
        if path:
            try:
                h.update(open(path, "rb").read())
            except OSError:
                h.update(os.urandom(16))  # unreadable: a key nothing stored matches
    return h.hexdigest()


def load_cached_references(cache: ResultCache, key: str) -> dict[int, CallReference] | None:
    """The references kept under ``key`` (fresh tensors), or ``None`` (a miss; an entry that does not load is
    counted rebuilt and made again)."""
    body = cache.read(KIND, key)
    if body is None:
        return None
    try:
        refs = _from_file(torch.load(io.BytesIO(body), weights_only=True))
    except Exception:
        cache.rejected(KIND)
        return None
    cache.hit(KIND)
    return refs


def store_cached_references(cache: ResultCache, key: str, refs: Mapping[int, CallReference]) -> None:
    """Keep ``refs`` under ``key``; references torch cannot save are not kept."""
    buffer = io.BytesIO()
    try:
        torch.save(_to_file(refs), buffer)
    except Exception:
        return
    cache.write(KIND, key, buffer.getvalue())
