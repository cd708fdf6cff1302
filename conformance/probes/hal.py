"""The IREE HAL allocator as a memory domain (``iree-hal``).

``HalAllocator.statistics`` gives cumulative ``device_bytes_allocated`` and
``device_bytes_freed`` (so live bytes, exactly, at any moment we look) and
``device_bytes_peak``, a high-water mark that can never be reset.  Only the
``local-sync`` driver counts the program's own allocations (transients, results)
there; ``local-task`` allocates them through its task executor's pools, so the
IREE adapters run on a ``local-sync`` device.  All ``local-sync`` devices of a
process share these counters, so the domain is "every HAL allocation of the process".

The peak *inside* a VM invocation cannot be sampled from Python.  The probe gets it
exactly with a ballast: right before the invocation it allocates ``H - L + 1`` bytes
(``H`` the high-water mark, ``L`` the live bytes), so the counters stand at a new
high-water mark ``H1``; whatever the program allocates on top of that moves the mark,
so ``peak_after - H1`` is the invocation's own peak above the bytes live when it
started.  The ballast is freed before the invocation's samples are recorded.

Samples are ``(time.time_ns(), live bytes above the window's start)``: the same
clock as the torch profiler's events, so :func:`conformance.probes.cpu.combine_traces` can
add the two domains.  HAL bytes change outside invocations only by frees (tensors
backed by IREE memory dying), so the sampled peak is the domain's peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from conformance.probes.cpu import MemoryTrace

T = TypeVar("T")

_ACTIVE: list[HalAllocatorProbe] = []


def active_probe() -> HalAllocatorProbe | None:
    """The probe whose window is open, if any (adapters route their invocations through it)."""
    return _ACTIVE[-1] if _ACTIVE else None


class HalAllocatorProbe:
    """Live bytes of an IREE HAL allocator over one window, with exact per-invocation peaks."""

    domain = "iree-hal"

    def __init__(self, allocator: Any) -> None:
        self.allocator = allocator
        self.trace = MemoryTrace(self.domain, exact=False)  # statistics, not allocations
        self.invocations: list[dict[str, Any]] = []
        self._baseline = 0

    def live(self) -> int:
        s = self.allocator.statistics
        return int(s["device_bytes_allocated"] - s["device_bytes_freed"] + s["host_bytes_allocated"]
                   - s["host_bytes_freed"])

    def _high_water(self) -> int:
        return int(self.allocator.statistics["device_bytes_peak"])

    def sample(self) -> None:
        self.trace.timeline.append((time.time_ns(), self.live() - self._baseline))

    def __enter__(self) -> HalAllocatorProbe:
        self.trace = MemoryTrace(self.domain, exact=False)  # statistics, not allocations
        self.invocations = []
        self._baseline = self.live()
        self.sample()
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.remove(self)
        self.sample()

    def around_invoke(self, invoke: Callable[[], T]) -> T:
        """Run one VM invocation, recording the live bytes before it, at its peak and after it."""
        from iree.runtime import BufferUsage, MemoryType

        self.sample()
        t_start = time.time_ns()
        live0 = self.live()
        ballast_bytes = self._high_water() - live0 + 1
        ballast = self.allocator.allocate_buffer(
            memory_type=MemoryType.DEVICE_LOCAL, allowed_usage=BufferUsage.DEFAULT, allocation_size=ballast_bytes
        )
        mark = self._high_water()
        try:
            result = invoke()
        finally:
            rise = self._high_water() - mark
            t_end = time.time_ns()
            del ballast
        self.trace.timeline.append(((t_start + t_end) // 2, live0 + rise - self._baseline))
        self.sample()
        self.invocations.append({"live_before": live0 - self._baseline, "peak_rise": rise,
                                 "live_after": self.live() - self._baseline})
        return result
