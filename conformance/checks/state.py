"""The whole observable state a step leaves, on every call, against references that make the same calls.

Parity used to look at a step's results only; a backend that overwrites its caller's
inputs, drops a buffer update (BatchNorm's running statistics) or gets one call in the
middle wrong passed.  After each call the engine records, besides the outputs and
gradients, every input (``input[i]``), module buffer (``buffer[name]``), parameter
(``param[name]``) and optimizer state tensor (``optim[name].key``): a training step
ends with ``optimizer.step()`` (:meth:`conformance.api.adapter.CompiledStep.optimizer_step`), so
parameters and optimizer state change on every call.  The float64 and
eager float32 references run the same sequence of calls on their own copies of the case,
so their state evolves as the backend's should: an input the step mutates on purpose must
equal the reference's mutation, one it does not must come back unchanged.

The copies are made through NumPy (:func:`conformance.api.step.host_copies`), outside
torch's allocators, so recording them disturbs no memory probe.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from conformance.api.case import Case, Workload
from conformance.api.step import (
    cast,
    clear_grads,
    host_copies,
    optimizer_state,
    run_module_step,
    step_optimizer,
    to_dtype,
    value_copy,
)
from conformance.checks.noise import RandomValues, RoundingNoise
from conformance.checks.parity import Before, Noise, ParityReport, compare
from conformance.checks.references import CallReference, SharedReferences, reference_key

#: how many perturbed float64 runs measure a step's rounding noise (:class:`conformance.checks.noise.RoundingNoise`)
NOISE_SAMPLES = 2


def state_of(workload: Workload) -> dict[str, torch.Tensor]:
    """Every tensor a step may change besides its results, by name (live references, not copies)."""
    named = {f"input[{i}]": t for i, t in enumerate(workload.inputs) if isinstance(t, torch.Tensor)}
    named.update({f"buffer[{n}]": b for n, b in workload.model.named_buffers()})
    named.update({f"param[{n}]": p for n, p in workload.model.named_parameters()})
    named.update(optimizer_state(workload.model, workload.optimizer))
    return named


def after_call(workload: Workload) -> dict[str, torch.Tensor]:
    """Host copies of the state one call left (its results were copied inside the probe's window)."""
    return host_copies(state_of(workload))


def coarsest_float(named: dict[str, torch.Tensor]) -> torch.dtype:
    """The floating dtype of least resolution among ``named``; float32 if none."""
    floats = [t.dtype for t in named.values() if t.is_floating_point()]
    return max(floats, key=lambda d: torch.finfo(d).eps, default=torch.float32)


def eager_dtype(native: torch.dtype) -> torch.dtype:
    """The dtype eager's reference runs a case in: the case's own where it is at least float32's resolution
    (a float64 case's eager is float64: its error is float64's, never float32's, which would let a backend
    that computes it in float32 pass by RMSE), else float32 (a bfloat16 program's eager float32, as before)."""
    return native if torch.finfo(native).eps <= torch.finfo(torch.float32).eps else torch.float32


class ReferenceRun:
    """The case in plain eager PyTorch at ``dtype``, called in the backend's sequence of calls.

    One copy of the case lives across calls, so buffers (running statistics, counters) evolve as
    a correct backend's do; call ``call`` must come right after ``call - 1``.  ``mode``: a dispatch
    mode each call runs in (:mod:`conformance.checks.noise`: rounding noise, or following random values,
    whose names after the last call are ``random_names``)."""

    def __init__(self, case: Case, dtype: torch.dtype, mode: RoundingNoise | RandomValues | None = None) -> None:
        self.case, self.dtype, self.mode = case, dtype, mode
        built = case.build()
        #: the dtype the case computes in (of least resolution among its inputs, parameters and buffers)
        self.native = coarsest_float(state_of(built))
        self.workload = to_dtype(built, dtype)
        self.workload.optimizer = case.make_optimizer(self.workload.model)
        self.next_call = 0
        self.random_names: set[str] = set()
        #: the carried state after the last call run (before the first: as built), and before that call
        self.after = carried(state_of(self.workload))
        self.before = self.after

    def call(self, call: int) -> dict[str, torch.Tensor]:
        """Run calls up to ``call`` and return that call's results and the state it left (copies)."""
        if call < self.next_call:
            raise ValueError(f"reference at call {self.next_call} cannot run call {call} again")
        named: dict[str, torch.Tensor] = {}
        while self.next_call <= call:
            self.before = self.after
            named = self._step(self.next_call)
            self.after = carried(named)
            self.next_call += 1
        return named

    @contextlib.contextmanager
    def _factories(self) -> Iterator[None]:
        """At float64, what the program makes itself with the default dtype (``torch.zeros(n, 8)`` for a loop's
        initial carry, ``torch.tensor(0.5)``) is float64 too, as its inputs and parameters are: a program whose
        native dtype is the default computes all of it in the reference's (``while_loop`` refuses a float32 carry
        the float64 body returns as float64)."""
        if self.dtype != torch.float64 or torch.get_default_dtype() != self.native:
            yield
            return
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            yield
        finally:
            torch.set_default_dtype(before)

    def _step(self, call: int) -> dict[str, torch.Tensor]:
        if call:
            inputs = self.case.inputs_for(call)
            self.workload.inputs = tuple(cast(t, self.dtype) for t in inputs)
        clear_grads(self.workload.model)
        random = self.mode if isinstance(self.mode, RandomValues) else None
        if random is not None:  # only the state carries values from one call to the next
            random.keep_only(state_of(self.workload).values())
        with (self.mode if self.mode is not None else contextlib.nullcontext()), self._factories():
            out = run_module_step(self.workload.model, self.workload, self.case.trains)
            live = out.named()
            named = {name: value_copy(t) for name, t in live.items()}
            del out
            step_optimizer(self.workload)
        state = state_of(self.workload)
        if random is not None:
            self.random_names = {name for name, t in {**live, **state}.items() if random.holds_random(t)}
        del live
        named.update({name: value_copy(t) for name, t in state.items()})
        clear_grads(self.workload.model)
        return named


#: the pieces of state a step carries from one call to the next (inputs are drawn afresh for every call)
CARRIED = ("param[", "buffer[", "optim[")


def carried(named: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies of the carried state among ``named``: parameters, buffers, optimizer state."""
    return {n: t.detach().clone() for n, t in named.items() if n.startswith(CARRIED)}


Named = dict[str, torch.Tensor]


def update_spreads(reference: Named, before: Named, samples: list[tuple[Named, Named]], eps: float) -> dict[str, float]:
    """How far each carried floating tensor's change on the call moved in the perturbed runs (each run's state after
    the call and before it), beyond the one-ulp move of the value written (``eps * |value|``: the storage rounding
    the update check allows per element; a second write in one step, as AdamW's decay, stays in the spread)."""
    spread: dict[str, float] = {}
    for name, ref_before in before.items():
        ref = reference.get(name)
        if ref is None or not ref.is_floating_point() or ref.shape != ref_before.shape or not ref.numel():
            continue
        change = ref.double() - ref_before.double()
        moved = 0.0
        for after, prior in samples:
            got, got_before = after.get(name), prior.get(name)
            if got is None or got_before is None or got.shape != ref.shape or got_before.shape != ref.shape:
                moved = math.inf
                continue
            beyond = (got.double() - got_before.double() - change).abs() - eps * got.double().abs()
            moved = max(moved, beyond.clamp_min(0).nan_to_num(nan=0.0, posinf=math.inf).max().item())
        spread[name] = moved
    return spread


def spreads(reference: dict[str, torch.Tensor], samples: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """How far each floating tensor moved from the reference in the perturbed runs (largest over elements and runs)."""
    spread: dict[str, float] = {}
    for name, ref in reference.items():
        if not ref.is_floating_point() or not ref.numel():
            continue
        moved = 0.0
        for sample in samples:
            got = sample.get(name)
            if got is None or got.shape != ref.shape:
                moved = math.inf
                continue
            diff = (got.double() - ref.double()).abs()
            moved = max(moved, diff.nan_to_num(nan=0.0, posinf=math.inf).max().item())
        spread[name] = moved
    return spread


@dataclass
class StateReferences:
    """The float64 reference and eager float32 of a case, advanced together call by call, and
    :data:`NOISE_SAMPLES` float64 runs with every computed value moved by one ulp of the backend's dtype."""

    case: Case
    ref64: ReferenceRun | None = field(default=None, init=False)
    eager32: ReferenceRun | None = field(default=None, init=False)
    noisy: list[ReferenceRun] = field(default_factory=list, init=False)

    def reference(self, call: int) -> CallReference:
        """The references' ``call`` (calls run in order; the first one builds the references)."""
        if self.ref64 is None or self.eager32 is None:
            self.ref64 = ReferenceRun(self.case, torch.float64, RandomValues())
            self.eager32 = ReferenceRun(self.case, eager_dtype(self.ref64.native))
            eps = torch.finfo(self.ref64.native).eps
            self.noisy = [ReferenceRun(self.case, torch.float64, RoundingNoise(eps, seed)) for seed in
                          range(NOISE_SAMPLES)]
        first = self.ref64.next_call == 0
        initial64, initial32 = (self.ref64.before, self.eager32.before) if first else ({}, {})
        ref64, eager32 = self.ref64.call(call), self.eager32.call(call)  # on the backend's threads: eager's noise
        before64 = self.ref64.before
        samples: list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]] = []
        eps = torch.finfo(self.ref64.native).eps
        with one_thread():  # many small ops; their noise is the modes', whatever the threads
            for run in list(self.noisy):
                try:
                    samples.append((run.call(call), run.before))
                except Exception:  # a program rounding breaks (a discrete value moved): no floor from it
                    self.noisy.remove(run)
            noise = Noise(eps, spreads(ref64, [after for after, _ in samples]), self.ref64.random_names,
                          update_spreads(ref64, before64, samples, eps))
        return CallReference(ref64, eager32, noise, initial64, initial32)

    def compare(self, call: int, actual: dict[str, torch.Tensor]) -> ParityReport:
        """``actual`` (a call's results and the state it left) against the references' same call (its values only:
        the state it started from is the caller's; :func:`judge_calls` compares the changes too)."""
        return judge_call(self.reference(call), actual, self.case)


def judge_call(reference: CallReference, actual: dict[str, torch.Tensor], case: Case,
               before: Before | None = None) -> ParityReport:
    """``actual`` (a call's results and the state it left) against that call's references; ``before``: the state
    the call started from, whose change on the call is compared too (:func:`parity.update_parity`)."""
    with one_thread():
        return compare(actual, reference.ref64, reference.eager32, case.tolerance, reference.noise, before)


def judge_calls(references: dict[int, CallReference], states: dict[int, dict[str, torch.Tensor]],
                case: Case) -> dict[int, ParityReport]:
    """Every recorded call (in call order) against its references, the carried state's change on each call too:
    measured from the previous compared call's state (the backend's own, the references' own), and the first
    call's from the state the case was built with (the backend was given the same values)."""
    reports: dict[int, ParityReport] = {}
    previous: int | None = None
    for call in sorted(states):
        reference = references[call]
        if previous is not None:
            prior = references[previous]
            before = Before(carried(states[previous]), carried(prior.ref64), carried(prior.eager32))
        elif reference.initial64:
            before = Before(reference.initial64, reference.initial64, reference.initial32)
        else:
            before = None
        reports[call] = judge_call(reference, states[call], case, before)
        previous = call
    return reports


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Comparisons on one thread: they are many small ops, for which OpenMP's fork and join cost more than
    they save, and far more on a busy machine (a 512x512 comparison took 0.7 s on two threads of two
    shared cores, 15 ms on one).  Results are the same: each is one tensor's error, not a sum over threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def compare_calls(case: Case, calls: dict[int, dict[str, torch.Tensor]], shared: SharedReferences | None = None,
                  inputs: str = "") -> dict[int, ParityReport]:
    """Every recorded call (in call order) against the references run through the same sequence.

    ``shared``: the run's shared references (:mod:`conformance.checks.references`): the case's references
    are loaded from there when a pair given the same ``inputs`` (:class:`InputDigest`) made them, else made
    here and stored for its other pairs."""
    references = shared_references(case, sorted(calls), shared, inputs)
    return judge_calls(references, calls, case)


def shared_references(case: Case, calls: list[int], shared: SharedReferences | None = None,
                      inputs: str = "") -> dict[int, CallReference]:
    """The references of ``calls`` (in order): the run's shared ones, else made (and shared when it can)."""
    key = reference_key(case, calls, inputs) if shared is not None else ""
    if shared is not None and (stored := shared.load(key)) is not None:
        return stored
    made = make_references(case, calls)
    if shared is not None:
        shared.store(key, made)
    return made


def make_references(case: Case, calls: list[int]) -> dict[int, CallReference]:
    """The references of ``calls`` (in call order), made here."""
    references = StateReferences(case)
    return {call: references.reference(call) for call in calls}
