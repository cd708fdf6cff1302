"""Who still holds a storage: the live tensors on a measured allocation's pointer, and what refers to them.

An allocation the probe saw stay alive is identified by its own address, not by its size: after the
probed calls, the tensors whose storage starts at that address are found among the collector's
objects, and each is named by what holds it (``tests.planted_backends.LOSS_LOG[2]``,
``SomeStep.cache['x']``, a frame's local).  Blame then names the storage that stayed alive, even
where the model has a storage of the same size it could be mistaken for.  Run only when a memory
check has something to blame: a scan of every object costs tens of milliseconds.
"""

from __future__ import annotations

import gc
import sys
import types
import warnings
from typing import Any

import torch

#: holder names kept per pointer (the first found; a tensor in a long list is one holder)
LIMIT = 3


def holders(ptrs: dict[int, int]) -> dict[int, list[str]]:
    """``ptr`` -> names of what holds a live tensor whose storage starts at ``ptr`` and has the allocation's
    size (``ptrs``: pointer -> bytes; a storage of another size there is another allocation)."""
    ptrs = {p: n for p, n in ptrs.items() if p}
    if not ptrs:
        return {}
    gc.collect()
    with warnings.catch_warnings():  # isinstance on a deprecated module attribute warns
        warnings.simplefilter("ignore")
        tensors = _tensors_on(ptrs)
    found: dict[int, list[str]] = {}
    mine = {id(tensors), *(id(ts) for ts in tensors.values())}
    modules: dict[int, str] = {}
    for name, m in list(sys.modules.items()):
        if isinstance(m, types.ModuleType):
            modules.setdefault(id(m.__dict__), name)  # ``__main__`` before its ``__mp_main__`` alias
    for ptr, ts in tensors.items():
        names: list[str] = []
        for t in ts:
            for name in _names(t, mine | {id(ts)}, modules):
                if name not in names:
                    names.append(name)
        shape = f"{str(ts[0].dtype).removeprefix('torch.')}{list(ts[0].shape)}"
        found[ptr] = [f"{n} ({shape})" for n in names[:LIMIT]] or [f"an unnamed reference to a tensor ({shape})"]
    return found


def _tensors_on(ptrs: dict[int, int]) -> dict[int, list[torch.Tensor]]:
    tensors: dict[int, list[torch.Tensor]] = {}
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, torch.Tensor) or obj.is_meta:
                continue
            storage = obj.untyped_storage()
            ptr = storage.data_ptr()
            if ptrs.get(ptr) != storage.nbytes():
                continue
        except Exception:  # a tensor subclass or a half-built object: not the storage sought
            continue
        if ptr in ptrs:
            tensors.setdefault(ptr, []).append(obj)
    return tensors


def _names(t: torch.Tensor, skip: set[int], modules: dict[int, str]) -> list[str]:
    """What refers to ``t``, named from the nearest module, object or frame (two levels up)."""
    out: list[str] = []
    for ref in gc.get_referrers(t):
        if id(ref) in skip or (isinstance(ref, types.FrameType) and ref.f_code.co_name in ("holders", "_names")):
            continue
        if isinstance(ref, dict) and (attr := _attribute_of(ref, t, modules)) is not None:
            out.append(attr)
            continue
        if isinstance(ref, types.FrameType):
            local = next((k for k, v in ref.f_locals.items() if v is t), "?")
            out.append(f"local {local!r} of {ref.f_code.co_name}()")
            continue
        if not isinstance(ref, (list, tuple, dict)):  # an object holding it as an attribute
            attr = next((k for k, v in getattr(ref, "__dict__", {}).items() if v is t), None)
            if attr is not None:
                owners = _owner(ref, skip, modules)
                out.extend([f"{o}.{attr}" for o in owners if not o.startswith("a ")]
                           or [f"{type(ref).__name__}.{attr}"])
            continue
        key = _key_in(ref, t)
        for name in _owner(ref, skip, modules):
            out.append(f"{name}{key}")
    return out


def _attribute_of(namespace: dict[Any, Any], value: Any, modules: dict[int, str]) -> str | None:
    """``module.name`` or ``Type.name`` where ``namespace`` is a module's or an object's ``__dict__``."""
    key = next((k for k, v in namespace.items() if v is value), None)
    if key is None:
        return None
    if id(namespace) in modules:
        return f"{modules[id(namespace)]}.{key}"
    owner = next((o for o in gc.get_referrers(namespace) if getattr(o, "__dict__", None) is namespace), None)
    return f"{type(owner).__name__}.{key}" if owner is not None else None


def _key_in(container: Any, t: torch.Tensor) -> str:
    if isinstance(container, (list, tuple)):
        index = next((i for i, v in enumerate(container) if v is t), None)
        return f"[{index}]" if index is not None else ""
    if isinstance(container, dict):
        key = next((k for k, v in container.items() if v is t), None)
        return f"[{key!r}]" if key is not None else ""
    return ""


def _owner(container: Any, skip: set[int], modules: dict[int, str]) -> list[str]:
    """Names of a container: a module global, an object's attribute, or its type where nothing names it."""
    names = []
    for ref in gc.get_referrers(container):
        if id(ref) in skip or not isinstance(ref, dict):
            continue
        attr = _attribute_of(ref, container, modules)
        if attr is not None:
            names.append(attr)
    if not names:
        names.append(f"a {type(container).__name__}")
    return names
