"""Calling conventions: what a backend holds for one call of a graph besides the graph's own values.

The ideal executor holds nothing: it reads the caller's inputs and makes each result when
its node runs.  A staging backend (IREE's runtime, with its VM argument list) copies every
tensor input into a buffer of its own and holds the copies for the whole call, and allocates
every result the graph computes when the call starts, before its first dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

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
    #: N > 0: each result the graph computes is allocated when the call starts, rounded up to a
    #: multiple of N bytes (IREE: 64).  Each is still its own storage, freed when it dies.
    results_at_start: int = 0

    def result_nbytes(self, nbytes: int) -> int:
        """The bytes of a result allocated at the call's start: ``nbytes`` rounded up to the alignment."""
        return -(-nbytes // self.results_at_start) * self.results_at_start


#: The reference executor's: inputs read where the caller holds them, results made by their nodes.
IDEAL = CallingConvention()


def result_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The nodes whose tensors the graph returns and computes itself, in order, each once."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    seen: dict[torch.fx.Node, None] = {}
    for n in flat_nodes(out.args):
        if n.op not in ("placeholder", "get_attr") and isinstance(n.meta.get("val"), torch.Tensor):
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
        for n in self._pending:
            val = n.meta["val"]
            nbytes = self.convention.result_nbytes(dense_nbytes(val, self.builder.symbols))
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
