"""The optimizer's part of a training step: what ``optimizer.step()`` and ``zero_grad(set_to_none=True)``
allocate and free, as a segment appended to the step's own lifetime model.

The segment is recorded from the case's *real* optimizer making one steady-state step (its state
already made by an earlier step, as it is for every probed call) on copies of the parameters,
under a :class:`~torch.utils._python_dispatch.TorchDispatchMode` (:func:`record_optimizer_step`):

* a storage is born at the first op that shows it (an output, or an input made outside any op,
  like a ``torch.tensor`` scalar) unless it existed before the step (parameters, gradients,
  optimizer state); its bytes are its storage's (shape and dtype), not a measurement;
* it dies when no tensor object seen for it is alive any more (weak references, polled at
  every op and at the end): the optimizer's own Python references decide, so a temporary kept
  alive by a local variable across a loop's iterations (eager Adam's ``denom``) is modelled as
  the real optimizer keeps it, not as an ideal graph would free it;
* a Python number passed where an op takes a tensor (``exp_avg_sq.mul_(beta2)``) is wrapped by
  torch's argument parser into a 0-dim tensor before the op runs (8 bytes: double, int64) and
  freed when it returns; a pointwise op on the CPU casts an input of another dtype than the
  op's to a temporary inside its own call (TensorIterator's CPU casts): the wrapped number's
  cast to a float32 parameter's dtype is 4 bytes, counted as the op's transient.

:func:`with_optimizer_step` appends the segment to any step model (the user-level one, the
received graphs', a generated program's): the step's outputs are dropped first (the caller's
``del``), the gradients (the step's retained storages) stay alive through the optimizer step and
are freed by ``zero_grad(set_to_none=True)`` at its end.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from conformance.models.lifetime.model import LifetimeModel, Storage

#: the event label prefix of the segment's events in a step model
OPTIMIZER_PREFIX = "optimizer:"
ZERO_GRAD_EVENT = "optimizer.zero_grad(set_to_none=True)"
#: the bytes torch's argument parser allocates for a Python number it wraps into a 0-dim tensor
WRAPPED_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


@dataclass
class OptimizerSegment:
    """One optimizer step's storages and live bytes, event by event (relative to the segment)."""

    events: list[str] = field(default_factory=list)
    storages: list[Storage] = field(default_factory=list)  # birth and death are segment event indices
    transients: list[int] = field(default_factory=list)  # bytes an op allocates and frees inside its call
    #: events that allocated or computed, where the segment is a generated program's (:func:`segment_of_program`)
    work_events: set[int] = field(default_factory=set)

    @property
    def live_bytes(self) -> list[int]:
        live = [0] * len(self.events)
        for s in self.storages:
            end = len(self.events) - 1 if s.death is None else s.death
            for i in range(s.birth, end + 1):
                live[i] += s.nbytes
        return [b + t for b, t in zip(live, self.transients)]

    @property
    def peak_bytes(self) -> int:
        return max(self.live_bytes, default=0)

    @property
    def residual_bytes(self) -> int:
        """Bytes the step leaves alive (new optimizer state; none in the steady state)."""
        return sum(s.nbytes for s in self.storages if s.death is None)


@dataclass
class _Seen:
    storage: Storage
    refs: list[weakref.ref[torch.Tensor]]

    def alive(self) -> bool:
        return any(r() is not None for r in self.refs)


class _Recorder(TorchDispatchMode):
    """Notes each op's new storages and, polling weak references at every op, when they die."""

    def __init__(self, existing: set[int]) -> None:
        super().__init__()
        self.existing = existing  # data pointers of the storages alive before the step
        self.segment = OptimizerSegment()
        self.live: dict[int, _Seen] = {}

    def poll(self) -> None:
        for ptr in [p for p, seen in self.live.items() if not seen.alive()]:
            self._died(ptr)

    def _died(self, ptr: int) -> None:
        self.live.pop(ptr).storage.death = len(self.segment.events) - 1

    def see(self, t: Any, op: str) -> None:
        ptr, nbytes = _storage_of(t)
        if not nbytes or ptr in self.existing:
            return
        seen = self.live.get(ptr)
        if seen is not None and not seen.alive():  # freed inside the op and its memory reused
            self._died(ptr)
            seen = None
        if seen is None:
            s = Storage(len(self.segment.storages), nbytes, f"{OPTIMIZER_PREFIX}{op}", op, tuple(t.shape),
                        str(t.dtype).removeprefix("torch."), "intermediate", birth=len(self.segment.events))
            self.segment.storages.append(s)
            seen = self.live[ptr] = _Seen(s, [])
        seen.refs.append(weakref.ref(t))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.poll()
        op = _op_label(func)
        transient = self._wrapped_numbers(func, args, kwargs, op)
        for a in tree_flatten((args, kwargs))[0]:
            self.see(a, op)  # a tensor made outside any op (torch.tensor) is born here
        out = func(*args, **kwargs)
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        for o in outputs:
            self.see(o, op)
        transient += _cpu_casts(func, args, kwargs, outputs)
        self.segment.events.append(f"{OPTIMIZER_PREFIX}{op}")
        self.segment.transients.append(transient)
        for s in self._born_now_wrapped:
            s.death = len(self.segment.events) - 1
        return out

    def _wrapped_numbers(self, func: Any, args: Any, kwargs: Any, op: str) -> int:
        """The 0-dim tensors the argument parser made for Python numbers in tensor arguments (born and
        freed around this op); returns 0 (their bytes are storages, not the op's transient)."""
        self._born_now_wrapped: list[Storage] = []
        for value in _numbers_in_tensor_args(func, args, kwargs):
            dtype = WRAPPED_DTYPES[type(value)]
            nbytes = dtype.itemsize
            s = Storage(len(self.segment.storages), nbytes, f"{OPTIMIZER_PREFIX}{op} (wrapped scalar)",
                        "wrapped scalar", (), str(dtype).removeprefix("torch."), "intermediate",
                        birth=len(self.segment.events))
            self.segment.storages.append(s)
            self._born_now_wrapped.append(s)
        return 0


def _storage_of(t: Any) -> tuple[int, int]:
    """A CPU tensor's storage (data pointer, bytes); ``(0, 0)`` for anything else (sparse and other
    storage-less layouts, other devices: the CPU allocator the segment is held to does not see them)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.is_meta or t.layout != torch.strided:
        return 0, 0
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return 0, 0
    return storage.data_ptr(), storage.nbytes()


def _op_label(func: Any) -> str:
    return str(func)


def _numbers_in_tensor_args(func: Any, args: Any, kwargs: Any) -> list[Any]:
    """Python numbers where the op's schema takes a ``Tensor``: torch wrapped each in a tensor to call it."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return []
    found = []
    values = list(args) + [kwargs[a.name] for a in schema.arguments[len(args):] if a.name in kwargs]
    for arg, value in zip(schema.arguments, values):
        if isinstance(arg.type, torch.TensorType) and type(value) in WRAPPED_DTYPES:
            found.append(value)
    return found


def _cpu_casts(func: Any, args: Any, kwargs: Any, outputs: list[torch.Tensor]) -> int:
    """Bytes a pointwise CPU op casts its inputs of another dtype than its result's into (inside its call).

    TensorIterator on the CPU casts such an input to a temporary of the common dtype for the op's
    whole call; modelled for wrapped Python numbers (what the optimizers step with: the measured
    8 B + 4 B per scalar op of a float32 step), the only such inputs an optimizer's ops take."""
    if torch.Tag.pointwise not in getattr(func, "tags", ()) or not outputs:
        return 0
    common = outputs[0].dtype
    if outputs[0].device.type != "cpu":
        return 0
    total = 0
    for value in _numbers_in_tensor_args(func, args, kwargs):
        if WRAPPED_DTYPES[type(value)] != common:
            total += common.itemsize
    return total


def record_optimizer_step(params: Iterable[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
                          zero_grad: Callable[[], None] | None = None) -> OptimizerSegment:
    """The segment of one ``optimizer.step()`` over ``params`` (their gradients set, the optimizer's state
    made), recorded as it runs for real; the gradients are not part of it (they are the step's)."""
    params = list(params)
    existing: set[int] = set()
    for t in _tensors_of(params, optimizer):
        ptr, nbytes = _storage_of(t)
        if nbytes:
            existing.add(ptr)
    recorder = _Recorder(existing)
    with recorder:
        optimizer.step()
    recorder.poll()
    recorder.segment.events.append(f"{OPTIMIZER_PREFIX}step returned")
    recorder.segment.transients.append(0)
    recorder.poll()  # what the step's frame held dies when it returns
    for seen in recorder.live.values():
        seen.storage.role = "retained"  # still alive: optimizer state the step made
    recorder.live.clear()
    if zero_grad is not None:
        zero_grad()
    return recorder.segment


def _tensors_of(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for p in params:
        found.append(p)
        if p.grad is not None:
            found.append(p.grad)
    for state in optimizer.state.values():
        found.extend(v for v in tree_flatten(state)[0] if isinstance(v, torch.Tensor))
    for group in optimizer.param_groups:
        found.extend(v for k, v in group.items() if k != "params" and isinstance(v, torch.Tensor))
    return found


def segment_of_program(model: LifetimeModel) -> OptimizerSegment:
    """The segment of an optimizer step a compiler generated a program for, from that program's model
    (e.g. :func:`conformance.models.program.model_program` of inductor's wrapper for ``torch.compile(
    optimizer.step)``): its own storages, with what the program model found about them (last uses, the
    references holding them) kept for the program checks; what it returns is dropped when it returns."""
    segment = OptimizerSegment([f"{OPTIMIZER_PREFIX}{e}" for e in model.events], [], [], set(model.work_events))
    end = len(model.events) - 1
    for s in model.storages:
        if s.role == "caller" or not s.nbytes or s.birth < 0:
            continue
        copied = dataclasses.replace(s, sid=len(segment.storages), producer=f"{OPTIMIZER_PREFIX}{s.producer}")
        if copied.death is None and copied.role == "output":
            copied.death, copied.role = end, "intermediate"
        segment.storages.append(copied)
    segment.transients = [0] * len(segment.events)  # what the storages alone leave live, then the rest
    segment.transients = [max(0, m - s) for m, s in zip(model.live_bytes, segment.live_bytes)]
    return segment


def with_optimizer_step(model: LifetimeModel, segment: OptimizerSegment) -> LifetimeModel:
    """``model`` (a step's, ending with its outputs held and gradients retained) followed by the
    optimizer's step and ``zero_grad(set_to_none=True)`` (pure: ``model`` is not changed).

    The step's outputs die at its last event (the caller drops them before stepping the optimizer);
    what else survives the step stays alive through the segment; the gradients (``retained``)
    die at ``zero_grad``, so the step's residual is what the optimizer leaves (nothing, in the
    steady state) plus anything the step kept that is not a gradient."""
    end = len(model.events) - 1
    storages = [dataclasses.replace(s) for s in model.storages]
    for s in storages:
        if s.death is None and s.role == "output":
            s.death = end
    offset = len(model.events)
    appended = [dataclasses.replace(s, sid=len(storages) + i, birth=s.birth + offset,
                                    death=None if s.death is None else s.death + offset,
                                    last_use=None if s.last_use is None else s.last_use + offset)
                for i, s in enumerate(segment.storages)]
    held = sum(s.nbytes for s in storages if s.death is None and s.role != "caller")
    events = [*model.events, *segment.events, ZERO_GRAD_EVENT]
    zero_grad = len(events) - 1
    for s in storages:
        if s.death is None and s.role == "retained":
            s.death = zero_grad
    live = [*model.live_bytes, *(held + b for b in segment.live_bytes), held + segment.residual_bytes]
    work = set(model.work_events) | {i + offset for i in segment.work_events}
    return LifetimeModel(events, live, [*storages, *appended], work, list(model.findings))
