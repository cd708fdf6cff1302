"""The op sweep: every OpInfo of PyTorch's own op database (``op_db``) as cases, per sample.

A vendor bringing up a backend asks first which operators it gets right.  PyTorch's
``torch.testing._internal.common_methods_invocations.op_db`` holds, for each operator, sample
inputs its own tests run; this family makes the first :data:`MAX_SAMPLES` CPU float32
samples of each OpInfo (as its own tests draw them, each seeded with their fixed seed, in the order the
OpInfo yields them) a case for inference, ``op-<name>[.<variant>]-<k>-infer``, and, where the op supports
autograd and the sample has a differentiable input, a training step ``op-...-<k>-train``:
each differentiable input scaled elementwise by a learnable tensor of ones (so the step has
parameters whose gradients are the inputs' gradients) and the loss the mean square plus the
mean of every floating output, as the module sweep makes it (:mod:`conformance.cases.modules`).
The sample's ``output_process_fn_grad`` (what OpInfo's gradient tests apply to make an output
unique, e.g. an eigenvector's sign) is applied to the outputs.  A training step stops at
backward (``optimizer="none"``): an optimizer step would move inputs out of an op's domain.

Every tensor of a sample (also inside lists and keyword arguments) is an input of the case,
drawn again from the call's seed on every later call (:func:`_later_inputs`); every other argument
(ints, dtypes, strings) is a constant of the step.  What the sweep cannot run is listed, never dropped
(:func:`left_out`): an OpInfo without float32 on the CPU, a sample holding a value that is
not a plain tensor or number (a sparse tensor, a module, an options object), a sample plain
eager PyTorch cannot run on the CPU, or whose outputs are not tensors or differ between two
eager runs (uninitialised memory).  :func:`census` counts what ``op_db`` offers, so a test
holds registered + left out = offered.

**Other dtypes, opted in by name.**  ``op-<key>-<k>-<dtype>-{infer,train}`` (``op-add-0-float64-infer``) is
the same case drawn from ``op.sample_inputs("cpu", <dtype>)`` for an OpInfo that supports the dtype on the CPU,
screened the same way (left-out labels carry the dtype: ``op-<key>-<k>-float64``), registered only when a
``--case`` pattern names the dtype (:func:`dtypes_named`: ``op-*`` stays the float32 sweep), cached apart
(:func:`cache_path`), held to that dtype's tolerance (:data:`TOLERANCES`) and its ulp (the references read the
dtype the case is written in), and requiring ``dtype:<name>``: a backend that does not claim the dtype
(:attr:`conformance.api.adapter.Capabilities.dtypes`) skips it with that reason.

``op_db`` imports ``expecttest`` (``pip install 'torch-conformance[ops]'``) and costs seconds
to import and screen, so the family registers lazily: only when a ``--case`` pattern could
name an ``op-`` id (:func:`conformance.api.case.lazy_family`); a worker process resolves one
id by building its one op (:func:`case_from_id`).  Not in a run that names no case.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import random
import re
import sys
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from conformance.api.case import (
    Case,
    CaseKind,
    Tolerance,
    Workload,
    add_resolver,
    lazy_family,
    leave_out,
    register,
    unavailable,
)
from conformance.api.step import to_dtype
from conformance.util.environment import DEFAULT_OP_SAMPLES, EnvironmentProblem, op_samples
from conformance.util.paths import cache_home

FAMILY = "ops"
PREFIX = "op-"
#: samples per op (its first ones): 2, or ``CONFORMANCE_OP_SAMPLES`` (a wider sweep: later samples keep their
#: ids, ``op-<key>-<k>-...`` with ``k`` their place among the op's samples)
try:
    MAX_SAMPLES = op_samples()
except EnvironmentProblem:  # refused in one line by every entry point (conformance.util.environment): not here
    MAX_SAMPLES = DEFAULT_OP_SAMPLES
#: how many of an op's samples are looked at to find MAX_SAMPLES whose tensors are not empty
SCAN = 200
SAMPLE_SEED = 0
DTYPE = torch.float32
FLOAT32 = "float32"
#: the other dtypes an op case can be in, opted in by name (``--case 'op-*-float64-*'``): torch's names
OTHER_DTYPES = ("float64", "bfloat16", "float16")
#: parity tolerance per dtype: float32 keeps the harness default; float64 the same ~840 ulps of its own (a backend
#: computing a float64 case in float32 is ~1e-7 off); the half types generated.py's (a few ulps at 1.0)
TOLERANCES = {FLOAT32: Tolerance(), "float64": Tolerance(rtol=1e-12, atol=1e-13),
              "bfloat16": Tolerance(rtol=3e-2, atol=3e-2), "float16": Tolerance(rtol=4e-3, atol=4e-3)}
STEPS = ("infer", "train")
#: a constant of a step: what a case can carry besides tensors (baked into the step, as written)
PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.memory_format, torch.layout, torch.device, slice,
         type(Ellipsis))
_ID = re.compile(rf"^{PREFIX}(?P<key>.+)-(?P<k>\d+)(?:-(?P<dtype>{'|'.join(OTHER_DTYPES)}))?-(?P<step>infer|train)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]")


@dataclass(frozen=True)
class OpId:
    """What an op case's id says: ``op-<key>-<k>[-<dtype>]-<step>`` (no dtype part: float32, the sweep's own)."""

    key: str
    k: int
    dtype: str
    step: str

    @property
    def trains(self) -> bool:
        return self.step == STEPS[1]


def parse_id(case_id: str) -> OpId | None:
    """An op case's id taken apart, or ``None`` for another id (the coverage table and benchmarks read it)."""
    m = _ID.match(case_id)
    return None if m is None else OpId(m["key"], int(m["k"]), m["dtype"] or FLOAT32, m["step"])


def op_label(key: str, k: int | None = None, dtype: str = FLOAT32, step: str | None = None) -> str:
    """An op case's id (``k`` and ``step`` given), or a left-out line's label: ``op-<key>[-<k>][-<dtype>][-<step>]``,
    the dtype named unless float32 (so ``op-*`` is the float32 sweep, as it always was)."""
    parts = [f"{PREFIX}{key}", *([str(k)] if k is not None else []), *([dtype] if dtype != FLOAT32 else []),
             *([step] if step is not None else [])]
    return "-".join(parts)


def dtypes_named(patterns: Sequence[str]) -> dict[str, list[str]]:
    """The patterns by the dtype whose cases they name: a pattern holding another dtype's name past the op's
    (``op-*-float64-*``, not ``op-bfloat16-*``: the op ``Tensor.bfloat16``) names that dtype's cases, any other
    pattern the float32 sweep's."""
    named: dict[str, list[str]] = {}
    for pattern in patterns:
        past_op = "-".join(pattern.split("-")[2:])
        for dtype in [d for d in OTHER_DTYPES if re.search(rf"(?<![A-Za-z]){d}(?![0-9])", past_op)] or [FLOAT32]:
            named.setdefault(dtype, []).append(pattern)
    return named


@dataclass(frozen=True)
class LeftOut:
    """What the sweep does not run, and why: an op (``op-<key>``), a sample (``op-<key>-<k>``) or one
    of its steps (``op-<key>-<k>-train``)."""

    label: str
    op: str  # the OpInfo's key (name[.variant])
    sample: int | None
    reason: str


@dataclass(frozen=True)
class Screened:
    """One op's cases and what it leaves out (a pure function of the op and this torch release)."""

    key: str
    cases: tuple[Case, ...]
    left_out: tuple[LeftOut, ...]
    samples: int  # the samples the op offers to the sweep (at most MAX_SAMPLES)
    trains: bool  # the op supports autograd (a training step per sample is offered)


def available() -> bool:
    """Whether ``op_db`` can import here (it needs ``expecttest``): found on the path, not imported."""
    return importlib.util.find_spec("expecttest") is not None


@functools.cache
def op_db() -> tuple[Any, ...]:
    """PyTorch's OpInfo database at the installed release (seconds to import: only when asked)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db as db
    return tuple(db)


def key_of(op: Any) -> str:
    """The id part naming an OpInfo: ``name[.variant]``, characters outside an id's replaced by ``_``."""
    name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    return _UNSAFE.sub("_", name)


@functools.cache
def _by_key() -> dict[str, Any]:
    index: dict[str, Any] = {}
    for op in op_db():
        index.setdefault(key_of(op), op)  # a collision would be a second screening's left-out line
    return index


def _unseeded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """OpInfo's ``wrapper_set_seed`` without its seeding: the op itself, drawing from the generator as the
    caller left it."""
    return fn(*args, **kwargs)


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the functions defined in it read."""
    nested = (c for c in code.co_consts if isinstance(c, types.CodeType))
    return set(code.co_names).union(*(_names(c) for c in nested))


@functools.cache
def own_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` calling its op itself where it calls OpInfo's ``wrapper_set_seed`` (a random op's OpInfo).

    That wrapper copies the generator's state (``torch.get_rng_state()``: 5,056 B on the CPU), seeds 42
    and restores the state around the op: inside the step, the copy would be memory no op holds, and
    every call would draw the same numbers whatever the case's seed.  The case's step draws from the
    generator as the harness seeds it (random values are then recognised as such by the parity check);
    the screening keeps the wrapped op, whose reseeding makes two runs agree unless memory is read
    uninitialised."""
    if not isinstance(fn, types.FunctionType):
        return fn
    from torch.testing._utils import wrapper_set_seed

    wrapped = {n for n in _names(fn.__code__) if fn.__globals__.get(n) is wrapper_set_seed}
    if not wrapped:
        return fn
    scope = {**fn.__globals__, **dict.fromkeys(wrapped, _unseeded)}
    own = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    own.__kwdefaults__ = fn.__kwdefaults__
    return own


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def _sample_iteration() -> Iterator[None]:
    """OpInfo's sample iterators, without the costs of a test suite's scaffolding; the same samples.

    Each iterator looks for the unittest test drawing it (``extract_test_fn``, whose name would seed it):
    ``inspect.stack()`` over every frame, and for each frame whose file is no module's, a scan of
    ``sys.modules``.  No ``unittest.TestCase`` calls a case's steps, so the lookup finds nothing; here it
    is not made.  Before each sample it seeds torch (``set_rng_seed``): ``torch.manual_seed`` also queues
    the seed for the CUDA, XPU and MTIA generators not yet started, with the formatted stack of the call.
    Here it seeds the CPU's generator (the samples are drawn on the CPU, from it), Python's and NumPy's.
    In a ``conformance run`` process (pytest's frames, thousands of modules), the two cost most of a
    second per op case's references."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    def set_rng_seed(seed: int | None = None) -> None:
        seed = common_utils.SEED if seed is None else seed
        torch.random.default_generator.manual_seed(seed)
        random.seed(seed)
        if common_utils.TEST_NUMPY:
            import numpy

            numpy.random.seed(seed)

    def no_test() -> None:
        return None

    # the names where torch's sample iteration looks them up (OpInfo's module imported its own binding)
    patched = [(common_utils, "extract_test_fn", no_test), (core, "extract_test_fn", no_test),
               (common_utils, "set_rng_seed", set_rng_seed)]
    real = [(module, name, getattr(module, name)) for module, name, _ in patched if hasattr(module, name)]
    for module, name, value in patched:
        if hasattr(module, name):
            setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in real:
            setattr(module, name, value)


def draw_samples(op: Any, dtype: str = FLOAT32, fresh: bool = False) -> list[Any]:
    """The op's first samples whose tensors are not empty (among the first :data:`SCAN` it yields; its
    first one, empty, where none is).  OpInfo seeds each sample itself (its test suite's fixed seed): the
    samples of a case's first call.  ``fresh``: drawn from the random state in force instead (a later
    call's, :func:`_later_inputs`).

    OpInfos often yield an empty tensor first: a case on it computes nothing and holds no memory."""
    full: list[Any] = []
    empty: list[Any] = []
    with _quiet(), _sample_iteration():
        for n, sample in enumerate(op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=op.supports_autograd,
                                                    set_seed=not fresh)):
            tensors = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
                       if isinstance(t, torch.Tensor)]
            (full if all(t.numel() for t in tensors) else empty).append(sample)
            if len(full) == MAX_SAMPLES or n + 1 == SCAN:
                break
    return full or empty[:1]


def _seeded_samples(op: Any, seed: int = SAMPLE_SEED, dtype: str = FLOAT32) -> list[Any]:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return draw_samples(op, dtype)


@dataclass(frozen=True)
class _Call:
    """A sample taken apart: its tensors (the case's inputs) and the rest (constants of the step)."""

    spec: Any  # the pytree spec of (input, args, kwargs)
    leaves: tuple[Any, ...]  # tensors replaced by None
    positions: tuple[int, ...]  # where the tensors go
    tensors: tuple[torch.Tensor, ...]
    differentiable: tuple[bool, ...]  # per tensor: requires grad in the sample


def _take_apart(sample: Any) -> _Call:
    flat, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    positions = tuple(i for i, leaf in enumerate(flat) if isinstance(leaf, torch.Tensor))
    tensors = tuple(flat[i] for i in positions)
    leaves = tuple(None if i in positions else leaf for i, leaf in enumerate(flat))
    return _Call(spec, leaves, positions, tuple(t.detach() for t in tensors),
                 tuple(bool(t.requires_grad and t.is_floating_point()) for t in tensors))


def _plain_problem(sample: Any) -> str | None:
    """Why a sample's arguments cannot be a case's inputs and constants, or ``None``."""
    flat, _ = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    for leaf in flat:
        if isinstance(leaf, torch.Tensor):
            if leaf.layout != torch.strided:
                return f"a {str(leaf.layout).removeprefix('torch.')} tensor argument (a case's inputs are strided)"
            if leaf.is_complex():
                return "a complex tensor argument (the references are real float64/float32)"
            if leaf.is_quantized or leaf.is_nested:
                return "a quantized or nested tensor argument"
        elif not isinstance(leaf, PLAIN):
            return f"an argument of type {type(leaf).__name__}, neither a tensor nor a number"
    return None


@dataclass(frozen=True)
class _Shared:
    """The constants of a step, shared by its copies (the references deep-copy the module): immutable."""

    spec: Any
    leaves: tuple[Any, ...]
    positions: tuple[int, ...]

    def __deepcopy__(self, memo: dict[int, Any]) -> _Shared:
        return self


class OpStep(nn.Module):
    """One op called on one sample as a step: its tensor outputs, or (training) the mean square plus
    the mean of each floating output, summed, with each differentiable input scaled by a learnable
    tensor of ones (the op has no parameters of its own; the scales' gradients are the inputs')."""

    def __init__(self, op: Callable[..., Any], call: _Call, process: Callable[[Any], Any], trains: bool,
                 dtype: str = FLOAT32) -> None:
        super().__init__()
        self.op, self.process, self.trains = op, process, trains
        self.call = _Shared(call.spec, call.leaves, call.positions)
        self.scaled = tuple(i for i, d in enumerate(call.differentiable) if d) if trains else ()
        self.scales = nn.ParameterList([nn.Parameter(torch.ones(call.tensors[i].shape, dtype=getattr(torch, dtype)))
                                        for i in self.scaled])

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        leaves = list(self.call.leaves)
        scales = dict(zip(self.scaled, self.scales, strict=True))
        for n, (position, t) in enumerate(zip(self.call.positions, tensors, strict=True)):
            leaves[position] = t * scales[n] if n in scales else t
        inp, args, kwargs = tree_unflatten(leaves, self.call.spec)
        out = self.process(self.op(inp, *args, **kwargs))
        if not self.trains:
            return out if isinstance(out, torch.Tensor) else tuple(tree_flatten(out)[0])
        return sum((t.square().mean() + t.mean() for t in loss_terms(out)), torch.zeros((), dtype=_dtype(tensors)))


def _dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype:
    """The loss's accumulator dtype: the inputs' floating dtype (float64 in the reference)."""
    return next((t.dtype for t in tensors if t.is_floating_point()), torch.get_default_dtype())


def loss_terms(out: Any) -> list[torch.Tensor]:
    """The outputs a training step's loss is made of: floating (a complex one as its real and imaginary
    parts) and not empty (an empty mean is NaN)."""
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.numel() > 0]
    return [torch.view_as_real(t.resolve_conj()) if t.is_complex() else t
            for t in tensors if t.is_floating_point() or t.is_complex()]


def _identity(out: Any) -> Any:
    return out


def _workload(op: Any, sample: Any, trains: bool, reached: tuple[bool, ...] | None = None,
              own: bool = True, dtype: str = FLOAT32) -> Workload:
    """The step on ``sample``; ``reached``: which of its differentiable inputs the loss reaches (only those
    are scaled: a scale the loss does not reach has no gradient, which a step's ``autograd.grad`` refuses);
    ``own``: the op called itself (:func:`own_call`), not through OpInfo's reseeding wrapper; ``dtype``: the case's
    (its scales', so a float64 case computes in float64 throughout)."""
    call = _take_apart(sample)
    if trains:
        reached = _reached(op, sample, dtype) if reached is None else reached
        call = dataclasses.replace(call, differentiable=tuple(d and r for d, r in zip(
            call.differentiable, reached, strict=True)))
    process = sample.output_process_fn_grad or _identity
    return Workload(OpStep(own_call(op.op) if own else op.op, call, process, trains, dtype), call.tensors)


def _reached(op: Any, sample: Any, dtype: str = FLOAT32) -> tuple[bool, ...]:
    """Per tensor of ``sample``: whether the training loss has a gradient for it (one trial step, its random
    draws forked away, on copies of the sample's tensors: an op that updates an input in place, batch norm's
    running statistics, would otherwise leave the first build of each process an input updated once)."""
    call = _take_apart(sample)
    with torch.random.fork_rng(), _quiet():
        step = OpStep(own_call(op.op), call, sample.output_process_fn_grad or _identity, True, dtype)
        loss = step(*(t.clone() for t in call.tensors))
        if not step.scaled or not loss.requires_grad:
            return tuple(False for _ in call.tensors)
        grads = torch.autograd.grad(loss, list(step.scales), allow_unused=True)
    used = dict(zip(step.scaled, (g is not None for g in grads), strict=True))
    return tuple(used.get(n, False) for n in range(len(call.tensors)))


def _builder(key: str, k: int, trains: bool, dtype: str = FLOAT32) -> Callable[[int], Workload]:
    reached: list[tuple[bool, ...]] = []  # found once per process: the sample's structure is the seed's

    def build(seed: int) -> Workload:
        op = _by_key()[key]
        sample = draw_samples(op, dtype)[k]  # Case.build / inputs_for seed the draw
        if trains and not reached:
            reached.append(_reached(op, sample, dtype))
        return _workload(op, sample, trains, reached[0] if trains else None, dtype=dtype)

    return build


def _later_inputs(key: str, k: int, dtype: str = FLOAT32) -> Callable[[int], tuple[torch.Tensor, ...]]:
    """A later call's inputs (``Case.make_inputs``): the sample drawn again, from the call's seed.

    OpInfo seeds every sample with its test suite's fixed seed, so the first call's draw would give every
    call the same values, and a backend returning a stale result would pass.  A later call draws the
    same sample function from the call's seed (``Case.inputs_for`` sets torch's; Python's and NumPy's, which
    some sample functions draw from, are seeded from it here and put back after): values in the op's
    domain, as OpInfo makes them.  Where that draw is not the first call's sample with other values (its
    constants, shapes or dtypes differ: a sample function that draws them), the call gets the first call's
    values again."""
    first: list[_Call] = []  # the first call's sample, taken apart (once per process)

    def inputs(call: int) -> tuple[torch.Tensor, ...]:
        op = _by_key()[key]
        with _python_rngs(torch.initial_seed()):
            samples = draw_samples(op, dtype, fresh=True)
        if not first:
            with torch.random.fork_rng(), _python_rngs(0):
                first.append(_take_apart(draw_samples(op, dtype)[k]))
        if len(samples) > k and _same_structure(drawn := _take_apart(samples[k]), first[0]):
            return drawn.tensors
        return tuple(t.clone() for t in first[0].tensors)

    return inputs


@contextlib.contextmanager
def _python_rngs(seed: int) -> Iterator[None]:
    """Python's and NumPy's global generators seeded from ``seed`` inside, as they were after."""
    state = random.getstate()
    numpy = importlib.import_module("numpy") if importlib.util.find_spec("numpy") is not None else None
    numpy_state = numpy.random.get_state() if numpy is not None else None
    random.seed(seed)
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
    try:
        yield
    finally:
        random.setstate(state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)


def _same_structure(a: _Call, b: _Call) -> bool:
    """Two draws of a sample that differ in their tensors' values only."""
    return (a.spec == b.spec and a.positions == b.positions and repr(a.leaves) == repr(b.leaves)
            and a.differentiable == b.differentiable
            and all(x.shape == y.shape and x.dtype == y.dtype and x.stride() == y.stride()
                    for x, y in zip(a.tensors, b.tensors, strict=True)))


def _output_problem(out: Any) -> str | None:
    leaves = tree_flatten(out)[0]
    other = next((leaf for leaf in leaves if not isinstance(leaf, torch.Tensor)), None)
    if other is not None or not leaves:
        return f"returns a Python {type(other).__name__ if leaves else 'empty container'}, not tensors"
    return None


def _layout_problem(op: Any, sample: Any) -> str | None:
    """Why the op's own result (before OpInfo's ``output_process_fn_grad``, which may densify it) is outside
    the lifetime model, or ``None``: the model follows strided tensors' storages."""
    with torch.no_grad():
        raw = op.op(sample.input, *sample.args, **sample.kwargs)
    other = next((t for t in tree_flatten(raw)[0] if isinstance(t, torch.Tensor) and t.layout != torch.strided), None)
    if other is not None:
        return (f"makes a {str(other.layout).removeprefix('torch.')} tensor: the lifetime model follows strided "
                "tensors' storages")
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:140] if text else ''}".rstrip(": ")


def _run(op: Any, sample: Any, trains: bool, seed: int, dtype: str = FLOAT32) -> Any:
    """The step as plain eager PyTorch runs it at the sample's seed (screening, not a case's run), through
    OpInfo's reseeding wrapper where the op has one: two runs of a random op then agree."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        workload = _workload(op, sample, trains, own=False, dtype=dtype)
        if not trains:
            with torch.no_grad():
                return workload.model(*workload.inputs)
        loss = workload.model(*workload.inputs)
        loss.backward()
        return loss.detach()


def _same(a: Any, b: Any) -> bool:
    fa, fb = tree_flatten(a)[0], tree_flatten(b)[0]
    return len(fa) == len(fb) and all(
        x.shape == y.shape and x.dtype == y.dtype and bool(((x == y) | (x.isnan() & y.isnan())).all())
        for x, y in zip(fa, fb, strict=True))


def _screen_sample(op: Any, sample: Any, trains: bool, dtype: str = FLOAT32) -> str | None:
    """Why plain eager PyTorch cannot run this step on the CPU as a case, or ``None``."""
    try:
        with _quiet():
            first = _run(op, sample, trains, 1, dtype)
    except Exception as exc:
        return f"plain eager PyTorch cannot run it on the CPU ({_first_line(exc)})"
    if not trains and (problem := _output_problem(first) or _layout_problem(op, sample)) is not None:
        return problem
    if trains and dtype != FLOAT32 and not bool(first.isfinite().all()) and _finite_at_float64(op, sample, dtype):
        return f"the training loss overflows {dtype} (finite at float64: the loss squares the outputs)"
    with _quiet(), _filling_uninitialised():
        second = _run(op, sample, trains, 2, dtype)
    differ = not _same(first, second)
    _overwrite(second)
    if differ:
        return "two eager runs of the same sample differ (uninitialised memory or unseeded random draws)"
    return None


def _overwrite(out: Any) -> None:
    """Overwrite the NaN-filled run's outputs before they are freed: the allocator hands the same memory to
    the next uninitialised tensor of that size, whose NaN would then match a later NaN-filled run's."""
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and t.numel() and not t.is_complex() and t.dtype != torch.bool:
            with torch.no_grad():
                t.detach().fill_(7)


def _finite_at_float64(op: Any, sample: Any, dtype: str) -> bool:
    """Whether the training step's loss is finite when the sample is computed at float64 (float16's mean square
    overflows on outputs past 256, where the reference's is finite: the case could only fail)."""
    with torch.random.fork_rng(), _quiet():
        torch.manual_seed(1)
        workload = to_dtype(_workload(op, sample, True, own=False, dtype=dtype), torch.float64)
        return bool(workload.model(*workload.inputs).detach().isfinite().all())


@contextlib.contextmanager
def _filling_uninitialised() -> Iterator[None]:
    """Deterministic mode, where ``torch.empty`` and its kin fill their memory (NaN): an output read
    from uninitialised memory then differs from a run outside it."""
    was, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)


def _train_problem(op: Any, sample: Any, dtype: str = FLOAT32) -> str | None:
    """Why a sample (that runs for inference) makes no training step, or ``None``."""
    if not any(_take_apart(sample).differentiable):
        return "no differentiable floating input"
    with _quiet():
        if not any(_reached(op, sample, dtype)):
            return "the loss reaches no differentiable input"
    with _quiet():
        out = _run(op, sample, False, 1, dtype)
    if not loss_terms(out):
        floating = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)
                    and (t.is_floating_point() or t.is_complex())]
        return "its floating outputs are empty (no loss to make)" if floating else "no floating output to make a loss"
    return None


def screen(op: Any, dtype: str = FLOAT32) -> Screened:
    """The op's cases and left-out lines in ``dtype`` (imports nothing; ``op`` is an OpInfo)."""
    key = key_of(op)
    whole = op_label(key, dtype=dtype)
    if not op.supports_dtype(getattr(torch, dtype), "cpu"):
        return Screened(key, (), (LeftOut(whole, key, None, f"no {dtype} samples on the CPU"),), 0, False)
    try:
        samples = _seeded_samples(op, dtype=dtype)
    except Exception as exc:
        return Screened(key, (), (LeftOut(whole, key, None, f"its samples do not generate ({_first_line(exc)})"),),
                        0, False)
    if not samples:
        return Screened(key, (), (LeftOut(whole, key, None, f"no CPU {dtype} samples"),), 0, False)
    cases: list[Case] = []
    out: list[LeftOut] = []
    for k, sample in enumerate(samples):
        problem = _plain_problem(sample)
        if problem is not None:
            out.append(LeftOut(op_label(key, k, dtype), key, k, problem))
            continue
        steps = (False, True) if op.supports_autograd else (False,)
        for trains in steps:
            step = STEPS[trains]
            try:
                why = ((_train_problem(op, sample, dtype) if trains else None)
                       or _screen_sample(op, sample, trains, dtype))
            except Exception as exc:  # the sweep's own step around the op fails: named, not dropped
                why = f"the step around the op fails ({_first_line(exc)})"
            if why is not None:
                out.append(LeftOut(op_label(key, k, dtype, step if trains else None), key, k, why))
                if not trains:
                    break  # a sample eager cannot run for inference is left out whole
                continue
            cases.append(_case(op, key, k, sample, trains, dtype))
    return Screened(key, tuple(cases), tuple(out), len(samples), bool(op.supports_autograd))


def _case(op: Any, key: str, k: int, sample: Any, trains: bool, dtype: str = FLOAT32) -> Case:
    shapes = ", ".join("x".join(map(str, t.shape)) or "scalar" for t in _take_apart(sample).tensors)
    return _make_case(key, k, trains,
                      f"torch op {op.name}{f' ({op.variant_test_name})' if op.variant_test_name else ''}, "
                      f"OpInfo sample {k} ({shapes or 'no tensors'}){f', {dtype}' if dtype != FLOAT32 else ''}"
                      f"{', training step' if trains else ''}", dtype)


def _make_case(key: str, k: int, trains: bool, description: str, dtype: str = FLOAT32) -> Case:
    """A case of the sweep; one in another dtype than float32 requires the backend to claim it (``dtype:<name>``)
    and is held to that dtype's tolerance (its noise floor is that dtype's ulp: the reference reads the case's)."""
    kind: CaseKind = "train_step" if trains else "inference"
    requires = ({"training"} if trains else set()) | ({f"dtype:{dtype}"} if dtype != FLOAT32 else set())
    return Case(op_label(key, k, dtype, STEPS[trains]), kind, FAMILY, SAMPLE_SEED, _builder(key, k, trains, dtype),
                make_inputs=_later_inputs(key, k, dtype), trains=trains, requires=frozenset(requires), in_default=False,
                optimizer="none" if trains else None, description=description, tolerance=TOLERANCES[dtype])


@functools.cache
def unplaced(key: str, dtype: str = FLOAT32) -> str | None:
    """Why an op case of another release or backend cannot be placed in this torch release's sweep (its op or
    its dtype is none the sweep has here), or ``None``: it can."""
    if dtype not in (FLOAT32, *OTHER_DTYPES):
        return f"dtype {dtype!r} is none the op sweep runs here ({', '.join((FLOAT32, *OTHER_DTYPES))})"
    if key not in _by_key():
        return f"no op {key!r} in this torch's op database (torch {torch.__version__}; a record of another release?)"
    return None


def _screened(key: str, dtype: str = FLOAT32) -> Screened:
    return screen(_by_key()[key], dtype)


#: screening more ops than this says so on stderr, and how far it got every :data:`_SAID_EVERY` ops: the whole
#: sweep takes minutes, and a run that names ``op-*`` shows nothing else until it is done
_SAY_FROM, _SAID_EVERY = 50, 100


def sweep(keys: Sequence[str] | None = None, dtype: str = FLOAT32) -> list[Screened]:
    """Every op's screening in ``dtype`` (or the ops named by ``keys``), in ``op_db``'s order, screened here."""
    names = list(_by_key()) if keys is None else list(keys)
    fresh = sum(1 for key in names if (key, dtype) not in _SCREENED_HERE)
    out = []
    for i, key in enumerate(names, 1):
        out.append(_screened(key, dtype))
        _SCREENED_HERE.add((key, dtype))
        if fresh >= _SAY_FROM and (i == 1 or i % _SAID_EVERY == 0 or i == len(names)):
            _say(f"screening torch's op database for the op sweep ({dtype}; once per torch release, then "
                 f"cached under {cache_path(dtype).parent}): {i} of {len(names)} ops")
    return out


_SCREENED_HERE: set[tuple[str, str]] = set()


def _say(line: str) -> None:
    print(f"conformance: {line}", file=sys.stderr, flush=True)


def cache_path(dtype: str = FLOAT32) -> Path:
    """Where the whole sweep's screening is kept: per torch release, version of this module and dtype (float32's
    file has no dtype in its name)."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    suffix = (f"-{dtype}" if dtype != FLOAT32 else "") + (f"-{MAX_SAMPLES}samples" if MAX_SAMPLES != 2 else "")
    return cache_home() / "op-sweep" / f"torch-{_UNSAFE.sub('_', torch.__version__)}-{digest}{suffix}.json"


def _to_json(screened: Sequence[Screened]) -> dict[str, Any]:
    return {"torch": torch.__version__, "ops": [
        {"key": s.key, "samples": s.samples, "trains": s.trains,
         "cases": [{"id": c.id, "description": c.description} for c in s.cases],
         "left_out": [[lo.label, lo.sample, lo.reason] for lo in s.left_out]} for s in screened]}


def _from_json(data: dict[str, Any]) -> list[Screened]:
    out = []
    for op in data["ops"]:
        cases = []
        for c in op["cases"]:
            parsed = parse_id(c["id"])
            assert parsed is not None
            cases.append(_make_case(parsed.key, parsed.k, parsed.trains, c["description"], parsed.dtype))
        out.append(Screened(op["key"], tuple(cases), tuple(LeftOut(label, op["key"], k, reason)
                                                          for label, k, reason in op["left_out"]),
                            op["samples"], op["trains"]))
    return out


def _cached_sweep(path: Path) -> tuple[Screened, ...] | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AssertionError):
        return tuple(_from_json(json.loads(path.read_text())))
    return None


@contextlib.contextmanager
def _one_screener(path: Path) -> Iterator[None]:
    """Held while this process screens for ``path``: the processes of a run (``-n 2``, its isolation workers)
    that all find no cache wait for the first one's file instead of each screening the whole sweep again.
    Without a lock file (an unwritable cache, no ``fcntl``) each screens on its own, as before."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "a")  # held across the yield
    except (ImportError, OSError):
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@functools.cache
def whole_sweep(dtype: str = FLOAT32) -> tuple[Screened, ...]:
    """Every op's screening in ``dtype``, from the cache where a run here made it (screening takes minutes)."""
    path = cache_path(dtype)
    cached = _cached_sweep(path)
    if cached is not None:
        return cached
    with _one_screener(path):
        cached = _cached_sweep(path)  # another process screened while this one waited
        if cached is not None:
            return cached
        screened = sweep(dtype=dtype)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(_to_json(screened)))
            tmp.replace(path)
    return tuple(screened)


def left_out(keys: Sequence[str] | None = None, dtype: str = FLOAT32) -> list[tuple[str, str]]:
    """What the sweep leaves out, with why, as ``(label, reason)`` (machine-readable: the coverage table's)."""
    found = [(lo.label, lo.reason) for s in (whole_sweep(dtype) if keys is None else sweep(keys, dtype))
             for lo in s.left_out]
    collisions = len(op_db()) - len(_by_key())
    if keys is None and collisions:
        found.append((f"{PREFIX}*", f"{collisions} OpInfos whose names sanitize to a key already taken"))
    return found


@dataclass(frozen=True)
class Census:
    """What ``op_db`` offers the sweep, counted apart from the sweep's own bookkeeping."""

    ops: int  # OpInfos
    float32_ops: int  # with float32 on the CPU
    samples: int  # at most MAX_SAMPLES per float32 op
    steps: int  # samples, plus one training step per sample of an op with autograd


def census(keys: Sequence[str] | None = None) -> Census:
    ops = [_by_key()[k] for k in (list(_by_key()) if keys is None else keys)]
    float32 = [op for op in ops if op.supports_dtype(DTYPE, "cpu")]
    samples = {key_of(op): len(_seeded_samples(op)) for op in float32}
    steps = sum(n * (2 if op.supports_autograd else 1) for op in float32 for n in [samples[key_of(op)]])
    return Census(len(ops), len(float32), sum(samples.values()), steps)


def case_from_id(case_id: str) -> Case | None:
    """An op case by its id, building only its op (a worker resolves the one case it runs)."""
    parsed = parse_id(case_id)
    if parsed is None or not available():
        return None
    if cache_path(parsed.dtype).is_file():
        return next((c for s in whole_sweep(parsed.dtype) if s.key == parsed.key for c in s.cases if c.id == case_id),
                    None)
    if parsed.key not in _by_key():
        return None
    return next((c for c in _screened(parsed.key, parsed.dtype).cases if c.id == case_id), None)


def keys_named(patterns: Sequence[str]) -> list[str] | None:
    """The op keys whose ids ``patterns`` could name (by each pattern's literal start); ``None``: all."""
    literals = [re.split(r"[*?\[]", p, maxsplit=1)[0] for p in patterns]
    keys = [k for k in _by_key() if any((f"{PREFIX}{k}-".startswith(lit) or lit.startswith(f"{PREFIX}{k}-"))
                                        for lit in literals)]
    return None if len(keys) == len(_by_key()) else keys


def register_ops(keys: Sequence[str] | None = None, dtype: str = FLOAT32) -> None:
    """Register the sweep's cases and left-out lines in ``dtype`` (every op, or those named by ``keys``)."""
    from conformance.api.case import _REGISTRY

    for screened in whole_sweep(dtype) if keys is None or cache_path(dtype).is_file() else sweep(keys, dtype):
        for case in screened.cases:
            if case.id not in _REGISTRY:
                register(case)
        for lo in screened.left_out:
            leave_out(lo.label, lo.reason)


def ci_sample(n: int = 10) -> list[str]:
    """A fixed small sample of the sweep's op keys for CI: every ``len // n``-th op of ``op_db``'s order
    among those with float32 CPU samples (deterministic at a torch release)."""
    keys = [key_of(op) for op in op_db() if op.supports_dtype(DTYPE, "cpu")]
    step = max(1, len(keys) // n)
    return keys[::step][:n]


def _load(patterns: Sequence[str]) -> None:
    """The lazy family's loader: the ops ``patterns`` could name, in the dtypes they name (screening all of them
    takes minutes once per dtype, then is read from :func:`cache_path`)."""
    for dtype, named in dtypes_named(patterns).items():
        register_ops(keys_named(named), dtype)


def ci_patterns(n: int = 10) -> list[str]:
    """:func:`ci_sample`'s ops that have cases, as ``--case`` patterns (``op-abs-*``): an op left out whole
    (a CUDA-only kernel) would be an unknown case."""
    return [f"{PREFIX}{s.key}-*" for s in sweep(ci_sample(n)) if s.cases]


if available():
    lazy_family(PREFIX, FAMILY, _load)
    add_resolver(case_from_id, ids=_ID.pattern)
else:
    unavailable("op (expecttest)", "expecttest, which torch's op_db imports, is not installed: "
                "pip install 'torch-conformance[ops]'")
