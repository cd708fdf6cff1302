"""The CUDA caching-allocator memory probe, and the arithmetic over its snapshots.

What counts is what the caller *requested*: ``requested_bytes.all.*`` from
``torch.cuda.memory_stats()`` and the ``alloc`` / ``free_requested`` entries of
the allocator's history, both of which carry the size asked for, not the block
the allocator rounded it up to (512 B granules, 2 MiB / 20 MiB segments).  The
lifetime model counts tensor bytes, so rounding would read as a phantom leak.

CUDA graph trees allocate from *private pools* (``segment_pool_id`` != (0, 0))
that a replay never touches through the allocator: their footprint is only
visible in snapshots (``torch.cuda.memory._snapshot()``), so the pool arithmetic
(:func:`pool_usage`, :func:`pool_reserved`, :func:`pool_peaks`) works on the
snapshot dict alone.  Everything here except :class:`CudaAllocatorProbe` is pure
and runs on CPU against recorded snapshots; the module imports without CUDA.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from conformance.probes.cpu import MemoryTrace, build_trace

DOMAIN = "cuda-caching-allocator"
PoolId = tuple[int, int]
DEFAULT_POOL: PoolId = (0, 0)
#: Allocator actions that change what the caller holds; the rest (segment_*,
#: free_completed, snapshot, oom) are the allocator's own bookkeeping.
_LIVE_ACTIONS = {"alloc": 1, "free_requested": -1}

Snapshot = Mapping[str, Any]


def requested_stats(stats: Mapping[str, Any]) -> tuple[int, int]:
    """``(current, peak)`` requested bytes from a ``torch.cuda.memory_stats()`` dict."""
    return int(stats.get("requested_bytes.all.current", 0)), int(stats.get("requested_bytes.all.peak", 0))


def trace_from_stats(before: Mapping[str, Any], after: Mapping[str, Any]) -> MemoryTrace:
    """A window seen only through counters: peak and residual relative to the start.

    ``before`` is read right after ``torch.cuda.reset_peak_memory_stats()``, so the
    peak in ``after`` is the window's own.  No per-allocation detail (nothing to blame).
    """
    base, _ = requested_stats(before)
    current, peak = requested_stats(after)
    trace = MemoryTrace(DOMAIN, exact=False)
    trace.timeline = [(0, 0), (1, max(peak - base, 0)), (2, current - base)]
    return trace


def pool_id_of(item: Mapping[str, Any], key: str = "pool_id") -> PoolId:
    raw = item.get(key, DEFAULT_POOL)
    return (int(raw[0]), int(raw[1]))


def _top_frame(entry: Mapping[str, Any]) -> str | None:
    frames = entry.get("frames") or []
    if not frames:
        return None
    f = frames[0]
    return f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"


def trace_events(
    snapshot: Snapshot, device: int = 0, pools: Iterable[PoolId] | None = None
) -> list[tuple[int, int, int, str | None, str | None]]:
    """The device trace as ``build_trace`` events: ``(time ns, addr, signed requested bytes, None, frame)``.

    ``free_requested`` is when the caller let go; ``free_completed`` only lags it for
    memory still used by another stream, which is the allocator's business, not the
    program's.  ``pools`` keeps only entries of those pools (e.g. one private pool).
    """
    traces = snapshot.get("device_traces") or []
    if device >= len(traces):
        return []
    wanted = None if pools is None else set(pools)
    events: list[tuple[int, int, int, str | None, str | None]] = []
    for entry in traces[device]:
        sign = _LIVE_ACTIONS.get(entry.get("action", ""))
        if sign is None:
            continue
        if wanted is not None and pool_id_of(entry) not in wanted:
            continue
        events.append((int(entry.get("time_us", 0)) * 1000, int(entry["addr"]), sign * int(entry["size"]),
                       None, _top_frame(entry)))
    events.sort(key=lambda e: e[0])  # stable: same-microsecond entries keep the allocator's order
    return events


def trace_from_snapshot(snapshot: Snapshot, device: int = 0, pools: Iterable[PoolId] | None = None) -> MemoryTrace:
    """The live-requested-bytes timeline of a recorded window (history enabled at its start).

    Frees of memory allocated before the window count as foreign, as on CPU.
    """
    trace = build_trace(DOMAIN, trace_events(snapshot, device, pools))
    trace.exact = False  # the caching allocator's trace: not yet held to a program's timeline (no GPU to verify)
    return trace


def _segments(snapshot: Snapshot, device: int | None) -> list[Mapping[str, Any]]:
    segs = snapshot.get("segments") or []
    return [s for s in segs if device is None or int(s.get("device", 0)) == device]


def pool_usage(snapshot: Snapshot, device: int | None = None) -> dict[PoolId, int]:
    """Requested bytes of blocks in use (``active_allocated``) per pool, at snapshot time."""
    usage: dict[PoolId, int] = defaultdict(int)
    for seg in _segments(snapshot, device):
        pool = pool_id_of(seg, "segment_pool_id")
        usage[pool] += sum(int(b["requested_size"]) for b in seg.get("blocks", []) if b["state"] == "active_allocated")
    return dict(usage)


def pool_reserved(snapshot: Snapshot, device: int | None = None) -> dict[PoolId, int]:
    """Bytes reserved from the device per pool (segment ``total_size``): what a pool really costs."""
    reserved: dict[PoolId, int] = defaultdict(int)
    for seg in _segments(snapshot, device):
        reserved[pool_id_of(seg, "segment_pool_id")] += int(seg["total_size"])
    return dict(reserved)


def pool_peaks(snapshot: Snapshot, device: int = 0) -> dict[PoolId, int]:
    """Peak live requested bytes per pool over the recorded history."""
    traces = snapshot.get("device_traces") or []
    pools = {pool_id_of(e) for e in (traces[device] if device < len(traces) else []) if e.get("action") == "alloc"}
    return {p: trace_from_snapshot(snapshot, device, [p]).peak_bytes for p in sorted(pools)}


def private(per_pool: Mapping[PoolId, int]) -> dict[PoolId, int]:
    """Only the private pools (CUDA graphs, ``torch.cuda.MemPool``): not the default pool."""
    return {p: v for p, v in per_pool.items() if p != DEFAULT_POOL}


def new_pools(before: Snapshot, after: Snapshot) -> set[PoolId]:
    """Private pools present in ``after`` and not in ``before`` (made by what ran in between)."""
    return set(private(pool_reserved(after))) - set(private(pool_reserved(before)))


def cuda_unavailable_reason() -> str | None:
    """Why CUDA cannot be used here, in one sentence; ``None`` when it can."""
    if torch.version.cuda is None:
        return f"CUDA not available: torch {torch.__version__} build has no CUDA support, no GPU"
    if not torch.cuda.is_available():
        return f"CUDA not available: torch {torch.__version__} (CUDA {torch.version.cuda}) finds no GPU"
    return None


class CudaAllocatorProbe:
    """The CUDA caching allocator over one window, in requested bytes.

    With ``history`` (default) the allocator's alloc/free history is recorded for
    the window, giving per-allocation detail (for blame) and per-pool figures; the
    snapshot taken at exit is kept in ``snapshot``.  ``stats_trace`` is the same
    window from the ``requested_bytes`` counters, as a cross-check.
    """

    domain = DOMAIN

    def __init__(self, device: int | None = None, history: bool = True, max_entries: int = 200_000) -> None:
        self.device = device
        self.history = history
        self.max_entries = max_entries
        self.trace = MemoryTrace(self.domain)
        self.stats_trace = MemoryTrace(self.domain)
        self.snapshot: dict[str, Any] | None = None
        self._before: dict[str, Any] = {}

    def _device_index(self) -> int:
        return torch.cuda.current_device() if self.device is None else self.device

    def __enter__(self) -> CudaAllocatorProbe:
        dev = self._device_index()
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        self._before = torch.cuda.memory_stats(dev)
        if self.history:
            torch.cuda.memory._record_memory_history(
                "all", context="alloc", stacks="python", max_entries=self.max_entries, clear_history=True
            )
        return self

    def __exit__(self, *exc: object) -> None:
        dev = self._device_index()
        torch.cuda.synchronize(dev)
        after = torch.cuda.memory_stats(dev)
        self.stats_trace = trace_from_stats(self._before, after)
        if not self.history:
            self.trace = self.stats_trace
            return
        self.snapshot = torch.cuda.memory._snapshot(dev)
        torch.cuda.memory._record_memory_history(None)
        self.trace = trace_from_snapshot(self.snapshot, device=dev)
