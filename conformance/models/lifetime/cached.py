"""Lifetime models kept in the run's result cache (:mod:`conformance.util.result_cache`), keyed by their graphs.

A model is a pure function of its graphs (every node, its target, arguments and metadata: the fake
values' dtypes, shapes, strides and storages), a generated program's text, the observation (loop
trip counts, symbolic sizes), the options it was asked for, the CPU and torch it runs on, and the
models' own code (:func:`~conformance.util.result_cache.source_digest` of ``conformance/models``).
All of that is the key: :func:`graph_digest` reads every node and every metadata entry but the
ones that name where the code came from (stack traces, module paths), so two graphs that differ in
anything a model may read never share an entry.

A model is stored as JSON (:func:`encode_model`): its events, live bytes and storages, and the
program's findings (dataclasses of :mod:`conformance.models`, whose references to storages and to
each other are stored by index).  A model holding anything else is not stored: it is made every time.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from conformance.models.lifetime.model import LifetimeModel, Observation, Storage
from conformance.util import result_cache
from conformance.util.result_cache import ResultCache

#: bumped when the JSON a model is stored as changes shape
CODEC = 1
#: the code a model's value depends on (the models package, and what it imports)
MODEL_SOURCES = ("conformance.models",)
#: node metadata that says where a node came from, not what it computes (no model reads it)
_PROVENANCE = frozenset({"stack_trace", "source_fn_stack", "nn_module_stack", "fwd_nn_module_stack",
                         "fwd_source_fn_stack", "from_node", "seq_nr", "original_aten", "torch_fn", "source_fn",
                         "partitioner_tag", "custom", "autograd_backward_hooks"})
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


class NotCachable(ValueError):
    """A model (or a key's part) this codec cannot write down exactly: it is made every time instead."""


# --------------------------------------------------------------------------- keys


def graph_digest(*gms: torch.fx.GraphModule | None) -> str:
    """A digest of everything a model may read of the graphs ``gms`` and their subgraphs (``while_loop``
    bodies), which storages their fake values share included (across the graphs too)."""
    storages: dict[int, int] = {}
    parts: list[Any] = []
    for gm in gms:
        parts.append(("module", None if gm is None else _describe(getattr(gm, "meta", {}), storages)))
        for name, module in gm.named_modules() if gm is not None else ():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            parts.append(("graph", name))
            for node in module.graph.nodes:
                meta = [[k, _describe(v, storages)] for k, v in sorted(node.meta.items()) if k not in _PROVENANCE]
                parts.append((node.op, node.name, _target(node.target), _describe(node.args, storages),
                              _describe(node.kwargs, storages), meta))
                if node.op == "get_attr":
                    parts.append(_describe(getattr(module, str(node.target), None), storages))
    return result_cache.digest(parts)


def observation_parts(observation: Observation | None) -> Any:
    """What a model reads of an observation: loop trip counts and the symbolic sizes' values."""
    if observation is None:
        return None
    return [list(observation.trip_counts), sorted((str(k), int(v)) for k, v in observation.sizes.items())]


def _target(target: Any) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
        return f"{type(target).__name__}:{target}"
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}"


def _describe(value: Any, storages: dict[int, int]) -> Any:
    """``value`` as JSON-able text: a tensor (real or fake) by its metadata and which storage it shares."""
    if isinstance(value, torch.fx.Node):
        return ["node", value.name]
    if isinstance(value, torch.Tensor):
        try:
            storage = value.untyped_storage()
            ident = storages.setdefault(storage._cdata, len(storages))
            nbytes = str(storage.nbytes())
        except (RuntimeError, NotImplementedError, TypeError):
            ident, nbytes = -1, ""
        return ["tensor", str(value.dtype), str(value.device), str(value.layout), [str(s) for s in value.shape],
                [str(s) for s in value.stride()] if value.layout == torch.strided else [],
                str(value.storage_offset()) if value.layout == torch.strided else "", nbytes, ident,
                bool(value.requires_grad)]
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ["sym", str(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_describe(v, storages) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[_describe(k, storages), _describe(v, storages)] for k, v in value.items()]]
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__qualname__, [[f.name, _describe(getattr(value, f.name), storages)]
                                           for f in dataclasses.fields(value)]]
    # anything else by its type and text, addresses taken out (an object's text that changes from run to run
    # is a miss, never a wrong hit)
    return [f"{type(value).__module__}.{type(value).__qualname__}", _ADDRESS.sub("", repr(value))]


def model_key(kind: str, *parts: Any) -> str:
    """The key of a model of ``kind`` made from ``parts`` (graph digests, options), on this machine and torch."""
    return result_cache.digest(kind, CODEC, parts, result_cache.machine(), torch.get_num_threads(),
                               result_cache.source_digest(*MODEL_SOURCES))


# --------------------------------------------------------------------------- the cache


def cached(kind: str | None, key_parts: Callable[[], Sequence[Any]], build: Callable[[], LifetimeModel]
           ) -> LifetimeModel:
    """``build()``, or the model stored under the key of ``key_parts()`` in the active cache (then stored there)."""
    cache = result_cache.current() if kind is not None else None
    if cache is None or kind is None:
        return build()
    try:
        key = model_key(kind, *key_parts())
    except NotCachable:
        return build()
    body = cache.read(kind, key)
    if body is not None:
        try:
            model = decode_model(json.loads(body))
        except Exception:  # a body this version cannot read: made again (and stored over it)
            cache.rejected(kind)
        else:
            cache.hit(kind)
            return model
    model = build()
    store(cache, kind, key, model)
    return model


def store(cache: ResultCache, kind: str, key: str, model: LifetimeModel, extra: Any = None) -> None:
    """Write ``model`` (and JSON-able ``extra``) under ``key``; a model the codec cannot write is not stored."""
    try:
        body = json.dumps({"codec": CODEC, "model": encode_model(model), "extra": extra}).encode()
    except (NotCachable, TypeError, ValueError):
        return
    cache.write(kind, key, body)


def load(cache: ResultCache, kind: str, key: str) -> tuple[LifetimeModel, Any] | None:
    """The model and ``extra`` stored under ``key``, or ``None`` (a hit or a miss counted)."""
    body = cache.read(kind, key)
    if body is None:
        return None
    try:
        data = json.loads(body)
        model = decode_model(data)
        extra = data["extra"]
    except Exception:
        cache.rejected(kind)
        return None
    cache.hit(kind)
    return model, extra


# --------------------------------------------------------------------------- the codec


def encode_model(model: LifetimeModel) -> dict[str, Any]:
    """``model`` as JSON-able data; raises :class:`NotCachable` for anything it cannot write exactly."""
    storage_index = {id(s): i for i, s in enumerate(model.storages)}
    finding_index = {id(f): i for i, f in enumerate(model.findings)}

    def enc(value: Any, top: bool = False) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, float)) and type(value) in (int, float):
            return value
        if isinstance(value, Storage):
            if id(value) not in storage_index:
                raise NotCachable("a finding refers to a storage outside the model")
            return {"$s": storage_index[id(value)]}
        if not top and id(value) in finding_index:
            return {"$f": finding_index[id(value)]}
        if isinstance(value, list):
            return [enc(v) for v in value]
        if isinstance(value, tuple):
            return {"$t": [enc(v) for v in value]}
        if isinstance(value, (set, frozenset)):
            return {"$set": [enc(v) for v in sorted(value, key=repr)]}
        if isinstance(value, dict):
            return {"$d": [[enc(k), enc(v)] for k, v in value.items()]}
        raise NotCachable(f"cannot store a {type(value).__name__}")

    def enc_finding(f: Any) -> dict[str, Any]:
        cls = type(f)
        if not (dataclasses.is_dataclass(f) and cls.__module__.startswith("conformance.models.")):
            raise NotCachable(f"finding of type {cls.__name__}")
        return {"class": [cls.__module__, cls.__qualname__],
                "fields": {fl.name: enc(getattr(f, fl.name)) for fl in dataclasses.fields(f)}}

    return {
        "events": [enc(e) for e in model.events],
        "live_bytes": [enc(b) for b in model.live_bytes],
        "work_events": sorted(model.work_events),
        "storages": [{fl.name: enc(getattr(s, fl.name)) for fl in dataclasses.fields(Storage)}
                     for s in model.storages],
        "findings": [enc_finding(f) for f in model.findings],
    }


def decode_model(data: dict[str, Any]) -> LifetimeModel:
    """The model :func:`encode_model` wrote (``data``: the stored object, with its codec version)."""
    if data.get("codec") != CODEC:
        raise ValueError(f"stored model codec {data.get('codec')!r}, not {CODEC}")
    m = data["model"]
    names = {fl.name for fl in dataclasses.fields(Storage)}
    raw_storages = m["storages"]
    if any(set(s) != names for s in raw_storages):
        raise ValueError("stored storages do not have this version's fields")
    storages = [Storage.__new__(Storage) for _ in raw_storages]
    findings: list[Any] = []
    for f in m["findings"]:
        module, qualname = f["class"]
        if not module.startswith("conformance.models."):
            raise ValueError(f"finding class from {module}")
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if not dataclasses.is_dataclass(cls) or {fl.name for fl in dataclasses.fields(cls)} != set(f["fields"]):
            raise ValueError(f"stored {qualname} does not have this version's fields")
        made: Any = cls  # a dataclass of the models' own, made empty and filled in below
        findings.append(made.__new__(made))

    def dec(value: Any) -> Any:
        if isinstance(value, list):
            return [dec(v) for v in value]
        if isinstance(value, dict):
            if "$s" in value:
                return storages[value["$s"]]
            if "$f" in value:
                return findings[value["$f"]]
            if "$t" in value:
                return tuple(dec(v) for v in value["$t"])
            if "$set" in value:
                return {dec(v) for v in value["$set"]}
            if "$d" in value:
                return {dec(k): dec(v) for k, v in value["$d"]}
            raise ValueError(f"unknown stored value {sorted(value)}")
        return value

    for s, raw in zip(storages, raw_storages):
        for name, value in raw.items():
            object.__setattr__(s, name, dec(value))
    for obj, f in zip(findings, m["findings"]):
        for name, value in f["fields"].items():
            object.__setattr__(obj, name, dec(value))
    events = [dec(e) for e in m["events"]]
    live = [int(b) for b in m["live_bytes"]]
    if len(events) != len(live):
        raise ValueError("stored events and live bytes differ in length")
    return LifetimeModel(events, live, storages, set(m["work_events"]), findings)


def encode_observation(observation: Observation) -> dict[str, Any]:
    """An observation as JSON; one with symbolic sizes (sympy symbols) is not written (:class:`NotCachable`)."""
    if observation.sizes:
        raise NotCachable("an observation with symbolic sizes")
    return {"trip_counts": [int(t) for t in observation.trip_counts], "call": int(observation.call)}


def decode_observation(data: dict[str, Any]) -> Observation:
    return Observation([int(t) for t in data["trip_counts"]], int(data["call"]))
