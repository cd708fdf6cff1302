"""Which model storage a value lives in.

The fake tensors in a graph's ``meta["val"]`` share storages exactly where the real
values would (a view, an in-place result, an output that aliases an input), so a
storage identity (:class:`StorageWeakRef`) names the model storage: a node whose
value's storage is already known makes no new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from conformance.models.lifetime.model import Storage


def flatten(value: Any) -> list[Any]:
    """The leaves of a value nested in lists and tuples (a multi-output op's, a loop's carries); a sparse COO
    tensor is its two dense tensors, indices and values, each in a storage of its own (see :func:`components`)."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flatten(v)]
    if isinstance(value, torch.Tensor) and value.layout == torch.sparse_coo:
        return list(components(value))
    return [value]


def components(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A sparse COO tensor's memory: its indices and its values, two dense tensors it holds (views, no copy:
    ``_sparse_coo_tensor_with_dims_and_tensors`` wraps the ones it is given, so the sparse gradient of an
    ``Embedding(sparse=True)`` lives in the storages of the indices and values its backward computed)."""
    return t._indices(), t._values()


def storages_in(value: Any) -> Iterator[Storage]:
    return (s for s in flatten(value) if isinstance(s, Storage))


def storage_keys(val: Any) -> list[StorageWeakRef | None]:
    """The storage identity of each leaf of a fake value (``None`` where it is not a tensor)."""
    return [StorageWeakRef(t.untyped_storage()) if isinstance(t, torch.Tensor) else None for t in flatten(val)]


@dataclass
class Aliases:
    """The model storage behind each fake storage seen so far in one graph."""

    by_key: dict[StorageWeakRef, Storage] = field(default_factory=dict)

    def bind(self, val: Any, value: Any, replace: bool = True) -> None:
        """Name the storages of ``value`` (model values) by those of ``val`` (its fake value), leaf by leaf.

        Without ``replace`` an identity already named keeps its storage (a loop's result that is
        one of its inputs, carried through unchanged)."""
        for key, s in zip(storage_keys(val), flatten(value)):
            if key is None or not isinstance(s, Storage):
                continue
            if replace:
                self.by_key[key] = s
            else:
                self.by_key.setdefault(key, s)

    def resolve(self, val: Any, allocate: Callable[[torch.Tensor], Storage]) -> Any:
        """The model value of an op's result ``val``: an earlier storage where a leaf aliases one
        (a view or an in-place result), else the one ``allocate`` makes for it."""

        def storage_of(t: Any) -> Any:
            if not isinstance(t, torch.Tensor):
                return None
            if t.layout == torch.sparse_coo:
                return tuple(storage_of(c) for c in components(t))
            key = StorageWeakRef(t.untyped_storage())
            if key not in self.by_key:
                self.by_key[key] = allocate(t)
            return self.by_key[key]

        if isinstance(val, (list, tuple)):
            return tuple(storage_of(t) for t in val)
        return storage_of(val)
