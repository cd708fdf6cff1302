"""Which compiled graphs ran in each call of a step, and at which sizes.

A backend compiled through ``torch.compile`` can hold several graphs for one frame: one per
shape it was called with (recompiles), or a dynamic one whose sizes are symbols.  A call's
memory is held to the model of the graphs *that call ran*, at the sizes it ran them with;
:class:`DispatchLog` records both, and :class:`Dispatched` is the boxed callable that feeds
it (it keeps each argument's shape, never the argument).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.models.lifetime import size_of

#: what one argument of a compiled graph was, for binding sizes: a shape, an int, or None
ArgSize = tuple[int, ...] | int | None


@dataclass(frozen=True)
class Dispatch:
    """One compiled graph run once: its index among the recorded graphs and its arguments' sizes."""

    graph: int
    sizes: tuple[ArgSize, ...]


@dataclass
class DispatchLog:
    """Per call of the step (in order, from 0), the compiled graphs it ran."""

    calls: list[list[Dispatch]] = field(default_factory=list)

    def begin_call(self) -> None:
        self.calls.append([])

    def ran(self, graph: int, args: Sequence[Any]) -> None:
        if self.calls:
            self.calls[-1].append(Dispatch(graph, tuple(size_of(a) for a in args)))

    def of_call(self, call: int) -> list[Dispatch] | None:
        """What ``call`` ran; None when the log did not see that call."""
        return self.calls[call] if 0 <= call < len(self.calls) else None


@dataclass
class Dispatched:
    """A compiled graph that records each run in a :class:`DispatchLog`, with its own calling
    convention kept (boxed: the list is handed over; unboxed: the arguments unpacked)."""

    compiled: Callable[..., Any]
    log: DispatchLog
    graph: int
    _boxed_call: bool = True

    def __post_init__(self) -> None:
        self._boxed_call = bool(getattr(self.compiled, "_boxed_call", False))

    def __call__(self, *args: Any) -> Any:
        arguments = args[0] if self._boxed_call and len(args) == 1 and isinstance(args[0], list) else args
        self.log.ran(self.graph, arguments)
        return self.compiled(*args)
