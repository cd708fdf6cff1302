"""Calling conventions: what a backend holds for one call of a graph besides the graph's own values.

The ideal executor holds nothing: it reads the caller's inputs and makes each result when
its node runs.  A staging backend (IREE's runtime, with its VM argument list) copies every
tensor input into a buffer of its own and holds the copies for the whole call, and allocates
every result the graph computes when the call starts, before its first dispatch.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef

from conformance.models.lifetime.liveness import ModelBuilder, flat_nodes
from conformance.models.lifetime.model import Storage, op_name
from conformance.models.lifetime.sizes import dense_nbytes


@dataclass(frozen=True)
class CallingConvention:
    """How a backend takes one call's inputs and makes its results."""

    #: the caller hands its references over (the boxed convention: the argument list is cleared),
    #: so inputs die at their last use
    donated: bool = False
    #: every tensor input is copied (contiguous, ``numel * itemsize`` bytes) and the graph reads the
    #: copies, held for the whole call; a donated original dies right after its copy is made, one
    #: that is not stays alive until the call returns
    staged: bool = False
    #: N > 0: each buffer the graph's results need is allocated when the call starts (IREE).  Several
    #: are packed at offsets aligned to N bytes (IREE: 64), so each takes its size rounded up to N; a
    #: call with a single result buffer allocates it at its exact size (no pack).  Each is still its
    #: own storage, freed when it dies.
    results_at_start: int = 0

    def result_nbytes(self, nbytes: int, alone: bool = False) -> int:
        """The bytes of a result buffer allocated at the call's start: ``nbytes`` rounded up to the
        alignment, or exactly ``nbytes`` where it is the call's only one (``alone``)."""
        if alone:
            return nbytes
        return -(-nbytes // self.results_at_start) * self.results_at_start


#: The reference executor's: inputs read where the caller holds them, results made by their nodes.
IDEAL = CallingConvention()


def _whole(t: torch.Tensor) -> bool:
    """``t`` covers its storage densely from its start (a detach, an alias, a contiguous reshape of it)."""
    try:
        return bool(t.is_contiguous() and t.storage_offset() == 0
                    and t.untyped_storage().nbytes() == t.numel() * t.element_size())
    except Exception:  # a size only known symbolically: not provably the same buffer
        return False


def _first_maker(gm: torch.fx.GraphModule) -> dict[StorageWeakRef, torch.fx.Node]:
    """Per fake storage, the first node whose value (a single tensor) lives in it: the input or op that made it."""
    made: dict[StorageWeakRef, torch.fx.Node] = {}
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            made.setdefault(StorageWeakRef(val.untyped_storage()), n)
    return made


def result_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The nodes whose result buffers a call allocates at its start, in order, each once.

    A returned value that covers a storage whole (a ``detach``, an alias, a contiguous ``view`` of
    another value) is the buffer of the node that made that storage: IREE returns the same buffer
    for both (``util.return %3, %3``), and none for a returned input (``util.return %3, %arg0``).
    Other returned views (a transpose) are materialised in a buffer of their own."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    made = _first_maker(gm)
    seen: dict[torch.fx.Node, None] = {}
    for n in flat_nodes(out.args):
        val = n.meta.get("val")
        if n.op in ("placeholder", "get_attr") or not isinstance(val, torch.Tensor):
            continue
        maker = made.get(StorageWeakRef(val.untyped_storage()), n)
        maker_val = maker.meta.get("val")
        computes = maker.target is not operator.getitem  # a multi-output op's leaf: not made by that node
        if maker is not n and computes and _whole(val) and isinstance(maker_val, torch.Tensor) and _whole(maker_val):
            if maker.op not in ("placeholder", "get_attr"):
                seen.setdefault(maker)
            continue
        seen.setdefault(n)
    return list(seen)


class Call:
    """One call of a graph under a convention: the references the call itself holds (input
    copies, originals it keeps, results allocated at its start) until :meth:`end`."""

    def __init__(self, builder: ModelBuilder, convention: CallingConvention, gm: torch.fx.GraphModule,
                 prefix: str) -> None:
        self.builder = builder
        self.convention = convention
        self.prefix = prefix
        self._held: list[Any] = []
        self._early: dict[torch.fx.Node, Storage] = {}  # results allocated at the start, not yet computed
        self._pending = result_nodes(gm) if convention.results_at_start else []

    def take_input(self, node: torch.fx.Node, value: Any) -> Any:
        """What the graph reads for a placeholder: the caller's ``value``, or the backend's copy of it."""
        if self.convention.staged:
            return self._stage(node, value)
        if not self.convention.donated:
            self.builder.acquire(value)
        return value

    def start(self) -> None:
        """The call's work begins (before its first node that is not an input): allocate the results up front."""
        if not self._pending:
            return
        alone = len(self._pending) == 1
        for n in self._pending:
            val = n.meta["val"]
            nbytes = self.convention.result_nbytes(dense_nbytes(val, self.builder.symbols), alone)
            s = self.builder.new_storage(nbytes, f"{self.prefix}{n.name}", op_name(n), val, "intermediate")
            self.builder.acquire(s)  # the call's own reference, dropped when it returns
            self._held.append(s)
            self._early[n] = s
        self._pending = []
        self.builder.event(f"{self.prefix}results")

    def take_result(self, node: torch.fx.Node) -> Storage | None:
        """The storage allocated at the start for ``node``'s result, if any: its node computes into it."""
        return self._early.pop(node, None)

    def returned(self, node: torch.fx.Node, value: Any) -> Any:
        """What the call returns for ``node``: a result still waiting in its up-front buffer is a view
        of another value, which the backend materialises there (results are dense buffers of their own)."""
        return self._early.pop(node, None) or value

    def end(self) -> None:
        """The call returns: drop what it held."""
        self.builder.release(self._held)

    def _stage(self, node: torch.fx.Node, value: Any) -> Any:
        val = node.meta.get("val")
        donated = self.convention.donated
        if not isinstance(val, torch.Tensor) or not isinstance(value, Storage):
            if not donated:
                self.builder.acquire(value)
            return value
        label = f"{self.prefix}stage:{node.name}"
        copy = self.builder.new_storage(dense_nbytes(val, self.builder.symbols), label, "stage", val, "staging")
        self.builder.acquire(copy)  # the graph's reference, dropped at the copy's last use
        self.builder.acquire(copy)  # the argument list's, dropped when the call returns
        self._held.append(copy)
        self.builder.event(label)
        if donated:
            self.builder.release(value)  # the caller's reference was handed over; the copy replaces it
        else:
            self.builder.acquire(value)
            self._held.append(value)
        return copy
