"""A model of the program a compiler generated, read from the program itself.

The lifetime model of the graphs a compiler *received* only bounds what it may
use: fusion and buffer reuse keep a compiled program far below it, so a ``del``
emitted late inside the generated code passes.  This module models the program
the compiler *generated* instead: TorchInductor's Python wrapper (its ``call``
function and the subgraph functions it calls), interpreted statement by
statement over fake tensors.  Every storage the program allocates, every name and
container (a fallback op's result tuple, a ``while_loop``'s carry list, the boxed
``args`` list) that references it, every reuse (``buf5 = buf2; del buf2``) and
every ``del`` is followed as Python would, so the timeline is the program's own:
when each storage is born, last used, and freed.

Two contracts come out of it (:mod:`conformance.run.engine` judges them):

* **lifetimes**: a storage must be freed before the first statement that does work
  (allocates, runs a kernel or an op) after its last use; :func:`late_releases`
  names each one that is not, the reference that kept it, where it should have
  died, and storages allocated and never used.
* **timeline**: the measured allocations follow the program's timeline exactly
  where the allocator allows it (the CPU allocator does).

The interpreter knows the wrapper's vocabulary (allocation helpers, views,
asserts, kernels, extern kernels and fallback ops, subgraph calls, and the host
``while`` loop with trip counts a real run observed); anything else raises
:class:`ProgramError` naming the line, and the pair is judged without a program
model rather than with a wrong one.
"""

from __future__ import annotations

import ast
import builtins
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from conformance.models.lifetime import (
    LifetimeModel,
    ModelBuilder,
    ModelError,
    Observation,
    Storage,
    concrete,
    storage_nbytes,
)
from conformance.models.lifetime.accumulate import Layout, layout_of
from conformance.models.lifetime.sizes import storage_exact_fake_mode
from conformance.models.transients import storage_slack

#: Storage roles the program is responsible for freeing (callers' inputs, the autograd
#: engine's tangents and the step's results are freed by others, on their own terms).
FREED_BY_PROGRAM = ("intermediate", "saved")


class ProgramError(ModelError):
    """The generated program uses a construct this model does not interpret."""


@dataclass(frozen=True)
class _Kernel:
    """A compiled kernel (C++ or Triton): runs on its arguments, allocates nothing the program sees."""

    name: str

    def __getattr__(self, attr: str) -> _Kernel:  # ``kernel.run(...)`` (Triton)
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self


class _Bookkeeping:
    """Helpers that neither allocate nor compute: asserts, device and stream handles."""

    def __init__(self, name: str, result: Any = None) -> None:
        self.name = name
        self.result = result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.result


def _empty_strided(device: str) -> Callable[..., torch.Tensor]:
    def make(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype, *_: Any, **__: Any) -> torch.Tensor:
        return torch.empty_strided(tuple(size), tuple(stride), dtype=dtype, device=device)

    return make


def _reinterpret(t: torch.Tensor, size: Sequence[int], stride: Sequence[int], offset: int = 0) -> torch.Tensor:
    return t.as_strided(tuple(size), tuple(stride), t.storage_offset() + offset)


def _at_offset(shape: tuple[int, ...], stride: tuple[int, ...], offset: int, like: torch.Tensor) -> torch.Tensor:
    """An input's stand-in at its own storage offset: a view the caller passes (``x[5:]``) keeps it, and the
    wrapper's ``reinterpret_tensor(arg0_1, ..., -5)`` counts from it (an offset relative to the input's)."""
    if not offset:
        return torch.empty_strided(shape, stride, dtype=like.dtype, device=like.device)
    span = 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0
    base = torch.empty(offset + span, dtype=like.dtype, device=like.device)
    return base.as_strided(shape, stride, offset)


_VIEWS: dict[str, Callable[..., Any]] = {"reinterpret_tensor": _reinterpret}
_ALLOCATORS: dict[str, Callable[..., Any]] = {
    "empty_strided_cpu": _empty_strided("cpu"),
    "empty_strided_cpu_pinned": _empty_strided("cpu"),
    "empty_strided_cuda": _empty_strided("cuda"),
    "empty_strided_xpu": _empty_strided("xpu"),
    "empty_strided_mtia": _empty_strided("mtia"),
    "empty_strided": _empty_strided("cpu"),
}
#: Handles and hooks the wrapper calls for their side effects outside memory.  Checks (asserts on
#: sizes, strides, alignment, metadata, however a release names them) are not listed: a call is
#: a check by what it does on fake tensors (:func:`_is_check`).
_BOOKKEEPING = ("run_intermediate_hooks", "get_raw_stream", "check_memory_pool", "maybe_profile")


@dataclass
class WrapperProgram:
    """One compiled graph's Python wrapper: its source, entry function and subgraph functions."""

    source: str
    label: str = ""  # what the report calls it (e.g. the graph's role)
    entry: ast.FunctionDef = field(init=False, repr=False)
    functions: dict[str, ast.FunctionDef] = field(init=False, repr=False)
    namespace: dict[str, Any] = field(init=False, repr=False)
    comments: dict[int, str] = field(init=False, repr=False)
    #: the source's lines, split once (every statement's event is labelled with its line)
    lines: list[str] = field(init=False, repr=False)
    #: the layouts of what the last modelled call returned (what ``AccumulateGrad`` checks a gradient's by)
    result_layouts: list[Layout | None] = field(init=False, repr=False, default_factory=list)

    def __post_init__(self) -> None:
        try:
            tree = ast.parse(self.source)
        except SyntaxError as exc:
            raise ProgramError(f"wrapper source does not parse: {exc}") from exc
        kernels: list[str] = []
        kept: list[ast.stmt] = []
        self.functions = {}
        entry: ast.FunctionDef | None = None
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and _is_kernel_definition(stmt.value):
                kernels.extend(t.id for t in stmt.targets if isinstance(t, ast.Name))
                continue
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "async_compile"
                                                    for t in stmt.targets):
                continue  # the kernel compiler itself: the kernels are already built
            if isinstance(stmt, (ast.Expr, ast.Delete, ast.If)):
                continue  # async_compile.wait(globals()), del async_compile, the benchmark main
            if isinstance(stmt, ast.FunctionDef):
                self.functions[stmt.name] = stmt
                if stmt.name == "call":
                    entry = stmt
            if isinstance(stmt, ast.ClassDef) and stmt.name == "Runner":
                entry = next((f for f in stmt.body if isinstance(f, ast.FunctionDef) and f.name == "call"), entry)
            kept.append(stmt)
        if entry is None:
            raise ProgramError("wrapper source has no `call` function (a C++ wrapper?)")
        self.entry = entry
        namespace: dict[str, Any] = {"__name__": "conformance_program", "__builtins__": builtins}
        try:
            exec(compile(ast.Module(kept, []), "<wrapper preamble>", "exec"), namespace)
        except Exception as exc:
            raise ProgramError(f"wrapper preamble does not load: {type(exc).__name__}: {exc}") from exc
        namespace.update({name: _Kernel(name) for name in kernels})
        namespace.update({name: _Bookkeeping(name) for name in _BOOKKEEPING})
        namespace["get_raw_stream"] = _Bookkeeping("get_raw_stream", 0)
        self.namespace = namespace
        self.lines = self.source.splitlines()
        self.comments = {}
        for i, text in enumerate(self.lines, 1):  # the ATen ops a kernel line came from, for naming
            stripped = text.strip()
            if stripped.startswith("# Topologically Sorted Source Nodes") or stripped.startswith("# Source Nodes"):
                self.comments[i + 1] = stripped.lstrip("# ")

    def cache_key(self) -> list[str]:
        """What a model of this program depends on of it (its text and label): its part of the key a model is
        kept under in the run's result cache (:mod:`conformance.models.lifetime.cached`)."""
        return [self.label, self.source]

    def line(self, lineno: int) -> str:
        return self.lines[lineno - 1].strip() if 0 < lineno <= len(self.lines) else ""

    def model(self, builder: ModelBuilder, inputs: Sequence[Any], input_vals: Sequence[Any], prefix: str,
              donated: bool, input_layouts: Sequence[Layout | None] = ()) -> list[Any]:
        """Run the program's references through ``builder``; returns the builder values it returns.

        ``inputs`` are the builder's values for the call's arguments (storages), ``input_vals``
        the fake tensors of the graph's placeholders (their shapes, strides and aliasing);
        ``input_layouts``, where given, the strides the arguments really have (a backward's saved
        tensors are what the forward's program returned, in the layout it chose, which the graph's
        placeholders need not say).  With ``donated`` the caller hands its references over (the
        boxed convention)."""
        interpreter = _Interpreter(self, builder, prefix)
        values = interpreter.run(list(inputs), list(input_vals), donated, list(input_layouts))
        self.result_layouts = interpreter.result_layouts
        return values


def model_program(program: WrapperProgram, input_vals: Sequence[Any], observation: Observation | None = None,
                  retained_outputs: Iterable[int] = ()) -> LifetimeModel:
    """Model one program on its own: its inputs caller-owned (they cost it nothing), its results
    dropped by the caller after it returns except ``retained_outputs`` (positions)."""
    builder = ModelBuilder(observation or Observation())
    inputs = [builder.caller_input(v, f"arg{i}") for i, v in enumerate(input_vals)]
    outputs = program.model(builder, inputs, input_vals, "", donated=False)
    return builder.finish(outputs, set(retained_outputs))


def _is_kernel_definition(value: ast.expr) -> bool:
    """``name = async_compile.cpp_pybinding(...)`` / ``.triton(...)``: a compiled kernel."""
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
            and isinstance(value.func.value, ast.Name) and value.func.value.id == "async_compile")


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


@dataclass
class Binding:
    """One name bound to a value in a frame of the program, from its binding to its release."""

    frame: str
    name: str
    bound: int  # event index of the statement that bound it
    kind: str = "name"  # what the name is bound to: "list", "tuple" (a container) or "name" (a tensor, a value)
    in_loop: bool = False  # it was suspected inside a host ``while`` loop
    released_in_loop: bool = False
    last_load: int = -1  # the last statement that read the name
    released: int | None = None  # the statement that deleted or rebound it (or returned from its frame)
    settled: int | None = None  # the first statement doing work after its release (None: none did)
    #: (work event, program storages it referenced then) for work after a read of it
    suspects: list[tuple[int, tuple[Storage, ...]]] = field(default_factory=list, repr=False)
    #: per work event: the bindings that statement read a storage through a view of it, by storage id
    view_readers: dict[int, dict[int, list[Binding]]] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return self.name if self.frame == "call" else f"{self.frame}.{self.name}"


@dataclass
class _Frame:
    name: str
    env: dict[str, Any]
    bindings: dict[str, Binding] = field(default_factory=dict)
    #: per bound name, what it reaches (:class:`_Reach`), kept as names are bound and unbound
    reach: dict[str, _Reach] = field(default_factory=dict)


@dataclass(frozen=True)
class _Reach:
    """What one name reaches: ``seq`` orders the names of a frame as its ``env`` does; a name bound to a
    container (a list or dict the program may change in place) is walked again whenever it is asked,
    any other value's storages are fixed when it is bound."""

    seq: int
    storages: tuple[Storage, ...]
    container: bool


@dataclass
class _Statement:
    """What one statement did, gathered while it runs."""

    work: bool = False
    used: list[torch.Tensor] = field(default_factory=list)
    born: list[Storage] = field(default_factory=list)
    loaded: list[Binding] = field(default_factory=list)
    unbound: list[Binding] = field(default_factory=list)
    writer: str = ""


class _Interpreter:
    def __init__(self, program: WrapperProgram, builder: ModelBuilder, prefix: str) -> None:
        self.program = program
        self.builder = builder
        self.prefix = prefix
        self.frames: list[_Frame] = []
        self.keys: dict[Any, Storage] = {}
        self.result_layouts: list[Layout | None] = []
        self.held: dict[int, Storage] = {}  # storages the program references (one builder ref each)
        self.loops: dict[tuple[int, str], int] = {}  # (frame depth, test name) -> trips left
        self.trips: list[int] = []  # the trip of each loop being run, innermost last (for labels)
        self.calls: dict[str, int] = {}  # subgraph -> times called (for labels)
        self.bindings: list[Binding] = []
        self.released: list[Binding] = []  # released since the last statement that did work
        self.stmt = _Statement()
        self.fake = storage_exact_fake_mode(allow_non_fake_inputs=False)
        # What the frames' names reach, kept as names are bound and unbound, so that a statement costs the
        # names it touches and not every live one (issue 59: the model grows linearly with the program):
        self._seq = 0
        self._reached: dict[int, int] = {}  # storage id -> names (not containers) that reach it
        self._holders: dict[int, dict[int, tuple[_Frame, str]]] = {}  # storage id -> seq -> those names
        self._containers: dict[int, tuple[_Frame, str]] = {}  # seq -> a name bound to a container
        self._unkeyed: dict[Any, list[tuple[_Frame, str]]] = {}  # a fake storage no model storage is known for yet
        self._touched: set[int] = set()  # storages whose names changed since the last sync
        self._contained: dict[int, Storage] = {}  # what the containers reached at the last sync
        self._pending: dict[int, Storage] = {}  # storages used or born since the last statement that did work
        self._changed: dict[int, Storage] = {}  # storages whose names changed since that statement

    # -- entry ---------------------------------------------------------------------
    def run(self, inputs: list[Any], input_vals: list[Any], donated: bool,
            input_layouts: list[Layout | None] | None = None) -> list[Any]:
        fakes = self._input_fakes(inputs, input_vals, input_layouts or [])
        self._pending.update((s.sid, s) for s in self.keys.values())  # an input is past its last use until read
        self.frames.append(_Frame("call", {}))
        self._bind(self.frames[-1], "args", list(fakes))
        self._sync()  # the argument list references every input
        if donated:  # the caller's references were handed over with the list
            for value in inputs:
                self.builder.release(value)
        try:
            self._block(self.program.entry.body)
            result: Any = None
        except _Return as ret:
            result = ret.value
        outputs = self._to_builder(result)
        values = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        returned = list(result) if isinstance(result, (list, tuple)) else [result]
        self.result_layouts = [layout_of(v, {}) for v in returned]
        for value in values:
            self.builder.acquire(value)  # the caller's references to the results
        self._pop_frame()
        self._sync()
        self.builder.findings.extend(self.bindings)
        return values

    def _input_fakes(self, inputs: list[Any], input_vals: list[Any], layouts: list[Layout | None]) -> list[Any]:
        if len(inputs) != len(input_vals):
            raise ProgramError(f"{self.prefix}: {len(input_vals)} placeholders, {len(inputs)} inputs")
        bases: dict[Any, torch.Tensor] = {}
        fakes: list[Any] = []
        sym = self.builder.symbols  # a dynamic-shape graph's sizes, at this call's values
        layouts = layouts + [None] * (len(inputs) - len(layouts))
        for value, val, layout in zip(inputs, input_vals, layouts):
            if isinstance(val, torch.SymInt):  # a size the wrapper reads from its arguments (``s0 = arg2_1``)
                fakes.append(concrete(val, sym))
                continue
            if not isinstance(val, torch.Tensor):
                fakes.append(val if isinstance(val, (int, float, bool)) else None)
                continue
            key = StorageWeakRef(val.untyped_storage())
            shape = tuple(concrete(n, sym) for n in val.shape)
            stride = tuple(concrete(n, sym) for n in val.stride())
            if layout is not None and layout[0] == shape:
                stride = layout[1]
            with self.fake:
                if key in bases:
                    fake = bases[key].as_strided(shape, stride, concrete(val.storage_offset(), sym))
                else:
                    fake = _at_offset(shape, stride, concrete(val.storage_offset(), sym), val)
                    bases[key] = fake
            if isinstance(value, Storage):
                self.keys.setdefault(StorageWeakRef(fake.untyped_storage()), value)
                value.modelled_by_program = True
            fakes.append(fake)
        return fakes

    # -- names -----------------------------------------------------------------------
    def _bind(self, frame: _Frame, name: str, value: Any) -> None:
        self._unbind(frame, name)
        frame.env[name] = value
        binding = Binding(frame.name, name, len(self.builder.events), holder_kind(value))
        frame.bindings[name] = binding
        self.bindings.append(binding)
        self._reach_add(frame, name, value)

    def _unbind(self, frame: _Frame, name: str) -> None:
        binding = frame.bindings.pop(name, None)
        frame.env.pop(name, None)
        self._reach_drop(frame, name)
        if binding is not None:
            self.stmt.unbound.append(binding)

    def _pop_frame(self) -> None:
        frame = self.frames.pop()
        last = len(self.builder.events) - 1
        for binding in frame.bindings.values():
            binding.released = last
        for name in list(frame.reach):
            self._reach_drop(frame, name)

    def _reach_add(self, frame: _Frame, name: str, value: Any, seq: int | None = None) -> None:
        if seq is None:
            self._seq += 1
            seq = self._seq
        container = _has_container(value)
        storages: tuple[Storage, ...] = ()
        if not container:
            found = []
            for t in _tensors(value):
                key = StorageWeakRef(t.untyped_storage())
                s = self.keys.get(key)
                if s is None:  # a storage the program may make known later (see _born)
                    self._unkeyed.setdefault(key, []).append((frame, name))
                else:
                    found.append(s)
            storages = tuple(found)
        reach = frame.reach[name] = _Reach(seq, storages, container)
        if container:
            self._containers[reach.seq] = (frame, name)
        for s in {s.sid: s for s in storages}.values():
            self._reached[s.sid] = self._reached.get(s.sid, 0) + 1
            self._holders.setdefault(s.sid, {})[reach.seq] = (frame, name)
            self._touched.add(s.sid)
            self._changed[s.sid] = s

    def _reach_drop(self, frame: _Frame, name: str) -> None:
        reach = frame.reach.pop(name, None)
        if reach is None:
            return
        self._containers.pop(reach.seq, None)
        for s in {s.sid: s for s in reach.storages}.values():
            self._reached[s.sid] -= 1
            if not self._reached[s.sid]:
                del self._reached[s.sid]
            self._holders[s.sid].pop(reach.seq, None)
            self._touched.add(s.sid)
            self._changed[s.sid] = s

    def _newly_keyed(self, key: Any) -> None:
        """``key`` now names a model storage: the names bound to its tensors before reach it from now on."""
        for frame, name in self._unkeyed.pop(key, []):
            if name in frame.reach:
                seq = frame.reach[name].seq  # its place among the frame's names stays
                self._reach_drop(frame, name)
                self._reach_add(frame, name, frame.env.get(name), seq)

    # -- statements ------------------------------------------------------------------
    def _block(self, body: Sequence[ast.stmt]) -> None:
        for stmt in body:
            self._statement(stmt)

    def _statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.If):
            self._block(stmt.body if self._truth(stmt.test, consume=False) else stmt.orelse)
            return
        if isinstance(stmt, ast.While):
            self.trips.append(0)
            while self._truth(stmt.test, consume=True):
                self._block(stmt.body)
                self.trips[-1] += 1
            self.trips.pop()
            return
        if isinstance(stmt, ast.With):  # device guards: the body is the program
            self._block(stmt.body)
            return
        if isinstance(stmt, ast.Pass):
            return
        outer, self.stmt = self.stmt, _Statement()
        try:
            self._simple(stmt)
        except _Return:
            self._close(stmt)
            self.stmt = outer
            raise
        self._close(stmt)
        self.stmt = outer

    def _simple(self, stmt: ast.stmt) -> None:
        frame = self.frames[-1]
        if isinstance(stmt, ast.Assign):
            value = self._eval(stmt.value)
            if not isinstance(stmt.value, ast.Call) or self._is_view_call(stmt.value):
                self._use(value)  # a rename, an item taken from a container, a view: a use
            for target in stmt.targets:
                self._assign(target, value)
        elif isinstance(stmt, ast.AugAssign):
            value = _binop(stmt.op)(self._eval(stmt.target), self._eval(stmt.value))
            self._bind(frame, self._name(stmt.target), value)
        elif isinstance(stmt, ast.Expr):
            self._eval(stmt.value)
        elif isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    self._unbind(frame, target.id)
                elif isinstance(target, ast.Subscript):
                    del self._eval(target.value)[self._eval(target.slice)]
                else:
                    raise self._error(stmt, "unsupported del target")
        elif isinstance(stmt, ast.Return):
            value = self._eval(stmt.value) if stmt.value is not None else None
            self._use(value)
            raise _Return(value)
        else:
            raise self._error(stmt, f"unsupported statement {type(stmt).__name__}")

    def _close(self, stmt: ast.stmt) -> None:
        """End a statement: record its event, its uses, the references it let go of, and what it freed."""
        st = self.stmt
        index = len(self.builder.events)
        used: dict[int, Storage] = {}
        for t in st.used:
            s = self.keys.get(StorageWeakRef(t.untyped_storage()))
            if s is not None:
                used[s.sid] = s
                s.last_use = index
                s.held_by = s.held_in = ""  # who keeps it past its last use is asked again after this one
                s.held_in_loop = False
                if st.work and not s.op_writer and st.writer:
                    s.op_writer = st.writer
        for binding in st.loaded:
            binding.last_load = index
        self._pending.update(used)
        self._pending.update((s.sid, s) for s in st.born)
        if st.work:
            self.builder.work_events.add(index)
            self._note_holders(index, used)
            for binding in self.released:
                binding.settled = index
            self.released.clear()
        for binding in st.unbound:
            binding.released = index
            binding.released_in_loop = bool(self.trips)
            self.released.append(binding)
        self.builder.event(f"{self.prefix}{self._where(stmt)} {_short(self.program.line(stmt.lineno))}")
        self._sync()

    def _where(self, stmt: ast.stmt) -> str:
        frame = self.frames[-1].name
        place = f"line {stmt.lineno}" if frame == "call" else f"{frame}#{self.calls.get(frame, 1)}:{stmt.lineno}"
        return f"{place} [trip {self.trips[-1]}]" if self.trips and frame == "call" else place

    def _sync(self) -> None:
        """Hold exactly the storages reachable from the live frames (one builder reference each).

        Only the storages whose names changed since the last sync, and what containers reach, are looked at:
        every other one is held exactly when it was then."""
        contained = self._in_containers()
        for sid in self._touched.union(contained, self._contained):
            reachable = sid in self._reached or sid in contained
            if reachable and sid not in self.held:
                s = contained.get(sid) or next(iter(self._holders_of(sid)))
                self.held[sid] = s
                self.builder.acquire(s)
            elif not reachable and sid in self.held:
                self.held[sid].freed_in_loop = bool(self.trips)
                self.builder.release(self.held.pop(sid))
        self._touched.clear()
        self._contained = contained
        for s in self.stmt.born:
            if s.sid not in self._reached and s.sid not in contained:  # a transient: made and dropped within
                self.builder.acquire(s)                                # the statement
                self.builder.release(s)

    def _holders_of(self, sid: int) -> Iterable[Storage]:
        """The model storage ``sid`` names, from one of the (non-container) names that reach it."""
        for frame, name in self._holders.get(sid, {}).values():
            yield next(s for s in frame.reach[name].storages if s.sid == sid)

    def _in_containers(self) -> dict[int, Storage]:
        """The storages the names bound to containers reach now (the program changes containers in place)."""
        found: dict[int, Storage] = {}
        for frame, name in self._containers.values():
            for s in self._storages(frame.env.get(name)):
                found[s.sid] = s
        return found

    def _storages(self, value: Any) -> Iterable[Storage]:
        for t in _tensors(value):
            s = self.keys.get(StorageWeakRef(t.untyped_storage()))
            if s is not None:
                yield s

    def _note_holders(self, index: int, used: dict[int, Storage]) -> None:
        """At a statement that does work: which references hold storages the program must free.

        A storage past its last use gets the names that still reference it (``held_by``: the first
        ones; ``held_in``: the kind of those holding it last, the reference whose release frees it);
        every binding holding such storages records the event, to be judged once its last read is known.

        Outside a host loop only what can change the answer is looked at (:meth:`_note_holders_near`):
        the names that reach a storage this statement used, and the storages used, born or renamed since
        the last statement that did work.  Inside one, every name is (a loop marks what it holds)."""
        contained = self._in_containers()
        candidates = {**self._pending, **self._changed, **contained, **self._contained}
        if self.trips:
            self._note_holders_all(index)
        else:
            self._note_holders_near(index, used, candidates, contained)
        self._changed = {}
        self._pending = {sid: s for sid, s in candidates.items()
                         if (s.last_use if s.last_use is not None else s.birth) >= index}

    def _note_holders_near(self, index: int, used: dict[int, Storage], candidates: dict[int, Storage],
                           contained: dict[int, Storage]) -> None:
        """:meth:`_note_holders_all` outside a loop, looking only at what can have changed: a binding records a
        suspect event only where it holds a storage whose last use that event is (:func:`late_references` reads no
        other), and a storage's holders are asked again only when they changed or it was used since."""
        order = {id(f): i for i, f in enumerate(self.frames)}
        seen: set[int] = set()
        for s in used.values():
            if s.role not in FREED_BY_PROGRAM or not s.nbytes:
                continue
            for frame, name in [*self._holders.get(s.sid, {}).values(), *self._containers.values()]:
                binding = frame.bindings.get(name)
                if binding is None or id(binding) in seen:
                    continue
                seen.add(id(binding))
                value = frame.env.get(name)
                owned = tuple(o for o in self._storages(value) if o.role in FREED_BY_PROGRAM and o.nbytes)
                if binding.last_load < index and not _part_views(value):
                    now = tuple(o for o in owned if o.last_use == index)
                    if now:
                        binding.suspects.append((index, now))
                        binding.view_readers[index] = self._view_readers(now)
        for sid, s in candidates.items():
            if s.role not in FREED_BY_PROGRAM or not s.nbytes or not (sid in self._reached or sid in contained):
                continue
            last = s.last_use if s.last_use is not None else s.birth
            if last >= index:
                continue
            places = [*self._holders.get(sid, {}).values(),
                      *((f, n) for f, n in self._containers.values() if s in set(self._storages(f.env.get(n))))]
            places.sort(key=lambda place: (order[id(place[0])], place[0].reach[place[1]].seq))
            holders = [(f"{f.name}.{n}" if f.name != "call" else n, f.env.get(n)) for f, n in places]
            if not s.held_by:
                s.held_by = ", ".join(n for n, _ in holders)
            kinds = {holder_kind(v) for _, v in holders}
            s.held_in = next((k for k in ("list", "tuple", "name") if k in kinds), s.held_in)

    def _note_holders_all(self, index: int) -> None:
        """Every binding of every frame, as :meth:`_note_holders` describes."""
        bound = [(f, b) for f in self.frames for b in f.bindings.values()] + [(None, b) for b in self.stmt.unbound]
        asked: set[int] = set()
        for frame, binding in bound:
            value = frame.env.get(binding.name) if frame is not None else None
            if frame is None:
                continue
            owned = tuple(s for s in self._storages(value) if s.role in FREED_BY_PROGRAM and s.nbytes)
            if not owned:
                continue
            if binding.last_load < index and not _part_views(value):
                binding.suspects.append((index, owned))
                binding.view_readers[index] = self._view_readers(owned)
                binding.in_loop = binding.in_loop or bool(self.trips)
            for s in owned:
                last = s.last_use if s.last_use is not None else s.birth
                if last >= index or s.sid in asked:
                    continue
                asked.add(s.sid)
                holders = [(f"{f.name}.{n}" if f.name != "call" else n, v) for f in self.frames
                           for n, v in f.env.items() if s in set(self._storages(v))]
                if not s.held_by:
                    s.held_by = ", ".join(n for n, _ in holders)
                kinds = {holder_kind(v) for _, v in holders}
                s.held_in = next((k for k in ("list", "tuple", "name") if k in kinds), s.held_in)
                s.held_in_loop = s.held_in_loop or bool(self.trips)

    def _view_readers(self, owned: Sequence[Storage]) -> dict[int, list[Binding]]:
        """The bindings the current statement reads that reference each of ``owned`` through a view of it
        (``buf2 = torch.ops.aten._conj.default(buf0)``, read by the op that uses the storage last)."""
        readers: dict[int, list[Binding]] = {}
        sids = {s.sid for s in owned}
        for binding in self.stmt.loaded:
            frame = next((f for f in reversed(self.frames) if f.bindings.get(binding.name) is binding), None)
            if frame is None:
                continue
            for t in _tensors(frame.env.get(binding.name)):
                s = self.keys.get(StorageWeakRef(t.untyped_storage()))
                if s is not None and s.sid in sids and t._is_view():
                    readers.setdefault(s.sid, []).append(binding)
        return readers

    # -- expressions -----------------------------------------------------------------
    def _eval(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._lookup(node)
        if isinstance(node, ast.Attribute):
            return getattr(self._eval(node.value), node.attr)
        if isinstance(node, ast.Subscript):
            return self._eval(node.value)[self._eval(node.slice)]
        if isinstance(node, ast.Tuple):
            return tuple(self._eval(e) for e in node.elts)
        if isinstance(node, ast.List):
            return [self._eval(e) for e in node.elts]
        if isinstance(node, ast.BinOp):
            return _binop(node.op)(self._eval(node.left), self._eval(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self._eval(node.operand)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return _COMPARE[type(node.ops[0])](self._eval(node.left), self._eval(node.comparators[0]))
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            return self._comprehension(node)
        raise self._error(node, f"unsupported expression {type(node).__name__}")

    def _lookup(self, node: ast.Name) -> Any:
        frame = self.frames[-1]
        if node.id in frame.env:
            binding = frame.bindings.get(node.id)
            if binding is not None:
                self.stmt.loaded.append(binding)
            return frame.env[node.id]
        if node.id in self.program.namespace:
            return self.program.namespace[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        raise self._error(node, f"unknown name {node.id!r}")

    def _comprehension(self, node: ast.ListComp | ast.GeneratorExp) -> Any:
        """Only pure-Python comprehensions (``[[] for _ in range(n)]``): no tensors inside."""
        code = compile(ast.Expression(node), "<wrapper comprehension>", "eval")
        value = eval(code, {**self.program.namespace, **self.frames[-1].env})
        if any(True for _ in _tensors(list(value))):
            raise self._error(node, "a comprehension over tensors")
        return list(value)

    def _call(self, node: ast.Call) -> Any:
        func_node = node.func
        root = _root_name(func_node)
        if isinstance(func_node, ast.Name) and func_node.id in self.program.functions and func_node.id != "call":
            return self._subgraph(self.program.functions[func_node.id], node)
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self._error(node, "starred arguments")
        args = [self._eval(a) for a in node.args]
        kwargs = {k.arg: self._eval(k.value) for k in node.keywords if k.arg is not None}
        func = self._eval(func_node)
        if isinstance(func, _Kernel):
            self._work(node, args, kwargs, func.name)
            return None
        if isinstance(func, _Bookkeeping):
            return func(*args, **kwargs)
        if root in _ALLOCATORS and isinstance(func_node, ast.Name):
            self.stmt.work = True
            with self.fake:
                return self._born(node, _ALLOCATORS[root](*args, **kwargs), root)
        if root in _VIEWS and isinstance(func_node, ast.Name):
            with self.fake:
                return _VIEWS[root](*args, **kwargs)
        if isinstance(func_node, ast.Attribute) and isinstance(self._eval(func_node.value), (list, dict)):
            return func(*args, **kwargs)  # list.clear / append / extend on the program's containers
        if func in (len, range, torch.device, int, float, bool, tuple, list):
            return func(*args, **kwargs)
        if _dotted(func_node).startswith("torch.cuda."):
            return None  # device selection and guards
        return self._op(node, func, args, kwargs)

    def _op(self, node: ast.Call, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """An extern kernel or a fallback op, run on fake tensors: what it returns that is new is allocated.

        A call that returns no tensor and writes none of its arguments is a check of their
        metadata (an assert, whatever its name): it is neither work nor a use of its arguments."""
        name = _dotted(node.func)
        operands = list(_tensors((args, kwargs)))
        versions = [t._version for t in operands]
        try:
            with self.fake:
                result = func(*args, **kwargs)
        except AssertionError:
            if _writes_nothing(func, operands, versions):
                # a check that fake metadata cannot satisfy: a fake pointer's alignment, or a layout the
                # real kernel makes and its meta function does not say (the check states the real one)
                with self.fake:
                    _adopt_asserted_layout(args)
                return None
            raise self._error(node, f"{name} failed an assertion on fake tensors") from None
        except Exception as exc:
            raise self._error(node, f"{name} did not run on fake tensors: {type(exc).__name__}: {exc}") from exc
        if _is_check(func, result, operands, versions):
            with self.fake:  # what the check states of a layout is the real one (see _adopt_asserted_layout)
                _adopt_asserted_layout(args)
            return result
        self._work(node, args, kwargs, name)
        return self._born(node, result, name, lambda t: storage_slack(func, args, result, t))

    def _work(self, node: ast.Call, args: list[Any], kwargs: dict[str, Any], name: str) -> None:
        self.stmt.work = True
        self.stmt.writer = self.stmt.writer or _op_label(name, self.program.comments.get(node.lineno, ""))
        self._use(args)
        self._use(list(kwargs.values()))

    def _born(self, node: ast.Call, value: Any, name: str, slack: Callable[[Any], int] | None = None) -> Any:
        """``slack``: bytes the op's kernel allocates for a result beyond its storage's size (a fallback
        op's eager kernel, :func:`conformance.models.transients.storage_slack`)."""
        for t in _tensors(value):
            key = StorageWeakRef(t.untyped_storage())
            if key in self.keys:
                continue
            nbytes = storage_nbytes(t, {}) + (slack(t) if slack is not None else 0)
            s = self.builder.new_storage(nbytes, f"{self.prefix}{name}", name, t, "intermediate")
            s.op_writer = "" if name in _ALLOCATORS else _op_label(name, self.program.comments.get(node.lineno, ""))
            s.modelled_by_program = True
            s.allocated_by_program = name in _ALLOCATORS
            self.keys[key] = s
            self._newly_keyed(key)
            self.stmt.born.append(s)
            self.stmt.work = True
        return value

    def _subgraph(self, fn: ast.FunctionDef, node: ast.Call) -> Any:
        args = [self._eval(a) for a in node.args]
        params = [a.arg for a in fn.args.args]
        if len(params) != len(args):
            raise self._error(node, f"{fn.name} takes {len(params)} arguments, got {len(args)}")
        self.calls[fn.name] = self.calls.get(fn.name, 0) + 1
        outer = self.stmt
        frame = _Frame(fn.name, {})
        self.frames.append(frame)
        self.stmt = _Statement()
        for param, arg in zip(params, args):
            self._bind(frame, param, arg)
        try:
            self._block(fn.body)
            result: Any = None
        except _Return as ret:
            result = ret.value
        finally:
            self._pop_frame()
            self.stmt = outer
        return result

    def _assign(self, target: ast.expr, value: Any) -> None:
        frame = self.frames[-1]
        if isinstance(target, ast.Name):
            self._bind(frame, target.id, value)
            for i, item in enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]:
                for s in self._storages(item):  # name what this statement made after what holds it
                    if s in self.stmt.born:
                        s.producer = f"{self.prefix}{target.id}" + (f"[{i}]" if i is not None else "")
        elif isinstance(target, ast.Subscript):
            self._eval(target.value)[self._eval(target.slice)] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = list(value) if isinstance(value, (list, tuple)) else None
            if items is None or len(items) != len(target.elts):
                raise self._error(target, "cannot unpack the value into the targets")
            for t, v in zip(target.elts, items):
                self._assign(t, v)
        else:
            raise self._error(target, f"unsupported assignment target {type(target).__name__}")

    def _truth(self, test: ast.expr, consume: bool) -> bool:
        """A host-side loop condition: a tensor's truth is the observed trip count's, not data."""
        node = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
        outer, self.stmt = self.stmt, _Statement()  # reading the condition is a load like any other
        value = self._eval(node)
        loaded, self.stmt = self.stmt.loaded, outer
        for binding in loaded:
            binding.last_load = max(binding.last_load, len(self.builder.events) - 1)
        if isinstance(value, torch.Tensor):
            key = (len(self.frames), ast.unparse(node))
            if key not in self.loops:
                trips = self.builder.next_trip_count()
                if trips is None:
                    raise self._error(test, "no observed trip count for this loop")
                self.loops[key] = trips
            left = self.loops[key]
            truth = left > 0
            if consume:
                if left > 0:
                    self.loops[key] = left - 1
                else:
                    del self.loops[key]
        else:
            truth = bool(value)
        return not truth if node is not test else truth

    def _use(self, value: Any) -> None:
        self.stmt.used.extend(_tensors(value))

    def _to_builder(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.layout == torch.sparse_coo:  # its indices' and values' storages
            return tuple(self._to_builder(c) for c in (value._indices(), value._values()))
        if isinstance(value, torch.Tensor):
            return self.keys.get(StorageWeakRef(value.untyped_storage()))
        if isinstance(value, (list, tuple)):
            return tuple(self._to_builder(v) for v in value)
        return None

    def _is_view_call(self, node: ast.Call) -> bool:
        return isinstance(node.func, ast.Name) and node.func.id in _VIEWS

    @staticmethod
    def _name(node: ast.expr) -> str:
        if not isinstance(node, ast.Name):
            raise ProgramError(f"line {getattr(node, 'lineno', '?')}: unsupported augmented target")
        return node.id

    def _error(self, node: ast.AST, what: str) -> ProgramError:
        lineno = getattr(node, "lineno", 0)
        return ProgramError(f"{self.prefix}line {lineno}: {what}: {self.program.line(lineno)!r}")


def _adopt_asserted_layout(args: Sequence[Any]) -> None:
    """A check of the form ``check(t, size, stride, ...)`` (what ``assert_size_stride``, its renamed
    successors and ``assert_tensor_metadata`` take) states the layout the real program has: ``t``'s
    fake takes it, where its storage holds it (a check may pass on fakes whatever the strides:
    ``assert_tensor_metadata`` on torch 2.14).  A fallback kernel may return another layout than its meta function says
    (oneDNN's convolution backward picks its gradient's), and the program asserts the real one."""
    if len(args) < 3 or not isinstance(args[0], torch.Tensor) or args[0].layout != torch.strided:
        return  # a sparse tensor's check states its size only: it has no strides to adopt
    t, size, stride = args[0], args[1], args[2]
    if not (_ints(size, t.dim()) and _ints(stride, t.dim()) and tuple(size) == tuple(t.shape)):
        return
    span = 1 + sum((n - 1) * st for n, st in zip(size, stride)) if all(n > 0 for n in size) else 0
    if (span + t.storage_offset()) * t.element_size() <= t.untyped_storage().nbytes():
        t.as_strided_(tuple(size), tuple(stride), t.storage_offset())


def _ints(value: Any, n: int) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == n and all(isinstance(v, int) for v in value)


def _writes_nothing(func: Any, operands: Sequence[torch.Tensor], versions: Sequence[int]) -> bool:
    """No operand's version moved, and the op (where it has a schema) declares no argument it writes."""
    if any(t._version != v for t, v in zip(operands, versions)):
        return False
    schema = getattr(func, "_schema", None)
    if schema is not None:
        return not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    return not isinstance(func, torch._ops.OpOverloadPacket)  # its overload is decided at the call


def _is_check(func: Any, result: Any, operands: Sequence[torch.Tensor], versions: Sequence[int]) -> bool:
    """A call that allocates nothing, returns no tensor and writes no argument: it only looks."""
    return not any(True for _ in _tensors(result)) and _writes_nothing(func, operands, versions)


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    """The dense tensors in ``value``: a sparse COO tensor is its indices and values (its memory)."""
    if isinstance(value, torch.Tensor) and value.layout == torch.sparse_coo:
        yield value._indices()
        yield value._values()
    elif isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _has_container(value: Any) -> bool:
    """Whether ``value`` is or holds a list or dict: what the program can change in place (``args.clear()``)."""
    if isinstance(value, (list, dict)):
        return True
    return isinstance(value, tuple) and any(_has_container(v) for v in value)


def _part_views(value: Any) -> bool:
    """Whether ``value`` is tensors each viewing only part of its storage: an alias into a buffer
    (``reinterpret_tensor(buf3, ..., 64)  # alias``, a slice a ``cat``'s kernel writes into), which
    the buffer's own name outlives.  Such a name kept past its last read blocks no reuse: a
    storage is reused whole, through the name that owns it."""
    tensors = list(_tensors(value))
    return bool(tensors) and all(
        t.untyped_storage().nbytes() > t.numel() * t.element_size() for t in tensors)


def _root_name(node: ast.expr) -> str:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _dotted(node: ast.expr) -> str:
    return ast.unparse(node)


def _short(text: str, width: int = 72) -> str:
    text = text.split("  #")[0].strip()
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _op_label(name: str, comment: str) -> str:
    """``extern_kernels.mm (aten.mm)``: the call, and the ATen ops inductor says it came from."""
    if "Original ATen: [" in comment:
        aten = comment.split("Original ATen: [", 1)[1].rstrip("]")
        return f"{name} ({aten})"
    return name


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.Div: operator.truediv,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}


def _binop(op: ast.operator) -> Callable[[Any, Any], Any]:
    try:
        return _BINOPS[type(op)]
    except KeyError:
        raise ProgramError(f"unsupported operator {type(op).__name__}") from None


# --------------------------------------------------------------------------- findings


def storage_kind(s: Storage) -> str:
    """What a held storage is, in words that do not change with shapes: a scalar of its dtype (a loop's
    predicate or counter) or a buffer."""
    return f"{s.dtype.removeprefix('torch.')} scalar" if not s.shape else "buffer"


def holder_kind(value: Any) -> str:
    """What kind of reference holds a storage: a container (``list``: the ``args`` list, a
    ``while_loop`` carry list; ``tuple``: an op's result tuple) or a plain ``name``.  Cause
    signatures (:mod:`conformance.checks.cause`) are made of it, never of the names themselves."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, tuple):
        return "tuple"
    return "name"


@dataclass(frozen=True)
class LateRelease:
    """A storage the program kept past its last use (or allocated and never used)."""

    storage: Storage
    kind: str  # "late" | "never-used" | "outlives-step"
    last_use: int  # event index (the allocation, when never used)
    should_die: int  # the first work event after the last use: it must be dead by then
    freed: int | None  # event after which it was freed; None: it outlived the step

    def describe(self, events: Sequence[str]) -> dict[str, Any]:
        s = self.storage
        entry = s.describe()
        entry.update({
            "finding": self.kind,
            "last_use": events[self.last_use] if 0 <= self.last_use < len(events) else "?",
            "should_die_before": events[self.should_die] if 0 <= self.should_die < len(events) else "?",
            "freed_after": events[self.freed] if self.freed is not None else "never (outlives the step)",
            "held_by": s.held_by or "a reference outside the program",
            "held_in": s.held_in,
            "in_loop": s.held_in_loop,
            "released_in_loop": s.freed_in_loop,
            "model_death": f"before {events[self.should_die]}" if 0 <= self.should_die < len(events) else "?",
            "measured_death": f"after {events[self.freed]}" if self.freed is not None else "outlives the step",
        })
        return entry

    def sentence(self, events: Sequence[str]) -> str:
        s = self.storage
        what = f"{s.producer.split(':')[-1]} ({s.op_writer or s.op}, {s.nbytes} B)"
        if self.kind == "never-used":
            return f"{what} is allocated and never used"
        last = events[self.last_use] if 0 <= self.last_use < len(events) else "?"
        freed = events[self.freed] if self.freed is not None else "never"
        holder = f"; held by {s.held_by}" if s.held_by else ""
        return f"{what} last used at `{last}`, freed after `{freed}`{holder}"


@dataclass(frozen=True)
class LateReference:
    """A name the program kept bound past its last read while a storage it referenced had its last use.

    The storage was still needed then (it is not late itself), but the stale reference
    stops the compiler from reusing it in place at that last use: a fallback op's result
    tuple kept alive keeps its items from being overwritten by the kernel that reads
    them last (pytorch/pytorch#163227)."""

    binding: Binding
    should_die: int  # the work event after its last read where a storage it held was last used
    blocked: tuple[Storage, ...]

    def describe(self, events: Sequence[str]) -> dict[str, Any]:
        b = self.binding
        return {
            "finding": "late-reference",
            "producer": b.label,
            "op": "reference",
            "bytes": sum(s.nbytes for s in self.blocked),
            "shape": None,
            "role": "reference",
            "holds": [s.producer.split(":")[-1] for s in self.blocked],
            "held_in": b.kind,
            "holds_kinds": sorted({storage_kind(s) for s in self.blocked}),
            "in_loop": b.in_loop,
            "released_in_loop": b.released_in_loop,
            "last_use": _event(events, b.last_load),
            "should_die_before": _event(events, self.should_die),
            "freed_after": _event(events, b.released) if b.released is not None else "never",
            "model_death": f"before {_event(events, self.should_die)}",
            "measured_death": f"after {_event(events, b.released)}" if b.released is not None else "never",
        }

    def sentence(self, events: Sequence[str]) -> str:
        b = self.binding
        held = ", ".join(f"{s.producer.split(':')[-1]} ({s.nbytes} B)" for s in self.blocked[:3])
        released = f"`{_event(events, b.released)}`" if b.released is not None else "never"
        return (f"reference {b.label} last read at `{_event(events, b.last_load)}`, released at {released}: "
                f"it still referenced {held} at their last use `{_event(events, self.should_die)}`, "
                "so they could not be reused in place")


def _event(events: Sequence[str], i: int | None) -> str:
    return events[i] if i is not None and 0 <= i < len(events) else "?"


def late_references(bindings: Iterable[Binding]) -> list[LateReference]:
    """Bindings still referencing a storage at its last use, after their own last read (pure)."""
    found = []
    for b in bindings:
        for event, held in b.suspects:
            if event <= b.last_load:
                continue
            readers = b.view_readers.get(event, {})
            blocked = tuple(s for s in held if s.last_use == event and not _outlived(b, readers.get(s.sid, [])))
            if blocked:
                found.append(LateReference(b, event, blocked))
                break
    return found


def _outlived(b: Binding, view_readers: Sequence[Binding]) -> bool:
    """Whether a name the last use reads, bound to a view of the storage, holds it as long as ``b`` does:
    a storage read through a view cannot be reused in place by that statement (a buffer is reused whole,
    through its own tensor), and the view's name keeps it until that name's release, so ``b`` released
    before any work follows the view's release blocks nothing (a conjugate view ``buf2 = aten._conj(buf0)``
    read by a clone, then ``del buf0; del buf2`` in either order)."""
    def until(x: Binding) -> float:
        return float("inf") if x.settled is None else x.settled

    return b.released is not None and any(
        r is not b and r.released is not None and until(b) <= until(r) for r in view_readers)


def late_releases(events: Sequence[str], storages: Iterable[Storage], work_events: set[int]) -> list[LateRelease]:
    """Every storage the program must free that was not freed before the first work after its last use.

    Pure: reads births, deaths, last uses and which events did work (allocated or computed)."""
    work = sorted(work_events)
    found: list[LateRelease] = []

    def first_work_after(i: int) -> int | None:
        import bisect

        k = bisect.bisect_right(work, i)
        return work[k] if k < len(work) else None

    for s in storages:
        if s.role not in FREED_BY_PROGRAM or not s.nbytes or not s.modelled_by_program:
            continue
        used = s.last_use is not None and s.last_use > s.birth
        last = s.last_use if used and s.last_use is not None else s.birth
        if not used and s.allocated_by_program:
            found.append(LateRelease(s, "never-used", last, last, s.death))
            continue
        due = first_work_after(last)
        if s.death is None:
            found.append(LateRelease(s, "outlives-step", last, due if due is not None else len(events) - 1, None))
        elif due is not None and s.death >= due:
            found.append(LateRelease(s, "late", last, due, s.death))
    return found
