"""What every family of the kernel transient table reads: an operand by its schema name, a node's
values, a tensor's bytes, the layouts kernels copy into, and the kernels the table models."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx

_WRAPPED_DTYPE = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


REDUCED_FLOATS = (torch.bfloat16, torch.float16)


class KernelNotModelled(NotImplementedError):
    """An op whose eager kernel's workspace this table cannot say for these operands."""


@contextlib.contextmanager
def reference_kernels() -> Iterator[None]:
    """Run ops on the kernels this table models: ATen's native CPU convolutions (oneDNN off)."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def _argument(target: torch._ops.OpOverload, operands: Sequence[Any], name: str) -> Any:
    """The operand ``name`` of ``target``'s schema (overloads place it differently)."""
    for i, a in enumerate(target._schema.arguments):
        if a.name == name:
            return operands[i] if i < len(operands) else a.default_value
    raise KeyError(f"{target} has no argument {name!r}")


def _val(arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_val(a) for a in arg)
    return arg


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _dense_copies(layout: torch.memory_format, *tensors: Any) -> int:
    """What ``.contiguous(layout)`` copies of these operands cost."""
    return sum(_nbytes(t) for t in tensors if isinstance(t, torch.Tensor) and not t.is_contiguous(memory_format=layout))


def _flattens_as_view(t: torch.Tensor) -> bool:
    """Whether ``t.reshape(-1)`` is a view: its non-unit dimensions are laid out back to back."""
    dims = [(size, stride) for size, stride in zip(t.shape, t.stride()) if size != 1]
    return all(stride == dims[i + 1][1] * dims[i + 1][0] for i, (_, stride) in enumerate(dims[:-1]))


def _acc_itemsize(x: torch.Tensor) -> int:
    return 4 if x.dtype in REDUCED_FLOATS else x.element_size()


Entry = Callable[[torch._ops.OpOverload, Sequence[Any], Any], int]

