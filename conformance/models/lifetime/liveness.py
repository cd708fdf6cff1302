"""Liveness: when a value may be dropped (a pure function of the graph), and the reference
counting that turns drops into storage deaths on a timeline of events.

A storage is alive while any value aliasing it is held; it dies after the event at which
its last reference goes.  Caller-owned inputs exist before the step and cost it nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.lifetime.aliasing import storages_in
from conformance.models.lifetime.model import LifetimeModel, Observation, Storage
from conformance.models.lifetime.sizes import Symbols, concrete_shape

#: node meta key: the node until which the node's value is held at least (a value an eager region
#: made: its C++ and Python scopes keep it until the region returns; see
#: :func:`conformance.api.step.trace_user_kernels`)
HOLD_UNTIL = "conformance_hold_until"


def release_schedule(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """For each node, the nodes whose values may be dropped right after it runs.

    A value is dropped after its last user, or after the node its ``HOLD_UNTIL`` meta
    names when that comes later; a value nobody uses is dropped right after it is made.
    Values the graph returns are never dropped.
    """
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    returned: set[torch.fx.Node] = set()
    last_use: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in nodes:
        if node.op == "output":
            returned.update(flat_nodes(node.args))
            continue
        for used in flat_nodes((node.args, node.kwargs)):
            last_use[used] = node
    schedule: dict[torch.fx.Node, list[torch.fx.Node]] = {n: [] for n in nodes}
    for node in nodes:
        if node.op in ("output", "get_attr") or node in returned:
            continue
        last = last_use.get(node, node)
        hold = node.meta.get(HOLD_UNTIL)
        if hold in order and order[hold] > order[last]:
            last = hold
        schedule[last].append(node)
    return schedule


def flat_nodes(tree: Any) -> list[torch.fx.Node]:
    """The nodes an argument tree refers to, in order."""
    out: list[torch.fx.Node] = []
    torch.fx.node.map_arg(tree, out.append)
    return out


class ModelBuilder:
    """Storages with reference counts, and the live bytes at each event: what every pass writes to.

    The graph walk (:mod:`conformance.models.lifetime.graph`) and a generated program's model
    (:mod:`conformance.models.program`) both build a :class:`LifetimeModel` through it.
    """

    def __init__(self, observation: Observation) -> None:
        self.events: list[str] = []
        self.live: list[int] = []
        self.work_events: set[int] = set()
        self.findings: list[Any] = []
        self.storages: list[Storage] = []
        #: observed values of symbolic sizes, bound as loops run (:mod:`conformance.models.lifetime.loops`)
        self.symbols: Symbols = dict(observation.sizes)
        self._live_now = 0
        self._trip_counts = list(observation.trip_counts)

    def next_trip_count(self) -> int | None:
        """The observed trip count of the next loop to run (loops take them in run order); None when none is left."""
        return self._trip_counts.pop(0) if self._trip_counts else None

    def caller_input(self, val: Any, name: str) -> Any:
        """A caller-owned input: it exists before the step and costs it nothing (it never dies here)."""
        if isinstance(val, (list, tuple)):
            return tuple(self.caller_input(v, name) for v in val)
        if not isinstance(val, torch.Tensor):
            return None
        s = Storage(len(self.storages), 0, name, "input", concrete_shape(val, self.symbols, strict=False),
                    str(val.dtype), "caller")
        self.storages.append(s)
        return s

    def new_storage(self, nbytes: int, producer: str, op: str, val: torch.Tensor | None, role: str) -> Storage:
        """A storage born now (live from the event being built), with no references yet."""
        shape = concrete_shape(val, self.symbols) if val is not None else ()
        dtype = str(val.dtype).removeprefix("torch.") if val is not None else ""
        s = Storage(len(self.storages), nbytes, producer, op, shape, dtype, role)
        s.birth = len(self.events)
        self.storages.append(s)
        self._live_now += nbytes
        return s

    def acquire(self, value: Any) -> None:
        """One more reference to every storage in ``value``."""
        for s in storages_in(value):
            s.refs += 1

    def release(self, value: Any) -> None:
        """One reference fewer to every storage in ``value``; one left with none dies after the last event."""
        for s in storages_in(value):
            s.refs -= 1
            if s.refs == 0 and s.role != "caller":
                s.death = len(self.events) - 1
                self._live_now -= s.nbytes

    def event(self, label: str, transient_bytes: int = 0) -> None:
        """Close an event: everything born so far during it, and ``transient_bytes`` an op
        allocates and frees inside itself, were live at its peak."""
        self.events.append(label)
        self.live.append(self._live_now + transient_bytes)

    def finish(self, outputs: Sequence[Any], retained: set[int]) -> LifetimeModel:
        """The model, the step's ``outputs`` marked: those at positions in ``retained`` outlive the
        step (parameter gradients), the rest the caller drops after it.  A storage with references
        left outlives the step (``death`` None); one with none died already."""
        for i, value in enumerate(outputs):
            for s in storages_in(value):
                if s.role != "caller":
                    s.role = "retained" if i in retained else "output"
        return LifetimeModel(self.events, self.live, self.storages, self.work_events, self.findings)
