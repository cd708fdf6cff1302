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
from conformance.models.lifetime.split import Key, StorageKeys

#: what one argument of a compiled graph was, for binding sizes: a shape, an int, or None
ArgSize = tuple[int, ...] | int | None


@dataclass(frozen=True)
class Dispatch:
    """One compiled graph run once: its index among the recorded graphs and its arguments' sizes."""

    graph: int
    sizes: tuple[ArgSize, ...]
    #: its arguments' and results' storages, by identity within the call (a split step's dataflow between
    #: its graphs: :mod:`conformance.models.lifetime.split`); ``None`` for what is not a tensor
    args: tuple[Key, ...] = ()
    results: tuple[Key, ...] = ()


@dataclass
class DispatchLog:
    """Per call of the step (in order, from 0), the compiled graphs it ran."""

    calls: list[list[Dispatch]] = field(default_factory=list)
    #: per call, the storage keys of the caller's own tensors (inputs, parameters, buffers)
    caller: list[frozenset[int]] = field(default_factory=list)
    #: per call, the storage keys of what the step returned (its outputs)
    outputs: list[tuple[Key, ...]] = field(default_factory=list)
    #: per call, the storage keys of the gradients the step left in the parameters' ``.grad``
    gradients: list[frozenset[int]] = field(default_factory=list)
    _keys: StorageKeys = field(default_factory=StorageKeys)

    def begin_call(self, caller: Sequence[Any] = ()) -> None:
        self.calls.append([])
        self._keys = StorageKeys()
        self.caller.append(frozenset(k for k in self._keys.of(caller) if k is not None))

    def ran(self, graph: int, args: Sequence[Any]) -> int | None:
        """Log a run of ``graph`` on ``args``; its index in the call, for :meth:`returned` (``None``: no call begun)."""
        if not self.calls:
            return None
        self.calls[-1].append(Dispatch(graph, tuple(size_of(a) for a in args), self._keys.of(args)))
        return len(self.calls[-1]) - 1

    def returned(self, index: int | None, results: Any) -> None:
        """The results of the logged run ``index`` (their storages' keys)."""
        if index is None or not self.calls:
            return
        flat = list(results) if isinstance(results, (list, tuple)) else [results]
        run = self.calls[-1][index]
        self.calls[-1][index] = Dispatch(run.graph, run.sizes, run.args, self._keys.of(flat))

    def ended(self, outputs: Sequence[Any], gradients: Sequence[Any] = ()) -> None:
        """The step's outputs and the gradients it left in ``.grad``, as the call returned them: their keys."""
        if self.calls:
            while len(self.outputs) < len(self.calls) - 1:
                self.outputs.append(())
                self.gradients.append(frozenset())
            self.outputs.append(self._keys.of(outputs))
            self.gradients.append(frozenset(k for k in self._keys.of(gradients) if k is not None))

    def gradients_of(self, call: int) -> frozenset[int]:
        return self.gradients[call] if 0 <= call < len(self.gradients) else frozenset()

    def outputs_of(self, call: int) -> tuple[Key, ...] | None:
        """The keys of what ``call`` returned (``None``: not recorded)."""
        return self.outputs[call] if 0 <= call < len(self.outputs) else None

    def caller_of(self, call: int) -> frozenset[int]:
        return self.caller[call] if 0 <= call < len(self.caller) else frozenset()

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
        index = self.log.ran(self.graph, arguments)
        results = self.compiled(*args)
        self.log.returned(index, results)
        return results
