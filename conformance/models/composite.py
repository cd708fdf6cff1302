"""The workspace of a composite kernel: an op whose CPU implementation is other ATen ops.

An op registered only as ``CompositeExplicitAutograd`` (or its ``NonFunctional`` form) has no CPU
kernel of its own: its C++ body calls other ops through the dispatcher (``_trilinear``, what
``nn.Bilinear`` runs, loops over the output's features with two ``bmm`` temporaries per
feature).  Those calls are the op's workspace.  Rather than a hand entry per such op, the body is
run once, on tensors of the operands' shapes, strides and dtypes, under a
:class:`~torch.utils._python_dispatch.TorchDispatchMode` that sees every op it calls:

* a storage is born at the op that returns it, unless it is an operand's;
* it dies when no tensor seen for it is alive (weak references, polled at every call and at the
  end): the body's own C++ references decide, as they do in the measured kernel;
* an inner op with workspace of its own adds its table entry at its call.

Only ATen's bodies are run: a user's custom op is the user's code.  The result is in the kernel
transient table's terms: bytes alive inside the op on top of its
outputs (:mod:`conformance.models.transients`).  The body runs on zeros: ops whose work depends on
values (a data-dependent shape) are not composite bodies the table can hold, and say so.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

#: the libraries whose composite bodies are modelled: torch's own
ATEN_NAMESPACES = frozenset({"aten", "prims"})
#: the dispatch keys of a composite body that runs for CPU tensors when no CPU kernel is registered
_COMPOSITE_KEYS = ("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd")


class CompositeNotModelled(NotImplementedError):
    """The body could not be run on stand-in operands (a check on values, a data-dependent shape)."""


def composite_key(target: torch._ops.OpOverload) -> torch._C.DispatchKey | None:
    """The key of ``target``'s composite body, where that body is what a CPU call runs and may allocate:
    an ATen op's only (a user's custom op runs the user's own code, which modelling must not call:
    it may count calls or keep what it is given), and not a view or an in-place op (results
    aliasing an operand), which allocate nothing of their own."""
    schema = target._schema
    if target.namespace not in ATEN_NAMESPACES:
        return None
    if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
        return None
    name = target.name()
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"):
        return None
    for key in _COMPOSITE_KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return getattr(torch._C.DispatchKey, key)
    return None


@dataclass
class _Live:
    nbytes: int
    refs: list[weakref.ref[torch.Tensor]] = field(default_factory=list)

    def alive(self) -> bool:
        return any(r() is not None for r in self.refs)


class _Body(TorchDispatchMode):
    """Live bytes of the storages the body's calls make, and their peak with each call's own workspace."""

    def __init__(self, operands: set[int], inner_workspace: Callable[[Any, Sequence[Any], Any], int]) -> None:
        super().__init__()
        self.operands = operands
        self.inner_workspace = inner_workspace
        self.live: dict[int, _Live] = {}
        self.peak = 0

    def bytes_now(self) -> int:
        for ptr in [p for p, s in self.live.items() if not s.alive()]:
            del self.live[ptr]
        return sum(s.nbytes for s in self.live.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.bytes_now()
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            ptr, nbytes = _storage(t)
            if not nbytes or ptr in self.operands:
                continue
            seen = self.live.get(ptr)
            if seen is None or not seen.alive():
                seen = self.live[ptr] = _Live(nbytes)
            seen.refs.append(weakref.ref(t))
        workspace = (self.inner_workspace(func, schema_operands(func, args, kwargs), out)
                     if isinstance(func, torch._ops.OpOverload) else 0)
        self.peak = max(self.peak, self.bytes_now() + workspace)
        return out


def schema_operands(target: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """A call's operands in ``target``'s schema order, keyword ones included (defaults where absent): the
    form the kernel transient table's entries read."""
    operands = list(args)
    for a in target._schema.arguments[len(operands):]:
        operands.append(kwargs[a.name] if a.name in kwargs
                        else a.default_value if a.has_default_value() else None)
    return operands


def _storage(t: Any) -> tuple[int, int]:
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.layout != torch.strided:
        return 0, 0
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def _stand_in(t: Any) -> Any:
    """A CPU tensor of ``t``'s shape, strides and dtype (zeros), for a fake or real operand."""
    if not isinstance(t, torch.Tensor):
        return t
    size = t.untyped_storage().nbytes() // max(t.element_size(), 1) if not t.is_meta else None
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0) if t.numel() else 0
    elements = max(span + t.storage_offset(), size or 0)
    base = torch.zeros(elements, dtype=t.dtype)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def composite_workspace(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any,
                        inner_workspace: Callable[[Any, Sequence[Any], Any], int]) -> int | None:
    """Bytes ``target``'s composite body holds inside the call on top of its outputs, or None where a CPU
    call of ``target`` does not run a composite body."""
    key = composite_key(target)
    if key is None:
        return None
    outputs = sum(t.numel() * t.element_size() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
    return max(_body_peak(target, key, tuple(operands), inner_workspace) - outputs, 0)


def _body_peak(target: torch._ops.OpOverload, key: torch._C.DispatchKey, operands: tuple[Any, ...],
               inner_workspace: Callable[[Any, Sequence[Any], Any], int]) -> int:
    signature = _signature(operands)
    cached = _PEAKS.get((target, signature))
    if cached is not None:
        return cached
    args = tree_map(_stand_in, list(operands))
    mine = {_storage(t)[0] for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)}
    body = _Body(mine, inner_workspace)
    schema = target._schema.arguments
    positional = [v for a, v in zip(schema, args) if not a.kwarg_only]
    keywords = {a.name: v for a, v in zip(schema, args) if a.kwarg_only}
    try:
        with torch.random.fork_rng(devices=[]), body:  # a random body draws from a copy of the generator
            result = target._op_dk(key, *positional, **keywords)
            del result  # outputs stay counted: the table's entry is on top of them
            peak = body.peak
    except Exception as exc:  # any failure of the body on stand-ins
        raise CompositeNotModelled(f"{target}: its composite body could not run on stand-in operands: "
                                   f"{type(exc).__name__}: {exc}") from exc
    _PEAKS[(target, signature)] = peak
    return peak


_PEAKS: dict[tuple[Any, Any], int] = {}


@functools.singledispatch
def _key_of(value: Any) -> Any:
    return value


@_key_of.register
def _(value: torch.Tensor) -> Any:
    return ("tensor", tuple(value.shape), tuple(value.stride()), value.storage_offset(), value.dtype)


@_key_of.register(list)
@_key_of.register(tuple)
def _(value: Sequence[Any]) -> Any:
    return tuple(_key_of(v) for v in value)


def _signature(operands: tuple[Any, ...]) -> Any:
    return tuple(_key_of(v) for v in operands)
