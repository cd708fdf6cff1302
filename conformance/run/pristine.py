"""Every pair starts from the same process state, whatever ran before it in the worker.

A backend's ``compile`` can leave the process changed -- a ``torch._dynamo.config`` patch never
undone, grad mode off, the default dtype float64, an environment variable, the working
directory -- and the next pair, on another backend, would be judged in that state and blamed
for what it does there.  :func:`snapshot` takes what torch and the harness keep per process
before a pair; :func:`diff` names what the pair changed; :func:`restore` puts it back and says
what it could not (the worker is then recycled).  The pair that changed the state gets a note
naming it (:func:`note`): its backend is at fault, not the next one.

torch's global decomposition tables (``torch._decomp.global_decomposition_table``, whose ``post_autograd`` table
is ``torch._decomp.decomposition_table``, and inductor's) are compared entry by entry and put back in place:
``import openvino.torch`` registers its own ``convolution_backward`` there, and every backend that asks torch for
decompositions afterwards would get it.  What ``torch.library`` registered (an operator defined, a kernel given
for a dispatch key) and the libraries ``torch.ops.load_library`` loaded cannot be taken back by anyone but their
owner: the pair is named and the worker recycled.

RNG states are restored after every pair but never noted: every pair draws from them.  Dynamo's
caches are emptied by ``torch._dynamo.reset()`` after every pair (``run_case``), as PyTorch's own
``torch._dynamo.test_case.TestCase`` does between tests; its and inductor's config are restored
key by key, as ``config.patch`` does on exit.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

#: The values a note shows are clipped to this many characters.
VALUE_CHARS = 60


@dataclass(frozen=True)
class Change:
    """One piece of state a pair left changed: its name and the values before and after."""

    name: str
    before: Any
    after: Any

    def describe(self) -> str:
        return f"{self.name} ({_show(self.before)} -> {_show(self.after)})"


@dataclass(frozen=True)
class Snapshot:
    """What torch and the harness keep per process, as a pair found it."""

    scalars: dict[str, Any]  # name -> value, each restorable through _SETTERS
    dynamo_config: dict[str, Any]
    inductor_config: dict[str, Any]
    environ: dict[str, str]
    cwd: str | None
    sys_path: tuple[str, ...]
    rng: dict[str, Any] = field(default_factory=dict, compare=False)
    #: torch's global decomposition tables as the pair found them (name -> a copy of the table's entries)
    tables: dict[str, dict[Any, Any]] = field(default_factory=dict, compare=False)
    #: the operators and kernels registered through ``torch.library`` and the libraries ``torch.ops`` loaded
    registrations: frozenset[str] = frozenset()


_MISSING = object()

#: Environment variables torch itself sets on first use (inductor's cache directory, the pointer its
#: C++ wrappers read, the CUDA and Triton toolchain paths): one that was unset and is set after a
#: pair is torch's own initialisation, kept for every later pair, not a change to undo.
TORCH_OWN_ENV = frozenset({
    "TORCHINDUCTOR_CACHE_DIR", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "KMP_DUPLICATE_LIB_OK", "CUDA_HOME",
    "CUBLAS_WORKSPACE_CONFIG", "TRITON_CACHE_DIR", "TRITON_PTXAS_PATH", "TRITON_LIBDEVICE_PATH", "TORCH_WARM_POOL",
    "CPLUS_INCLUDE_PATH",
})


def _default_device() -> str:
    get = getattr(torch, "get_default_device", None)
    return str(get()) if get is not None else "cpu"


def _deterministic() -> tuple[bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


def _set_deterministic(value: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


def _set_grad(value: bool) -> None:
    torch.set_grad_enabled(value)


def _set_inference_mode(value: bool) -> None:
    # left on only by a context manager entered and never exited: no setter undoes that
    raise RuntimeError("inference mode is entered by a context manager; it cannot be set back")


def _set_cudnn(name: str) -> Any:
    def setter(value: Any) -> None:
        setattr(torch.backends.cudnn, name, value)
    return setter


def _set_interop_threads(value: int) -> None:
    torch.set_num_interop_threads(value)  # refused once parallel work started: the worker is recycled


#: scalar state: name -> (getter, setter)
_SCALARS: dict[str, tuple[Any, Any]] = {
    "torch default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "torch default device": (_default_device, lambda v: torch.set_default_device(None if v == "cpu" else v)),
    "torch grad mode": (torch.is_grad_enabled, _set_grad),
    "torch inference mode": (torch.is_inference_mode_enabled, _set_inference_mode),
    "torch deterministic algorithms": (_deterministic, _set_deterministic),
    "torch float32 matmul precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    "torch.backends.cudnn.deterministic": (lambda: torch.backends.cudnn.deterministic, _set_cudnn("deterministic")),
    "torch.backends.cudnn.benchmark": (lambda: torch.backends.cudnn.benchmark, _set_cudnn("benchmark")),
    "torch threads": (torch.get_num_threads, torch.set_num_threads),
    "torch interop threads": (torch.get_num_interop_threads, _set_interop_threads),
}


def _config(module_name: str) -> Any | None:
    """``torch._dynamo.config`` or ``torch._inductor.config``, if this process imported it (a pair that
    never touched it cannot have changed it: it is not imported on purpose)."""
    return sys.modules.get(module_name)


_CONFIGS = ("torch._dynamo.config", "torch._inductor.config")


def _config_copy(module_name: str) -> dict[str, Any]:
    config = _config(module_name)
    if config is None:
        return {}
    return dict(config.get_config_copy())


def _tables() -> dict[str, dict[Any, Any]]:
    """torch's global decomposition tables, live (the dicts every reader shares), by name: ``torch._decomp``'s
    (``decomposition_table`` is its ``post_autograd`` one, which ``get_decompositions`` and the core ATen table
    read when a backend asks for them) and inductor's, where imported."""
    tables: dict[str, dict[Any, Any]] = {}
    decomp = sys.modules.get("torch._decomp")
    for scope, table in (getattr(decomp, "global_decomposition_table", None) or {}).items():
        tables[f"torch._decomp.global_decomposition_table[{scope!r}]"] = table
    inductor = sys.modules.get("torch._inductor.decomposition")
    if isinstance(getattr(inductor, "decompositions", None), dict):
        tables["torch._inductor.decomposition.decompositions"] = inductor.decompositions  # type: ignore[union-attr]
    return tables


#: who made each ``torch.library`` registration made since :func:`watch_registrations` (``_defs``/``_impls``
#: entry -> the module that asked): torch registers operators of its own on first use (inductor's ``prims`` and
#: ``cplib`` ops when it compiles), which are its first-use setting, not a backend's change
_OWNERS: dict[str, str] = {}
#: the modules whose frames are ``torch.library``'s machinery, never the owner of a registration
_MACHINERY = ("torch.library", "torch._library", "torch._ops", "functools", "contextlib", __name__)


def _owner() -> str:
    """The module that asked for the registration being made: the innermost frame outside the machinery."""
    frame = sys._getframe(2)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", "?"))
        if not any(module == m or module.startswith(m + ".") for m in _MACHINERY):
            return module
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


def watch_registrations() -> None:
    """Note the owner of every registration ``torch.library.Library`` makes from now on (once per process)."""
    library = sys.modules.get("torch.library")
    cls = getattr(library, "Library", None)
    if cls is None or getattr(cls, "_conformance_watched", False):
        return
    for method in ("define", "impl", "fallback", "_impl_with_aoti_compile"):
        shipped = getattr(cls, method, None)
        if shipped is not None:
            setattr(cls, method, _watched(shipped, library))
    cls._conformance_watched = True


def _watched(shipped: Any, library: Any) -> Any:
    import functools

    @functools.wraps(shipped)
    def registering(*args: Any, **kwargs: Any) -> Any:
        owner = _owner()
        before = set(library._defs) | set(library._impls)
        try:
            return shipped(*args, **kwargs)
        finally:
            for made in (set(library._defs) | set(library._impls)) - before:
                _OWNERS.setdefault(made, owner)

    return registering


def _registrations() -> frozenset[str]:
    """What ``torch.library`` registered (operators defined, kernels given for a dispatch key, as ``ns/op/Key``)
    and the shared libraries ``torch.ops.load_library`` loaded, less what torch's own code registered on first
    use: none of it can be taken back by anyone but its owner."""
    library = sys.modules.get("torch.library")
    made = set(getattr(library, "_defs", ())) | set(getattr(library, "_impls", ()))
    return frozenset(made | {f"library {path}" for path in getattr(torch.ops, "loaded_libraries", ())})


def _registered(before: frozenset[str], after: frozenset[str]) -> list[str]:
    """What was registered between two snapshots, less what torch's own code registered (by its owner)."""
    made = [r for r in after - before if not _torch_owned(_OWNERS.get(r, "?"))]
    return sorted(r if r.startswith("library ") else f"{r} by {_OWNERS.get(r, '?')}" for r in made)


def _torch_owned(module: str) -> bool:
    return module == "torch" or module.startswith("torch.")


def snapshot() -> Snapshot:
    """The process state a pair starts from."""
    watch_registrations()
    rng: dict[str, Any] = {"torch": torch.get_rng_state(), "random": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        rng["numpy"] = numpy.random.get_state()
    try:
        cwd: str | None = os.getcwd()
    except OSError:  # removed under us
        cwd = None
    return Snapshot(
        scalars={name: get() for name, (get, _) in _SCALARS.items()},
        dynamo_config=_config_copy(_CONFIGS[0]),
        inductor_config=_config_copy(_CONFIGS[1]),
        environ=dict(os.environ),
        cwd=cwd,
        sys_path=tuple(sys.path),
        rng=rng,
        tables={name: dict(table) for name, table in _tables().items()},
        registrations=_registrations(),
    )


def _differ(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except Exception:  # a value whose comparison raises (a tensor): compare by identity
        return a is not b


def diff(before: Snapshot, after: Snapshot) -> list[Change]:
    """What changed from ``before`` to ``after``, each named; RNG states left out (every pair draws)."""
    changes = [Change(name, value, after.scalars.get(name)) for name, value in before.scalars.items()
               if _differ(value, after.scalars.get(name))]
    for module_name, old, new in ((_CONFIGS[0], before.dynamo_config, after.dynamo_config),
                                  (_CONFIGS[1], before.inductor_config, after.inductor_config)):
        if not old:  # imported during the pair: its defaults are what it holds
            continue
        for key in sorted(old.keys() | new.keys()):
            if _differ(old.get(key, _MISSING), new.get(key, _MISSING)):
                changes.append(Change(f"{module_name}.{key}", old.get(key, _MISSING), new.get(key, _MISSING)))
    for key in sorted(before.environ.keys() | after.environ.keys()):
        if key in TORCH_OWN_ENV and key not in before.environ:
            continue  # torch's own first-use setting
        if before.environ.get(key) != after.environ.get(key):
            changes.append(Change(f"environment variable {key}", before.environ.get(key, _MISSING),
                                  after.environ.get(key, _MISSING)))
    if before.cwd != after.cwd:
        changes.append(Change("working directory", before.cwd, after.cwd))
    if _without_installed(after.sys_path, before.sys_path) != before.sys_path:
        changes.append(Change("sys.path", _path_delta(before.sys_path, after.sys_path), "changed"))
    changes.extend(_table_changes(before.tables, after.tables))
    changes.extend(Change(f"{REGISTERED} {what}", _MISSING, "registered")
                   for what in _registered(before.registrations, after.registrations))
    return changes


#: a change's name for what the dispatcher was given (a ``torch.library`` registration): no one but the library
#: that made it can take it back, so the worker is recycled
REGISTERED = "torch.library registration:"


def _table_changes(before: dict[str, dict[Any, Any]], after: dict[str, dict[Any, Any]]) -> list[Change]:
    """Entries of a decomposition table a pair added, removed or replaced.  An entry added by torch's own code
    (a torch module imported for the first time registers its decompositions) is torch's first-use setting,
    kept as :data:`TORCH_OWN_ENV`'s variables are; one replaced or removed is always a change."""
    changes = []
    for name, old in before.items():
        new = after.get(name, {})
        if len(old) == len(new) and all(a is c and b is d for (a, b), (c, d) in zip(old.items(), new.items())):
            continue  # the same entries in the same order (the usual pair): no op hashed
        changed = [op for op in old.keys() | new.keys() if old.get(op, _MISSING) is not new.get(op, _MISSING)]
        for op in sorted(changed, key=str):  # only the changed ones named (an op's str costs)
            was, now = old.get(op, _MISSING), new.get(op, _MISSING)
            if was is _MISSING and _torch_own(now):
                continue
            changes.append(Change(f"{name}[{op}]", _named(was), _named(now)))
    return changes


def _torch_own(function: Any) -> bool:
    return _torch_owned(getattr(function, "__module__", None) or "")


def _named(function: Any) -> Any:
    """A table entry as a note shows it: its function's module and name (a function's repr holds its address)."""
    if function is _MISSING:
        return _MISSING
    name = getattr(function, "__qualname__", None) or type(function).__name__
    return _Shown(f"{getattr(function, '__module__', None) or '?'}.{name}")


@dataclass(frozen=True)
class _Shown:
    """A value as a note shows it (its ``repr`` is the text)."""

    text: str

    def __repr__(self) -> str:
        return self.text


def _installed(path: str) -> bool:
    """A directory of the interpreter's own installation (an import of an installed package adds some)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _without_installed(after: tuple[str, ...], before: tuple[str, ...]) -> tuple[str, ...]:
    """``after`` less the installation's own directories the pair's imports added."""
    return tuple(p for p in after if p in before or not _installed(p))


def _path_delta(before: tuple[str, ...], after: tuple[str, ...]) -> str:
    added = [p for p in after if p not in before]
    removed = [p for p in before if p not in after]
    parts = [f"+{p}" for p in added] + [f"-{p}" for p in removed]
    return ", ".join(parts) or "reordered"


def restore(before: Snapshot, changes: list[Change]) -> list[Change]:
    """Put back what ``changes`` names, and every RNG state; returns the changes that could not be undone."""
    failed: list[Change] = []
    for change in changes:
        try:
            _restore_one(before, change)
        except Exception:
            failed.append(change)
    _restore_rng(before.rng)
    return failed


def _restore_one(before: Snapshot, change: Change) -> None:
    name = change.name
    if name in _SCALARS:
        _SCALARS[name][1](before.scalars[name])
        if _differ(_SCALARS[name][0](), before.scalars[name]):
            raise RuntimeError(f"{name} did not take its value back")
        return
    for module_name in _CONFIGS:
        if name.startswith(module_name + "."):
            key = name[len(module_name) + 1:]
            config = _config(module_name)
            if config is None or change.before is _MISSING:
                raise RuntimeError(f"{name} cannot be set back")
            setattr(config, key, change.before)
            return
    if name.startswith("environment variable "):
        key = name[len("environment variable "):]
        if change.before is _MISSING:
            os.environ.pop(key, None)
        else:
            os.environ[key] = change.before
        return
    if name == "working directory":
        if before.cwd is None:
            raise RuntimeError("the working directory was gone before the pair")
        os.chdir(before.cwd)
        return
    if name == "sys.path":  # the installation's own directories an import added are kept
        added = [p for p in sys.path if p not in before.sys_path and _installed(p)]
        sys.path[:] = [*before.sys_path, *added]
        return
    table = next((t for t in before.tables if name.startswith(t + "[")), None)
    if table is not None:  # in place: every reader holds the same dict; torch's own first-use entries are kept
        live = _tables()[table]
        own = {op: fn for op, fn in live.items() if op not in before.tables[table] and _torch_own(fn)}
        live.clear()
        live.update({**before.tables[table], **own})
        return
    raise RuntimeError(f"no way to restore {name}")  # a torch.library registration among them


def _restore_rng(rng: dict[str, Any]) -> None:
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    if "random" in rng:
        random.setstate(rng["random"])
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy" in rng:
        numpy.random.set_state(rng["numpy"])


def note(changes: list[Change], failed: list[Change], recycled: bool) -> str | None:
    """The note for the pair that left the state changed; None when it left nothing changed."""
    if not changes:
        return None
    restored = [c for c in changes if c not in failed]
    parts = []
    if restored:
        parts.append(f"left global state changed: {'; '.join(c.describe() for c in restored)}; restored")
    if failed:
        what = "the worker was recycled" if recycled else "later pairs in this process may be affected"
        parts.append(f"left global state changed that cannot be restored: "
                     f"{'; '.join(c.describe() for c in failed)}; {what}")
    return ". ".join(parts)


def _show(value: Any) -> str:
    if value is _MISSING:
        return "unset"
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."
