"""The workspace meter: what a kernel allocates beyond its outputs, measured on stand-ins.

Some kernels' workspace is decided by the library they call, not by anything a table can
write from the shapes: LAPACK routines are asked (``lwork = -1``) how much scratch they want,
and OpenBLAS and MKL answer from their own blocking.  Others allocate through the sub-ops they
dispatch inside themselves (argument checks read back as scalars, counts, sorted copies), a
sequence each release's source decides.  For those
(:data:`conformance.models.transients.LAPACK_QUERIED`, ``SUB_OP_KERNELS``) the model's entry is this measurement:
the kernel run once per layout (shapes, strides, dtypes, flags) on stand-in operands, in a
thread of its own and through the profiler, so that a probe window open on the caller's thread
records none of it (the native observer keeps one recording for the process, the profiler's
memory events are the enabling thread's) and the caller's random number generators are not
touched.  A kernel that refuses the stand-ins is the harness's gap, said as one
(``KernelNotModelled``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import torch

from conformance.models.transients import LAPACK_QUERIED, KernelNotModelled, register_workspace_meter
from conformance.probes.cpu import CpuAllocatorProbe

Layout = tuple[Any, ...]


def _layout(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(int(d) for d in value.shape), tuple(int(s) for s in value.stride()), value.dtype,
                value.is_conj(), value.is_neg())  # a lazy conjugate or negation: what the kernel materialises
    if isinstance(value, (list, tuple)):
        return tuple(_layout(v) for v in value)
    return value  # a flag, a mode string, a number: passed as it is (and hashable, for the cache)


def _stand_in(layout: Any, generator: torch.Generator, lapack: bool) -> Any:
    """A CPU tensor of the layout.  For a LAPACK kernel: floating values from a private generator, integers
    as pivots (1..n along the last dimension, no interchange: a valid pivot vector for any factor).  For
    the others: positive floats increasing along the last dimension (valid probabilities, deviations, bin
    edges and sorted sequences), integers 0 (a valid index into any non-empty dimension)."""
    if isinstance(layout, tuple) and not (layout and layout[0] == "tensor"):
        return [_stand_in(item, generator, lapack) for item in layout]
    if not isinstance(layout, tuple):
        return layout
    _, shape, stride, dtype, conj, neg = layout
    out = _dense_stand_in(shape, stride, dtype, generator, lapack)
    out = out.conj() if conj else out
    return torch._neg_view(out) if neg else out


def _dense_stand_in(shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator,
                    lapack: bool) -> torch.Tensor:
    out = torch.empty_strided(shape, stride, dtype=dtype)
    if out.numel() == 0:
        return out
    if (dtype.is_floating_point or dtype.is_complex) and lapack:
        dense = torch.randn(shape, generator=generator, dtype=dtype)
    elif dtype.is_floating_point:
        dense = torch.rand(shape, generator=generator, dtype=torch.float64).add_(0.5)
        dense = (dense.cumsum(-1) if dense.dim() else dense).to(dtype)
    elif dtype.is_complex:
        dense = torch.randn(shape, generator=generator, dtype=dtype)
    elif dtype == torch.bool or not lapack:
        dense = torch.zeros(shape, dtype=dtype)
    else:
        dense = torch.arange(1, shape[-1] + 1, dtype=dtype).expand(shape) if shape else torch.ones((), dtype=dtype)
    return out.copy_(dense) if all(s != 0 for s in stride) or out.dim() == 0 else dense.as_strided(shape, stride)


def _bytes_of(out: Any, operands: Any = ()) -> int:
    """The bytes of ``out``'s storages the call made: an in-place kernel's result is its operand, made before."""
    given = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_flatten(operands)[0]
             if isinstance(t, torch.Tensor) and t.layout == torch.strided}
    storages = {}
    for t in torch.utils._pytree.tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.layout == torch.strided:
            storage = t.untyped_storage()
            if storage.data_ptr() not in given:
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def _in_own_thread(target: torch._ops.OpOverload, make_call: Callable[[], tuple[list[Any], dict[str, Any]]],
                   what: str) -> int:
    """Peak bytes of one call of ``target`` beyond the outputs it made, measured in a thread of its own on
    the operands ``make_call`` makes there (the caller's probe window, modes and generators see nothing)."""
    result: dict[str, Any] = {}

    def measure() -> None:
        try:
            args, kwargs = make_call()
            with torch.no_grad(), CpuAllocatorProbe(recorder="profiler") as probe:
                out = target(*args, **kwargs)
            result["bytes"] = max(0, probe.trace.peak_bytes - _bytes_of(out, (args, kwargs)))
        except Exception as exc:  # the kernel refused the operands, or no probe could record here
            result["error"] = exc

    worker = threading.Thread(target=measure, name="conformance-workspace-meter")
    worker.start()
    worker.join()
    if "error" in result:
        raise KernelNotModelled(f"{target}: its workspace could not be measured on {what}: "
                                f"{type(result['error']).__name__}: {result['error']}")
    return int(result["bytes"])


@lru_cache(maxsize=4096)
def _measured(target: torch._ops.OpOverload, layouts: tuple[Any, ...]) -> int:
    def stand_ins() -> tuple[list[Any], dict[str, Any]]:
        generator = torch.Generator().manual_seed(0)
        lapack = target.overloadpacket.__name__ in LAPACK_QUERIED
        operands = [_stand_in(layout, generator, lapack) for layout in layouts]
        args, kwargs = [], {}
        for argument, value in zip(target._schema.arguments, operands):
            if argument.kwarg_only:
                kwargs[argument.name] = value
            else:
                args.append(value)
        if any(a.name == "generator" and a.kwarg_only for a in target._schema.arguments):
            kwargs["generator"] = torch.Generator().manual_seed(0)  # the caller's generator stays as it was
        return args, kwargs

    return _in_own_thread(target, stand_ins, "stand-ins")


def _same_layout_copy(value: Any) -> Any:
    """``value`` with each tensor's whole storage copied and the same view taken of the copy (sizes, strides,
    offset: a kernel's temporaries follow the layout), detached; anything else as it is."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_meta:
        return value
    storage = value.untyped_storage()
    copy = torch.empty(0, dtype=value.dtype, device=value.device)
    copy.set_(storage.clone() if storage.nbytes() else storage, value.storage_offset(), value.shape, value.stride())
    return copy


def measure_on_values(target: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    """Bytes ``target`` allocates beyond its outputs when it runs on these very values, measured on copies
    of them (an in-place kernel writes its copy): for a kernel whose temporaries follow the values
    (:data:`conformance.models.transients.VALUE_DEPENDENT_KERNELS`), measured once per call."""
    def copies() -> tuple[list[Any], dict[str, Any]]:
        with torch.no_grad():
            copied: tuple[list[Any], dict[str, Any]] = torch.utils._pytree.tree_map(
                _same_layout_copy, (list(args), dict(kwargs)))
        return copied

    return _in_own_thread(target, copies, "the call's values")


def measure_workspace(target: torch._ops.OpOverload, operands: Sequence[Any], out: Any) -> int:
    """Bytes ``target`` allocates beyond its outputs on operands laid out as ``operands`` (cached per layout)."""
    return _measured(target, tuple(_layout(v) for v in operands))


register_workspace_meter(measure_workspace)
