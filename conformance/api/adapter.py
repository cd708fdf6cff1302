"""The backend adapter API and the registry that discovers adapters.

An adapter declares ``name`` and ``capabilities`` and compiles a case's workload
into a :class:`CompiledStep`.  Built-in adapters and third-party ones register
the same way: the entry-point group ``conformance.backends`` (like
``torch_dynamo_backends``), or ad hoc as ``--backend package.module:ClassName``.
"""

from __future__ import annotations

import importlib
import os
import sys
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar

import torch

from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput, step_optimizer
from conformance.api.verdict import Check
from conformance.models.lifetime import LifetimeModel, Observation
from conformance.models.optimizer import OptimizerSegment
from conformance.probes.cpu import CpuAllocatorProbe, MemoryProbe, MemoryTrace
from conformance.util.catalog import unknown_backend

ENTRY_POINT_GROUP = "conformance.backends"
CAPABILITY_NAMES = ("training", "while_loop", "custom_ops", "cuda_graphs", "dynamic_shapes")
#: a case's requirement of one dtype: ``dtype:float64`` is met by a backend whose ``dtypes`` holds ``float64``
DTYPE_REQUIREMENT = "dtype:"


@dataclass(frozen=True)
class Capabilities:
    """What a backend can run and measure.  A case needing more is a ``skip``."""

    training: bool = True
    while_loop: bool = True
    custom_ops: bool = True
    cuda_graphs: bool = False  # records and replays CUDA graphs (graph trees, private memory pools)
    dynamic_shapes: bool = False  # runs cases whose input shapes change between calls (``Case.shapes``)
    devices: tuple[str, ...] = ("cpu",)
    memory_domains: tuple[str, ...] = ("torch-cpu",)
    exact_memory: bool = False  # measured peak must equal the model's, not just stay below
    #: the dtypes (torch names) whose cases it claims to run right: a case requiring ``dtype:<name>`` (the op
    #: sweep's cases in another dtype than float32) runs only where ``<name>`` is claimed
    dtypes: tuple[str, ...] = ("float32",)
    #: its documented contract ends an output's life at the next call (CUDA graph trees once the caller says a
    #: new step begins): torch refuses to read such an output, which keeps the contract; a value a later call
    #: changes silently fails the ``outputs`` check on every backend (:mod:`conformance.checks.outputs`)
    outputs_overwritten_by_next_call: bool = False

    def has(self, requirement: str) -> bool:
        """Whether a case's requirement is met: a boolean capability, or ``dtype:<name>`` with ``<name>`` claimed."""
        if requirement.startswith(DTYPE_REQUIREMENT):
            return requirement.removeprefix(DTYPE_REQUIREMENT) in self.dtypes
        return bool(getattr(self, requirement, False))

    def missing_for(self, case: Case) -> list[str]:
        return [req for req in sorted(case.requires) if not self.has(req)]

    def describe(self) -> list[str]:
        flags = [n for n in CAPABILITY_NAMES if getattr(self, n)]
        return [*flags, *(f"device:{d}" for d in self.devices), *(f"memory:{m}" for m in self.memory_domains),
                *(f"{DTYPE_REQUIREMENT}{d}" for d in self.dtypes)]


@dataclass(frozen=True)
class Fallback:
    """A part of the step the backend handed to another runner than its own (``CompiledStep.fallbacks``).

    A runtime that runs what it cannot take in PyTorch (OpenVINO's partitioner, an export that fails) still
    gets right values, so no check sees it: the record says who ran what (``Result.fallbacks``)."""

    #: the part of the step, in the backend's words (``forward graph 0``, ``backward graph 1 fused_0``)
    part: str
    #: what ran it instead: ``pytorch`` (eager kernels), ``inductor``
    ran_in: str
    #: the ATen ops that ran there, where known
    ops: tuple[str, ...] = ()
    #: why the backend did not run it (its error, or its partitioner's rule)
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"part": self.part, "ran_in": self.ran_in, "ops": list(self.ops), "why": self.why}

    def describe(self) -> str:
        ops = f" ({', '.join(self.ops[:8])}{', ...' if len(self.ops) > 8 else ''})" if self.ops else ""
        said = f"{self.part} ran in {self.ran_in}{ops}"
        return f"{said}: {self.why}" if self.why else said


class CompileError(RuntimeError):
    """Raised by an adapter when its backend fails to compile, even lazily at the first run."""


class CompiledStep(ABC):
    """A case compiled by a backend: runs one step and says what graphs it received."""

    @abstractmethod
    def run(self) -> StepOutput:
        """Run one step on the workload's inputs (a training step leaves grads on ``.grad``)."""

    def prepare_call(self) -> None:  # noqa: B027 (an optional hook: most steps need nothing)
        """Called before each call after the first, once its inputs are on the workload, outside every
        probe's window: what a step must do on the call's own values before it runs is done here, and
        not measured (eager traces a step whose graph depends on the values again, on this call's)."""

    def optimizer_step(self, workload: Workload) -> None:
        """End a training step as users do: ``optimizer.step()`` and ``zero_grad(set_to_none=True)``.

        The engine calls it after each call's results are taken; on a probed call inside the memory
        probes' window, after the step's outputs are dropped, held to the step's model with the
        optimizer's segment appended (:meth:`optimizer_model`); the parameters and the optimizer
        state it leaves are checked on every call.  By default the case's optimizer runs eagerly after
        the compiled forward and backward, as ``torch.compile(model)`` users run it; a backend that
        also compiles the optimizer step overrides it (and :meth:`optimizer_model`)."""
        step_optimizer(workload)

    def optimizer_model(self, eager: OptimizerSegment) -> OptimizerSegment | None:
        """The model of what :meth:`optimizer_step` allocates and frees, appended to every model a probed
        call is held to (:func:`conformance.models.optimizer.with_optimizer_step`).

        ``eager`` is the case's own optimizer's step, recorded as it runs eagerly
        (:func:`conformance.models.optimizer.record_optimizer_step`): what the default
        :meth:`optimizer_step` runs, so the default returns it.  ``None``: this step's optimizer
        step cannot be modelled (a compiled one whose program the backend does not show); the
        engine then steps it outside the probes' window, and the pair says so in a note."""
        return eager

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        """The lifetime model of the graphs the backend actually received, if it exposes them.

        ``None`` holds the backend to the model of the user-level graph instead.
        """
        return None

    def split_model(self, observation: Observation) -> LifetimeModel | None:
        """The model of a step Dynamo split into graphs and eager code, composed from the graphs the observed
        call ran, in order, and what crossed between them (:mod:`conformance.models.lifetime.split`), where the
        backend knows them.  ``None``: not known (the step is held to the user-level model then)."""
        return None

    def lowering_fallbacks(self) -> dict[str, AbstractContextManager[object]]:
        """This step's backend lowerings known to be wrong in some form, where the graphs this step received
        call their ops: per known defect (its name, with the upstream issue), a configuration under which
        the backend runs those ops as ATen's own kernels instead.  A pair that fails parity is run again
        under each, compiled afresh; where every call then matches, the failure is that lowering's (mechanism
        ``known-lowering-defect``), proven on the pair, not read from its id.  Empty: none known."""
        return {}

    def leaves_modules_to_eager(self) -> bool:
        """Whether modules the compiler does not trace run as eager PyTorch inside this backend's step
        (``torch.compile``: Dynamo breaks the graph at an ``nn.LSTM``, ``nn.GRU``, ``nn.RNN``; see
        :func:`conformance.api.step.eager_modules`).  Where such a module is in the case's step, the
        graphs the backend received do not cover the step, and the engine holds it to the model of
        the step as eager PyTorch runs it with the user's kernels
        (:func:`conformance.api.step.trace_user_kernels`) instead."""
        return False

    def program_model(self, observation: Observation) -> LifetimeModel | None:
        """The lifetime model of the program the backend *generated*, if it can show it.

        Where the received graphs only bound what a compiler may use, its program says what
        it does: each buffer allocated, reused and freed, in kernel order, with the names and
        containers that reference it (:class:`conformance.models.program.WrapperProgram` models a
        Python wrapper like inductor's; a backend with its own executable format builds the
        model with :func:`conformance.models.lifetime.model_forward_backward` ``programs=``).  The
        engine then holds the step to it: every storage freed right after its last use, and
        the measured timeline equal to the program's where the allocator reports it exactly.
        """
        return None

    def program_files(self) -> frozenset[str]:
        """The files the generated program's Python code runs from (inductor: its wrapper modules).

        The CPU probe marks the span of each of their statements, so what an opaque op the program
        calls allocates and frees inside its own call is set apart as that op's, on every release,
        with or without a profiler range for the op (:mod:`conformance.probes.statements`)."""
        return frozenset()

    def notes(self) -> list[str]:
        """Lines the backend wants on the pair's record (``result.notes``): what it did that a reader
        of the verdict should know (a fallback taken, a route chosen, a figure it could not read)."""
        return []

    def fallbacks(self) -> list[Fallback]:
        """The parts of the step the backend did not run itself (:class:`Fallback`), asked after the last call:
        recorded on the pair (``Result.fallbacks``) and named in a note.  Empty: the backend ran all of it."""
        return []

    def extra_probes(self) -> list[MemoryProbe]:
        """Probes of the other memory domains this step allocates in (e.g. ``iree-hal``).

        Each probed step enters them inside the torch CPU probe's window; the verdict is
        then taken on the sum of all domains (:func:`conformance.probes.cpu.combine_traces`).
        """
        return []

    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        """The backend's own figures (``result.memory.findings``), from the probed steps' traces (all domains)."""
        return {}

    def contract_check(self) -> Check | tuple[str, str] | None:
        """A backend-specific memory contract beyond peak and residual (e.g. CUDA graph pools).

        Returns a :class:`conformance.api.verdict.Check` (or the older ``(status, reason)``), or
        ``None``.  Called once, after every probed step.
        """
        return None


class Backend(ABC):
    """One backend adapter."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: Bytes of documented slack allowed above the model's peak, with the reason.
    peak_slack_bytes: ClassVar[int] = 0
    #: Why ``peak_slack_bytes`` is allowed (the op workspace it stands for), quoted in the peak check.
    peak_slack_reason: ClassVar[str] = ""
    #: Relative cost of one pair on this backend, for balancing shards (eager = 1).
    cost_weight: ClassVar[float] = 1.0
    #: The backend's manifest of expected non-passes (a TOML file); ``None``: the built-in manifest
    #: ``backends/manifests/<name>.toml`` where there is one.  A ``str`` or a ``Path``.
    manifest_path: ClassVar[str | os.PathLike[str] | None] = None
    #: Modules a run's fork server imports before it forks isolation workers (the compiler's Python packages,
    #: ``torch._dynamo`` for a ``torch.compile`` backend): a worker that replaces a crashed one then starts with
    #: them imported.  Imports only: a module here must start no thread and touch no device at import.
    preload_modules: ClassVar[tuple[str, ...]] = ()

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run on this machine, or ``None`` when it can."""
        return None

    def versions(self) -> dict[str, str]:
        """The versions a verdict depends on (torch, the compiler, its runtime), recorded on every
        result and in the run history, so a change of verdict can be put beside a change of version."""
        return {"torch": torch.__version__}

    def make_probe(self) -> MemoryProbe:
        """A fresh probe of the memory domain this backend's steps allocate in (one per probed step)."""
        return CpuAllocatorProbe()

    def warm_up(self) -> None:  # noqa: B027 (an optional hook: most backends have nothing to warm)
        """Pay the process's one-time costs (imports, a compiler's first-use set-up) before any pair.

        A run's isolation worker calls it while the run itself is still starting up, so the two
        overlap instead of landing in the first pair's compile time.  It must leave no state a
        verdict depends on: pairs are judged the same in a worker that warmed up and one that
        did not (``tests/test_isolation.py`` holds inductor to that)."""

    def eager_rounding(self) -> AbstractContextManager[object] | None:
        """A configuration under which this backend rounds every reduced-precision (bfloat16, float16) value
        after each op, as eager PyTorch does (inductor: ``emulate_precision_casts``); ``None``: it has none.

        A fused kernel that keeps such values in float32 between ops computes a more precise result than
        eager's, and a training step's parameters then drift from eager's by an ulp a step.  A pair that
        fails parity is run again under this configuration (compiled afresh, no probes): where it then
        matches, the failure is that rounding (mechanism ``reduced-precision-rounding``), not a wrong kernel."""
        return None

    @abstractmethod
    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        """Compile the workload; errors raised here are ``fail-compile``."""


class BackendError(ValueError):
    """A backend name that resolves to nothing, or a plugin that is broken."""


@dataclass
class BackendRegistry:
    backends: dict[str, Backend] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # plugin (or contested backend) name -> problem
    sources: dict[str, str] = field(default_factory=dict)  # backend name -> where it came from, for messages

    def get(self, name: str) -> Backend:
        if name in self.backends:
            return self.backends[name]
        if name in self.broken:
            raise BackendError(f"backend {name!r} is broken: {self.broken[name]}")
        if ":" in name:
            backend = load_backend_class(name, name)
            taken = self.broken.get(backend.name) if backend.name not in self.backends else None
            if taken is not None:
                raise BackendError(f"--backend {name}: backend name {backend.name!r} is taken: {taken}")
            return self.add(backend, f"--backend {name}")
        raise BackendError(unknown_backend(name, self.backends))

    def add(self, backend: Backend, source: str) -> Backend:
        """``backend`` under its name; the same adapter class again is the one already there.

        Records, manifests, repros and the history key a pair by the backend's name, so a second,
        different adapter under a taken name would pass for the first (its verdicts filed as the
        other's): it is refused, naming both sources."""
        taken = self.backends.get(backend.name)
        if taken is not None:
            if type(taken) is type(backend):
                return taken
            raise BackendError(
                f"{source}: backend name {backend.name!r} is taken by {self.sources.get(backend.name, '?')}; "
                f"two backends cannot share a name (rename one)")
        self.backends[backend.name] = backend
        self.sources[backend.name] = source
        return backend

    def usable(self) -> list[Backend]:
        return [b for b in self.backends.values() if b.unavailable_reason() is None]


def _import_adapter_module(module_name: str) -> Any:
    """The module, from the installed packages or, only when it is not there, from the current
    directory (like ``python -m``: an ad hoc adapter next to where the run starts, which then stays
    importable for the modules it imports later and for the workers the run starts)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name) or os.getcwd() in sys.path:
            raise
    sys.path.insert(0, os.getcwd())
    return importlib.import_module(module_name)


def load_backend_class(label: str, spec: str) -> Backend:
    """Import ``module:Class`` and check it is a usable adapter; raise :class:`BackendError` if not."""
    module_name, _, attr = spec.partition(":")
    try:
        obj = getattr(_import_adapter_module(module_name), attr)
    except (Exception, SystemExit) as exc:  # an import error (or exit) in a plugin must not take the run down
        raise BackendError(f"backend {label!r}: cannot load {spec}: {type(exc).__name__}: {exc}") from exc
    return validate_backend(label, obj)


def validate_backend(label: str, obj: object) -> Backend:
    backend = _instantiate(label, obj) if isinstance(obj, type) else obj
    if not isinstance(backend, Backend):
        missing = [m for m in ("name", "capabilities", "compile") if not hasattr(backend, m)]
        raise BackendError(
            f"backend {label!r}: {type(backend).__name__} is not a conformance Backend"
            + (f" (missing {', '.join(missing)})" if missing else "")
        )
    name = getattr(backend, "name", None)
    if not isinstance(name, str) or not name:  # the results schema's reader takes any non-empty str
        raise BackendError(f"backend {label!r}: 'name' must be a str of at least one character, got {name!r}")
    if not isinstance(backend.capabilities, Capabilities):
        raise BackendError(
            f"backend {label!r}: 'capabilities' must be conformance.api.adapter.Capabilities, "
            f"got {type(backend.capabilities).__name__}"
        )
    return backend


def _instantiate(label: str, cls: type) -> object:
    """An adapter class's instance; a class that is not an adapter is not constructed at all."""
    if not issubclass(cls, Backend):
        missing = [m for m in ("name", "capabilities", "compile") if not hasattr(cls, m)]
        raise BackendError(
            f"backend {label!r}: {cls.__module__}.{cls.__qualname__} is not a conformance Backend"
            + (f" (missing {', '.join(missing)})" if missing else " subclass")
        )
    try:
        return cls()
    except Exception as exc:
        raise BackendError(f"backend {label!r}: {cls.__qualname__}() failed: {type(exc).__name__}: {exc}") from None


def discover() -> BackendRegistry:
    """Every adapter registered under the entry-point group, broken ones reported by name.

    Two entry points that register different adapters under one backend name (or under one entry
    point name) make that name broken, naming both: neither may pass for the other."""
    registry = BackendRegistry()
    values: dict[str, str] = {}  # entry point name -> its value (the same plugin seen twice is skipped)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        source = f"entry point {ep.name} ({ep.value})"
        if ep.name in values:
            if values[ep.name] != ep.value:
                _contest(registry, ep.name, f"entry point {ep.name} ({values[ep.name]})", source)
            continue
        values[ep.name] = ep.value
        try:
            backend = validate_backend(ep.name, ep.load())
        except BackendError as exc:
            registry.broken[ep.name] = str(exc)
            continue
        except Exception as exc:
            registry.broken[ep.name] = f"backend {ep.name!r}: cannot load {ep.value}: {type(exc).__name__}: {exc}"
            continue
        if backend.name in registry.broken:
            continue
        taken = registry.backends.get(backend.name)
        if taken is not None and type(taken) is not type(backend):
            _contest(registry, backend.name, registry.sources[backend.name], source)
            continue
        registry.add(backend, source)
    return registry


def _contest(registry: BackendRegistry, name: str, first: str, second: str) -> None:
    registry.backends.pop(name, None)
    registry.sources.pop(name, None)
    registry.broken[name] = f"two backends are named {name!r}: {first} and {second}; uninstall or rename one"
