"""Memory probes: measure what a step really allocates, in one memory domain each.

The CPU probe reads the torch CPU allocator's allocation events through the
profiler's memory reporting.  Only what happens inside the recording window
counts: a free of memory allocated before the window (a tensor the caller made
earlier) is recorded as *foreign* and left out of the live bytes, so it cannot
drive the count negative or hide a leak.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch.profiler import ProfilerActivity, profile

from conformance.models.interpreter import NODE_RANGE_PREFIX
from conformance.probes.observer import OPERATOR_NAME, ObserverWindow, RawEvent, use_observer


@dataclass
class Allocation:
    """One allocation made inside the window, with the node and op that made it."""

    ptr: int
    nbytes: int
    t_alloc: int
    t_free: int | None = None
    label: str | None = None  # the reference executor's node, when there is one
    op: str | None = None  # innermost operator that allocated it (profiler ranges are not operators)
    seq: int = 0  # order of allocation within the window
    order_alloc: int = 0  # position of the allocation among all the window's allocations and frees
    order_free: int | None = None
    #: the outermost operator whose call both allocated and freed it (an op's own workspace), if any
    transient_in: str | None = None

    def alive_at(self, t: int) -> bool:
        return self.t_alloc <= t and (self.t_free is None or self.t_free > t)

    def describe(self) -> dict[str, Any]:
        return {"bytes": self.nbytes, "label": self.label, "op": self.op, "seq": self.seq,
                "transient_in": self.transient_in}


@dataclass
class MemoryTrace:
    """What a probe measured over one window."""

    domain: str
    allocations: list[Allocation] = field(default_factory=list)
    timeline: list[tuple[int, int]] = field(default_factory=list)  # (time ns, live bytes)
    foreign_free_bytes: int = 0
    #: the domain reports every allocation and free as the program makes it (torch's CPU allocator
    #: does), so a program's timeline can be held to it exactly
    exact: bool = True

    @property
    def peak_bytes(self) -> int:
        return max((live for _, live in self.timeline), default=0)

    @property
    def peak_time(self) -> int:
        return max(self.timeline, key=lambda e: e[1], default=(0, 0))[0]

    @property
    def residual_bytes(self) -> int:
        return self.timeline[-1][1] if self.timeline else 0

    def live_at(self, t: int) -> list[Allocation]:
        return [a for a in self.allocations if a.alive_at(t)]

    def still_alive(self) -> list[Allocation]:
        return [a for a in self.allocations if a.t_free is None]

    def relative_timeline(self, max_points: int = 400) -> list[tuple[float, int]]:
        """The timeline as (microseconds from start, live bytes), thinned for reports."""
        if not self.timeline:
            return []
        t0 = self.timeline[0][0]
        points = self.timeline
        if len(points) > max_points:  # keep every peak of each bucket so the plot keeps its shape
            step = len(points) / max_points
            thinned = []
            for i in range(max_points):
                bucket = points[int(i * step) : int((i + 1) * step)] or [points[-1]]
                thinned.append(max(bucket, key=lambda e: e[1]))
            points = [*thinned, self.timeline[-1]]
        return [((t - t0) / 1000.0, live) for t, live in points]


class MemoryProbe(Protocol):
    """A context manager measuring one memory domain; ``trace`` is filled on exit."""

    domain: str

    @property
    def trace(self) -> MemoryTrace:
        """What the window measured (read after it closes)."""
        ...

    def __enter__(self) -> MemoryProbe: ...

    def __exit__(self, *exc: object) -> None: ...


class CpuAllocatorProbe:
    """The torch CPU allocator's allocation events: through the native observer where it is built
    (:mod:`conformance.probes.observer`), else through the profiler; the same events either way.

    Leaving the window only stops the recording; the trace is built when first read, so what
    the step itself pays for being probed is the recording alone."""

    domain = "torch-cpu"

    def __init__(self, recorder: str | None = None) -> None:
        """``recorder``: ``"observer"`` or ``"profiler"``; by default the observer where available."""
        self.recorder = recorder or ("observer" if use_observer() else "profiler")
        self._trace: MemoryTrace | None = MemoryTrace(self.domain)
        self._prof: profile | None = None
        self._window: ObserverWindow | None = None
        self._raw: list[RawEvent] | None = None

    def __enter__(self) -> CpuAllocatorProbe:
        self._trace = None
        if self.recorder == "observer":
            self._window = ObserverWindow()
        else:
            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._prof.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._window is not None:
            self._raw = self._window.stop()
            self._window = None
        else:
            assert self._prof is not None
            self._prof.__exit__(None, None, None)

    @property
    def trace(self) -> MemoryTrace:
        if self._trace is None:
            if self._raw is not None:
                self._trace = build_trace(self.domain, self._raw)
            elif self._prof is not None:
                self._trace = trace_from_profile(self._prof, self.domain, device_type="cpu")
            else:
                raise RuntimeError("the probe's window is still open")
            self._raw, self._prof = None, None
        return self._trace


def trace_from_profile(prof: profile, domain: str, device_type: str) -> MemoryTrace:
    """Turn a profiler's allocation events into allocations and a live-bytes timeline."""
    from torch._C._profiler import _EventType

    raw: list[RawEvent] = []

    def walk(event: Any, label: str | None, op: str | None, outer: tuple[str, int] | None) -> None:
        kind, fields = event.typed
        if kind == _EventType.Allocation:
            if fields.device.type == device_type:
                raw.append((event.start_time_ns, fields.ptr, fields.alloc_size, label, op, outer))
            return
        name: str = event.name
        if name.startswith(NODE_RANGE_PREFIX):
            label, op, outer = name[len(NODE_RANGE_PREFIX) :], None, None
        elif OPERATOR_NAME.match(name):
            op = name  # the innermost operator wins for naming
            if outer is None:
                outer = (name, event.end_time_ns)  # the outermost one owns what is freed inside it
        for child in event.children:
            walk(child, label, op, outer)

    assert prof.profiler is not None and prof.profiler.kineto_results is not None
    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, None, None, None)
    raw.sort(key=lambda r: r[0])
    return build_trace(domain, raw)


def build_trace(domain: str, events: Sequence[tuple[Any, ...]]) -> MemoryTrace:
    """Pure: ``(time, ptr, signed size, label, op[, (outer op, its end time)])`` events in time order to a trace.

    An allocation freed before the outermost operator call that made it returns is that
    operator's own transient (``transient_in``)."""
    trace = MemoryTrace(domain)
    open_: dict[int, tuple[Allocation, tuple[str, int] | None]] = {}
    live = 0
    for order, event in enumerate(events):
        t, ptr, size, label, op = event[:5]
        outer = event[5] if len(event) > 5 else None
        if size > 0:
            a = Allocation(ptr, size, t, None, label, op, seq=len(trace.allocations), order_alloc=order)
            trace.allocations.append(a)
            open_[ptr] = (a, outer)
            live += size
        elif size < 0:
            found = open_.pop(ptr, None)
            if found is None:
                trace.foreign_free_bytes += -size
                continue
            a_open, owner = found
            a_open.t_free = t
            a_open.order_free = order
            if owner is not None and t <= owner[1]:
                a_open.transient_in = owner[0]
            live -= a_open.nbytes
        else:
            continue
        trace.timeline.append((t, live))
    return trace


def without_op_transients(trace: MemoryTrace) -> MemoryTrace:
    """``trace`` without the allocations an opaque op made and freed inside its own call (pure).

    Where a generated program is held to the measurement exactly, those are the op's business,
    not the program's (:mod:`conformance.checks.timeline`); its peak is then the program's."""
    kept = [a for a in trace.allocations if a.transient_in is None]
    if len(kept) == len(trace.allocations):
        return trace
    points = sorted([(a.order_alloc, a.t_alloc, a.nbytes) for a in kept]
                    + [(a.order_free, a.t_free, -a.nbytes) for a in kept
                       if a.order_free is not None and a.t_free is not None])
    out = MemoryTrace(trace.domain, kept, foreign_free_bytes=trace.foreign_free_bytes, exact=trace.exact)
    live = 0
    for _, t, delta in points:
        live += delta
        out.timeline.append((t, live))
    return out


def combine_traces(traces: list[MemoryTrace], domain: str = "combined") -> MemoryTrace:
    """Several domains' traces on one clock (ns since the epoch) added into one.

    Each domain's live bytes hold from one of its points to its next, so the sum at
    every point of any domain is exact where each domain was sampled exactly.
    Allocations (for blame) are the union, renumbered in time order.
    """
    combined = MemoryTrace(domain, foreign_free_bytes=sum(t.foreign_free_bytes for t in traces),
                           exact=all(t.exact for t in traces))
    allocations = sorted((a for t in traces for a in t.allocations), key=lambda a: (a.t_alloc, a.seq))
    for seq, a in enumerate(allocations):
        combined.allocations.append(Allocation(a.ptr, a.nbytes, a.t_alloc, a.t_free, a.label, a.op, seq,
                                               a.order_alloc, a.order_free, a.transient_in))
    points = sorted((t, i, live) for i, trace in enumerate(traces) for t, live in trace.timeline)
    current = [0] * len(traces)
    for t, i, live in points:
        current[i] = live
        combined.timeline.append((t, sum(current)))
    return combined
