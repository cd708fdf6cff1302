"""Cases: named, seeded, reproducible workloads, and the registry that finds them.

Cases come from three places, loaded the same way in every process of a run (the
controller, pytest-xdist workers, isolated workers): the built-in families
(:mod:`conformance.cases`), installed packages' entry points in the group
``conformance.cases`` (a module whose import registers cases, or a function that does),
and ``--cases MODULE_OR_FILE`` sources, which child processes inherit through the
``CONFORMANCE_CASES`` environment variable.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import importlib.util
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from conformance.util.catalog import could_name_lazy, unknown_case

CaseKind = Literal["inference", "train_step", "loop"]


class GeneratedProgram(Protocol):
    """What a case knows of its generated program (:class:`conformance.cases.generated.Program`).

    A protocol, not the class: the generator lies above this module and registers its cases here.
    """

    @property
    def family(self) -> str: ...

    @property
    def train(self) -> bool: ...

    def to_json(self) -> dict[str, Any]: ...
KINDS: tuple[CaseKind, ...] = ("inference", "train_step", "loop")

#: How a backend that compiles through ``torch.compile`` is asked to compile a case whose shapes
#: change, as users ask: ``default`` (no ``dynamic=``: recompile on the first new shape, then
#: go dynamic automatically), ``dynamic`` (``dynamic=True``) or ``mark_dynamic``
#: (``torch._dynamo.mark_dynamic`` on the changing dimensions of every call's inputs).
CompileMode = Literal["default", "dynamic", "mark_dynamic"]
COMPILE_MODES: tuple[CompileMode, ...] = ("default", "dynamic", "mark_dynamic")


@dataclass
class Workload:
    """What building a case gives: a module and its inputs (and, for a case that trains, its optimizer).

    ``model(*inputs)`` returns the outputs; for a case that trains it returns the
    scalar loss, and the step is forward, loss, backward, ``optimizer.step()`` and
    ``optimizer.zero_grad(set_to_none=True)``.  :meth:`Case.build` makes the optimizer.
    """

    model: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    optimizer: torch.optim.Optimizer | None = None


#: The optimizers a training case can step with, as users make them (torch's defaults otherwise: on the
#: CPU, the per-parameter loop).  Their state is made at the first step, so probed calls see the steady state.
OPTIMIZERS: dict[str, Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]] = {
    "sgd-momentum": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01),
}
#: what a training case steps with unless it names another (``optimizer="none"``: the step stops at backward)
DEFAULT_OPTIMIZER = "sgd-momentum"
NO_OPTIMIZER = "none"


@dataclass(frozen=True)
class ShapeSchedule:
    """A dimension of a case's inputs whose size changes from call to call (a serving batch that
    grows, a sequence length): the harness models every call at its own shapes.

    ``sizes[k]`` is the size at call ``k`` (call 0 is the built workload's); later calls cycle
    through them again, so a run with more steps revisits shapes it has seen, where nothing
    kept per shape may grow any more.  ``dims`` are the (input position, dimension) pairs the
    size applies to: what ``mark_dynamic`` marks."""

    name: str
    sizes: tuple[int, ...]
    dims: tuple[tuple[int, int], ...] = ((0, 0),)
    compile: CompileMode = "default"

    def __post_init__(self) -> None:
        if not self.sizes or any(not isinstance(n, int) or n < 1 for n in self.sizes):
            raise CaseError(f"shape schedule {self.name!r}: sizes must be positive ints, not {self.sizes!r}")
        if self.compile not in COMPILE_MODES:
            raise CaseError(f"shape schedule {self.name!r}: compile must be one of {COMPILE_MODES}")

    def size(self, call: int) -> int:
        return self.sizes[call % len(self.sizes)]


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-4
    atol: float = 1e-5
    rmse_multiple: float = 3.0  # dynamo benchmark harness: backend RMSE <= k * eager-fp32 RMSE


@dataclass(frozen=True)
class Case:
    """A named, seeded workload.  ``build()`` is deterministic for a given ``seed``."""

    id: str
    kind: CaseKind
    family: str
    seed: int
    builder: Callable[[int], Workload] = field(repr=False, compare=False)
    #: whether the step trains (forward, loss, backward); ``None``: as ``kind`` says (``train_step`` trains,
    #: ``inference`` does not); a ``loop`` case says it itself.  A contradiction is refused by :func:`register`.
    trains: bool = None  # type: ignore[assignment]  # resolved from ``kind`` in __post_init__
    requires: frozenset[str] = frozenset()
    tolerance: Tolerance = Tolerance()
    description: str = ""
    #: Fresh inputs for the ``call``-th call of the step (1, 2, ...), from the case's seed; by
    #: default the builder's inputs drawn again with the torch seed of that call (:func:`call_seed`).
    make_inputs: Callable[[int], tuple[torch.Tensor, ...]] | None = field(default=None, repr=False, compare=False)
    #: part of a run that names no ``--case`` (the zoo is not: it is selected by id or glob)
    in_default: bool = True
    #: the optimizer a training step steps with (:data:`OPTIMIZERS`; ``None``: :data:`DEFAULT_OPTIMIZER` for a
    #: case that trains; ``"none"``: the step stops at backward); a case that does not train has none
    optimizer: str | None = None
    #: the optimizer step is compiled with the backend too, as users do with ``torch.compile(opt.step)``
    #: (backends that compile through ``torch.compile`` and name a compiler for it: ``DynamoStep.optimizer_backend``)
    compile_optimizer: bool = False
    #: the generated program a generated case runs (:mod:`conformance.cases.generated`), for
    #: repros, shrinking and scaling; None for a hand-written case
    program: GeneratedProgram | None = field(default=None, repr=False, compare=False)
    #: the dimension whose size changes from call to call (None: every call has call 0's shapes);
    #: ``make_inputs`` draws each call's inputs at ``shapes.size(call)``
    shapes: ShapeSchedule | None = None

    def __post_init__(self) -> None:
        if self.trains is None:
            object.__setattr__(self, "trains", self.kind == "train_step")
        if self.optimizer is None and self.trains:
            object.__setattr__(self, "optimizer", DEFAULT_OPTIMIZER)

    def kind_problem(self) -> str | None:
        """Why ``kind`` and ``trains`` contradict each other, or ``None`` (one source of truth for training)."""
        if self.kind == "train_step" and not self.trains:
            return "kind 'train_step' with trains=False: a train step trains (drop trains=, or use kind 'inference')"
        if self.kind == "inference" and self.trains:
            return "kind 'inference' with trains=True: use kind 'train_step' for a training step"
        if self.optimizer is not None and self.optimizer != NO_OPTIMIZER and not self.trains:
            return f"optimizer {self.optimizer!r} on a case that does not train"
        if self.compile_optimizer and self.optimizer in (None, NO_OPTIMIZER):
            return "compile_optimizer=True with no optimizer to compile"
        if self.optimizer is not None and self.optimizer not in (*OPTIMIZERS, NO_OPTIMIZER):
            return f"unknown optimizer {self.optimizer!r} (known: {', '.join([*OPTIMIZERS, NO_OPTIMIZER])})"
        return None

    def make_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer | None:
        """The case's optimizer over ``model``'s trainable parameters (``None`` when the step has none)."""
        if not self.trains or self.optimizer in (None, NO_OPTIMIZER):
            return None
        params = [p for p in model.parameters() if p.requires_grad]
        return OPTIMIZERS[self.optimizer](params) if params else None

    def build(self, optimizer: bool = True) -> Workload:
        """The case's workload; ``optimizer=False`` leaves out its optimizer, for a caller that needs the model or
        inputs only: the first optimizer a process makes imports ``torch._dynamo`` (about 2 s)."""
        torch.manual_seed(self.seed)
        workload = self.builder(self.seed)
        workload.model.train(self.trains)
        workload.optimizer = self.make_optimizer(workload.model) if optimizer else None
        return workload

    def inputs_for(self, call: int) -> tuple[torch.Tensor, ...]:
        """The inputs of the ``call``-th call (0: the built workload's), the same in every process.

        Every call a step makes gets fresh inputs, so a backend that returns stale results or
        corrupts state between calls cannot pass on the first call's numbers."""
        if call == 0:
            return self.build(optimizer=False).inputs
        with torch.random.fork_rng():
            torch.manual_seed(call_seed(self.seed, call))
            if self.make_inputs is not None:
                return self.make_inputs(call)
            return self.builder(self.seed).inputs


def call_seed(seed: int, call: int) -> int:
    """The torch seed of a case's ``call``-th inputs: distinct per call, stable across processes."""
    return (seed * 1_000_003 + call * 7_919 + 1) % (2**63)


class CaseError(ValueError):
    """Bad case selection or a case that failed to build."""


class CaseIdError(CaseError):
    """A case registered under an id outside :data:`ID_CHARS` or longer than :data:`MAX_ID_LENGTH`."""


_REGISTRY: dict[str, Case] = {}
#: Functions that build a case from an id nobody registered (generated cases: ``gen-dag-1234``).
_RESOLVERS: list[Callable[[str], Case | None]] = []


#: the ``--cases`` source being imported (:func:`load_source`), and the source each case and resolver
#: came from: what a rerun command must load again (:func:`case_sources`)
_LOADING: list[str] = []
_SOURCE_OF: dict[str, str] = {}
_RESOLVER_SOURCE: dict[int, str] = {}
_RESOLVER_IDS: dict[int, str | None] = {}


def resolver_ids() -> list[str | None]:
    """Each resolver's regular expression of the ids it takes (``None``: it declared none)."""
    return [_RESOLVER_IDS.get(id(r)) for r in _RESOLVERS]


def add_resolver(resolver: Callable[[str], Case | None], ids: str | None = None) -> None:
    """Let ids outside the registry resolve (a generated case's id carries its seed).  ``ids``, a regular
    expression of the ids it takes, lets a command refuse any other id before it loads torch
    (:mod:`conformance.util.catalog`); without it, any plain id is left to the resolver."""
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)
        _RESOLVER_IDS[id(resolver)] = ids
        if _LOADING:
            _RESOLVER_SOURCE[id(resolver)] = _LOADING[-1]


def resolve(case_id: str) -> Case | None:
    """A registered case by id, else the first resolver's case for it."""
    all_cases()
    if case_id in _REGISTRY:
        return _REGISTRY[case_id]
    for r in _RESOLVERS:
        case = r(case_id)
        if case is not None:
            if id(r) in _RESOLVER_SOURCE:
                _SOURCE_OF.setdefault(case_id, _RESOLVER_SOURCE[id(r)])
            return case
    return None


def case_sources(case_id: str) -> list[str]:
    """The ``--cases`` sources a run must load for ``case_id`` to resolve (empty: a built-in or installed
    case): the source that registered it (or the resolver that made it), as the run loaded it."""
    source = _SOURCE_OF.get(case_id)
    return [source] if source is not None else []


#: what a case id may hold: it names files (repros), pytest node ids (``case@backend``) and shell words
ID_CHARS = "[A-Za-z0-9][A-Za-z0-9._+=-]*"
_ID = re.compile(ID_CHARS)
MAX_ID_LENGTH = 128


def id_problem(case_id: object) -> str | None:
    """Why ``case_id`` cannot be a case id, or ``None`` when it can."""
    if not isinstance(case_id, str):
        return f"is a {type(case_id).__name__}, not a string"
    if not case_id:
        return "is empty"
    if len(case_id) > MAX_ID_LENGTH:
        return f"has {len(case_id)} characters, more than {MAX_ID_LENGTH}"
    if not _ID.fullmatch(case_id):
        bad = next((c for c in case_id if not re.fullmatch("[A-Za-z0-9._+=-]", c)), None)
        what = f"holds {bad!r}" if bad is not None else f"starts with {case_id[0]!r}"
        return f"{what}; an id is {ID_CHARS} (at most {MAX_ID_LENGTH} characters)"
    return None


def _registrant() -> str:
    """The module that called :func:`register`: a ``--cases`` file by its path, others by their name."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "?"
    name = str(frame.f_globals.get("__name__", "?"))
    file = frame.f_globals.get("__file__")
    if name.startswith(_FILE_MODULE_PREFIX) and file:
        relative = os.path.relpath(file)
        return str(file) if relative.startswith("..") else relative
    return name


def register(case: Case) -> Case:
    """Add ``case`` to the registry; a bad id, a kind or a second case of the same id is a :class:`CaseError`
    (one line naming the module that registered it)."""
    problem = id_problem(case.id)
    if problem is not None:
        shown = repr(case.id)
        shown = shown if len(shown) <= 60 else shown[:59] + "…"
        raise CaseIdError(f"case id {shown} registered by {_registrant()}: {problem}")
    if case.id in _REGISTRY:
        raise CaseError(f"case id {case.id!r} registered twice (again by {_registrant()})")
    if case.kind not in KINDS:
        raise CaseError(f"case {case.id}: unknown kind {case.kind!r}")
    contradiction = case.kind_problem()
    if contradiction is not None:
        raise CaseError(f"case {case.id} registered by {_registrant()}: {contradiction}")
    if case.shapes is not None and "dynamic_shapes" not in case.requires:
        case = dataclasses.replace(case, requires=case.requires | {"dynamic_shapes"})
    _REGISTRY[case.id] = case
    if _LOADING:
        _SOURCE_OF[case.id] = _LOADING[-1]
    return case


ENTRY_POINT_GROUP = "conformance.cases"
#: the built-in families' package, registered under the group like any case package
BUILTIN_CASES = "conformance.cases"
#: ``--cases`` sources of this run, ``os.pathsep``-separated; child processes inherit it.
SOURCES_ENV = "CONFORMANCE_CASES"
_LOADED_SOURCES: set[str] = set()
_PLUGINS_LOADED = False
#: entry point name -> why it could not be loaded (reported, not fatal, like broken backends)
BROKEN_PLUGINS: dict[str, str] = {}
#: family -> why its cases are not registered here (a package it needs is not installed)
UNAVAILABLE: dict[str, str] = {}


def unavailable(family: str, reason: str) -> None:
    """Record a family that registered nothing here, and why, for ``conformance list cases``."""
    UNAVAILABLE[family] = reason


#: what a family does not run, by label (an id or id prefix), and why: listed, never silently dropped
LEFT_OUT: dict[str, str] = {}
#: id prefix -> (family, loader) of a family whose registration costs seconds (the op sweep imports
#: torch's op database): ``loader(patterns)`` registers the cases the patterns could name, called only
#: when one could name the prefix (:func:`select_cases`)
LAZY: dict[str, tuple[str, Callable[[Sequence[str]], None]]] = {}


def leave_out(label: str, reason: str) -> None:
    """Record something a family leaves out, and why, for ``conformance list cases``."""
    LEFT_OUT[label] = reason


def lazy_family(prefix: str, family: str, loader: Callable[[Sequence[str]], None]) -> None:
    """Register ``family``'s cases (ids starting with ``prefix``) only when a pattern could name one:
    a bare ``*`` does not (``conformance list cases`` names the family instead)."""
    LAZY[prefix] = (family, loader)


def load_lazy(patterns: Iterable[str]) -> None:
    """Load the lazy families ``patterns`` could name (a pattern's literal start is a prefix's, or within it)."""
    patterns = list(patterns)
    for prefix, (family, loader) in list(LAZY.items()):
        named = [p for p in patterns if could_name_lazy(p, [prefix])]
        if not named:
            continue
        try:
            loader(named)
        except Exception as exc:  # like a broken plugin: named, not fatal to the other families
            LAZY.pop(prefix)
            unavailable(family, f"{type(exc).__name__}: {str(exc).strip()[:200]}")


def all_cases() -> list[Case]:
    _load_plugins()
    for source in _inherited_sources():
        load_source(source)
    return list(_REGISTRY.values())


def _load_plugins() -> None:
    """Import every ``conformance.cases`` entry point once; a broken one is named, not fatal."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from importlib.metadata import entry_points

    # the harness's own families first (the built-in cases, then the zoo), in the order they had
    # when the registry imported them itself, then other packages'
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.value != BUILTIN_CASES):
        try:
            loaded = ep.load()
            if callable(loaded):
                loaded()
        except CaseIdError as exc:  # an id that could name a path: an error, like a bad --cases source's
            raise CaseIdError(f"case plugin {ep.name} ({ep.value}): {exc}") from None
        except (Exception, SystemExit) as exc:  # a plugin that exits on import is broken, not the end of the run
            if ep.value == BUILTIN_CASES:
                raise  # a broken installation, not a broken plugin
            BROKEN_PLUGINS[ep.name] = f"{ep.value}: {_failure(exc)}"


def _failure(exc: BaseException) -> str:
    """What went wrong loading a case module, in a few words."""
    if isinstance(exc, SystemExit):
        return f"it exits when imported (SystemExit({exc.code!r}))"
    return f"{type(exc).__name__}: {exc}"


def _inherited_sources() -> list[str]:
    return [s for s in os.environ.get(SOURCES_ENV, "").split(os.pathsep) if s]


def load_source(source: str) -> None:
    """Import a module (``my_pkg.cases``) or a file (``cases.py``) that registers cases.

    The source is recorded in ``CONFORMANCE_CASES`` so every process the run starts
    (pytest-xdist workers, isolated workers) loads it too.  Raises :class:`CaseError`."""
    key = _source_key(source)
    if key in _LOADED_SOURCES:
        return
    _LOADED_SOURCES.add(key)
    _LOADING.append(key)
    try:
        if key.endswith(".py"):
            _import_file(Path(key))
        else:
            if os.getcwd() not in sys.path:  # like `python -m`: modules next to where the run starts
                sys.path.insert(0, os.getcwd())
            importlib.import_module(key)
    except CaseError as exc:
        raise CaseError(str(exc) if str(exc).startswith("--cases ") else f"--cases {source}: {exc}") from None
    except (Exception, SystemExit) as exc:  # a module that exits (sys.exit(4)) at import is a broken source too
        _LOADED_SOURCES.discard(key)
        raise CaseError(f"--cases {source}: {_failure(exc)}") from exc
    finally:
        _LOADING.pop()
    inherited = _inherited_sources()
    if key not in inherited:
        os.environ[SOURCES_ENV] = os.pathsep.join([*inherited, key])


def _source_key(source: str) -> str:
    """A file as its absolute path (workers may start elsewhere), a module as its dotted name."""
    if source.endswith(".py") or os.sep in source or Path(source).is_file():
        path = Path(source).resolve()
        if not path.is_file():
            raise CaseError(f"--cases {source}: no such file")
        return str(path)
    return source


_FILE_MODULE_PREFIX = "conformance_cases_"


def _import_file(path: Path) -> None:
    name = f"{_FILE_MODULE_PREFIX}{path.stem}_{zlib.crc32(str(path).encode()):08x}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CaseError(f"--cases {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def families(cases: Iterable[Case]) -> dict[str, int]:
    """Case counts by family, in registry order."""
    counts: dict[str, int] = {}
    for case in cases:
        counts[case.family] = counts.get(case.family, 0) + 1
    return counts


def select_cases(patterns: Iterable[str] = ()) -> list[Case]:
    """Cases whose id matches any glob in ``patterns`` (the default set when empty), in registry order."""
    patterns = list(patterns)
    all_cases()
    load_lazy(patterns)
    cases = all_cases()
    if not patterns:
        return [c for c in cases if c.in_default]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(c.id, p) for c in cases)]
    lazy = [f"{prefix}*" for prefix, (family, _) in LAZY.items() if family in unmatched]
    if lazy:  # a lazy family named by its name (``ops``): registered as its prefix's glob would
        load_lazy(lazy)
        cases = all_cases()
    # a family's name (the names an unknown case's error lists) selects the family, as its glob would
    named = {p for p in unmatched if any(c.family == p for c in cases)}
    chosen = [c for c in cases if c.family in named or any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    unmatched = [p for p in unmatched if p not in named]
    resolved = [c for p in unmatched if (c := resolve(p)) is not None]
    chosen += resolved
    unmatched = [p for p in unmatched if p not in {c.id for c in resolved}]
    if unmatched:
        raise CaseError(unknown_case(unmatched[0], [c.id for c in cases], families(cases), UNAVAILABLE, LEFT_OUT,
                                     {family: f"{prefix}*" for prefix, (family, _) in LAZY.items()}))
    return chosen
