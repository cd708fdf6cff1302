"""The lifetime model's data: storages with birth and death, the live-bytes timeline they make,
and what a real run observed that a graph alone does not say."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx


@dataclass(eq=False)
class Storage:
    """One storage the step allocates, with where it came from and when it lives (identity-compared)."""

    sid: int
    nbytes: int
    producer: str
    op: str
    shape: tuple[int, ...]
    dtype: str
    role: str = "intermediate"  # intermediate | output | retained | saved | tangent | staging | caller
    birth: int = -1
    death: int | None = None  # event index after which it is freed; None: outlives the step
    refs: int = field(default=0, repr=False)
    # Set by a program model (:mod:`conformance.models.program`) for the storages a generated program handles:
    last_use: int | None = None  # the last event that read or wrote it
    held_by: str = ""  # what still referenced it at the first work past its last use
    held_in: str = ""  # the kind of that reference: "list", "tuple" (a container holds it) or "name"
    held_in_loop: bool = False  # it was held so inside a host ``while`` loop
    freed_in_loop: bool = False  # and let go inside one (a later trip), not after the loop
    op_writer: str = ""  # the kernel or op that produced its contents
    modelled_by_program: bool = False
    allocated_by_program: bool = False  # allocated by the program itself (not returned by an op)
    copy_of: int | None = None  # the sid of the storage this one copies (the engine's AccumulateGrad layout copy)
    #: the forward graph input a program's saved buffer stands for (the graphs save the caller's own tensor,
    #: which costs the step nothing; the program saves a buffer of its own: a copy, e.g. channels-last)
    copy_of_input: str = ""
    #: a ``while_loop``'s predicate (what its condition graph returns): torch's dense kernel holds each trip's
    #: until the next condition returns, where the model drops it once read (the peak check's evidence)
    loop_predicate: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "producer": self.producer,
            "op": self.op_writer or self.op,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "bytes": self.nbytes,
            "role": self.role,
            "model_birth": self.birth,
            "model_death": self.death,
        }


@dataclass
class LifetimeModel:
    """A live-bytes timeline: ``events[i]`` is a node run, ``live_bytes[i]`` the bytes live during it."""

    events: list[str]
    live_bytes: list[int]
    storages: list[Storage]
    #: Events that allocated or computed (a program model's kernels and ops); empty for graph models.
    work_events: set[int] = field(default_factory=set)
    #: What a program model found about the program's own references (late ones, see conformance.models.program).
    findings: list[Any] = field(default_factory=list)

    @property
    def peak_bytes(self) -> int:
        return max(self.live_bytes, default=0)

    @property
    def peak_event(self) -> int:
        return max(range(len(self.live_bytes)), key=self.live_bytes.__getitem__, default=-1)

    @property
    def made_bytes(self) -> int:
        """The bytes of every storage the step makes, each counted once: what a schedule that holds
        nothing but the step's own values can hold at most (all of them at once)."""
        return sum(s.nbytes for s in self.storages if s.role != "caller")

    @property
    def residual_bytes(self) -> int:
        return sum(s.nbytes for s in self.storages if s.death is None and s.role == "retained")

    @property
    def end_bytes(self) -> int:
        """Bytes live at the end of the step while outputs are still held."""
        return sum(s.nbytes for s in self.storages if s.death is None)


@dataclass
class Observation:
    """What a real run saw that a graph alone does not say: loop trip counts, in run order; which
    call of the step it was; and the values the symbolic sizes of the graphs that ran took."""

    trip_counts: list[int] = field(default_factory=list)
    #: the call of the step (0: the first) whose models these are; a backend that compiled several
    #: graphs (one per shape, or a dynamic one after a recompile) models the ones that ran then
    call: int = 0
    #: values of the symbolic sizes (sympy symbols to ints) of a call's dynamic-shape graphs
    sizes: dict[Any, int] = field(default_factory=dict)

    def copy(self) -> Observation:
        return Observation(list(self.trip_counts), self.call, dict(self.sizes))


class ModelError(RuntimeError):
    """The graph could not be modelled (a size or an op the model does not know)."""


def op_name(node: torch.fx.Node) -> str:
    """The name a storage records for the op that produced it."""
    target = node.target
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None) or str(target)
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    return name
