"""Planted faults for any backend: the harness must catch each where it changes memory or values.

A fault wraps a real backend's compiled step (eager, inductor, the example vendor...)
and changes one thing about what it does: an extra input clone, a scratch buffer,
a leak from the N-th call on, stale results, results corrupted from the second
call on, a 1e-3 relative error in one gradient; and seven that change the state a step
leaves, which only the every-call state check sees: inputs overwritten after the call,
results wrong on one middle call only, a lost buffer update, weights frozen at the first
call, an optimizer step that skips a parameter, wrong optimizer state, a learning rate 0.1%
off (seen by the parameters' change on the call, not their values).  Two more change what inductor
*generates*: the pre-#163227 alias handling of multi-output fallback ops (the
result tuple is never deleted) and a wrapper that drops its frees.  Each is a real
adapter: ``planted(EagerBackend, "input-clone")`` is a Backend class.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch

from conformance.api.adapter import Backend, CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput, host_copies, optimizer_state, params_of
from conformance.api.verdict import Check
from conformance.models.lifetime import LifetimeModel, Observation
from conformance.models.optimizer import OptimizerSegment
from conformance.probes.cpu import MemoryProbe, MemoryTrace

SCRATCH_BYTES = 4096
#: the first call whose results the leaking fault keeps: beyond the default steps (calls 0..4)
LEAK_FROM_CALL = 6


class FaultyStep(CompiledStep):
    """A backend's own compiled step with one fault planted; everything the harness asks it is delegated."""

    def __init__(self, inner: CompiledStep, case: Case, workload: Workload, fault: Fault) -> None:
        self.inner, self.case, self.workload, self.fault = inner, case, workload, fault
        self.calls = 0
        self.applied = True  # False when the fault found nothing to change on this case
        self.kept: list[Any] = []
        self.first: StepOutput | None = None

    def run(self) -> StepOutput:
        call, self.calls = self.calls, self.calls + 1
        return self.fault.run(self, call)

    def optimizer_step(self, workload: Workload) -> None:
        self.fault.optimizer_step(self, workload)

    def optimizer_model(self, eager: OptimizerSegment) -> OptimizerSegment | None:
        return self.inner.optimizer_model(eager)

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        return self.inner.received_model(observation)

    def program_model(self, observation: Observation) -> LifetimeModel | None:
        return self.inner.program_model(observation)

    def split_model(self, observation: Observation) -> LifetimeModel | None:
        return self.inner.split_model(observation)

    def leaves_modules_to_eager(self) -> bool:
        return self.inner.leaves_modules_to_eager()

    def lowering_fallbacks(self) -> dict[str, contextlib.AbstractContextManager[object]]:
        return self.inner.lowering_fallbacks()

    def notes(self) -> list[str]:
        return self.inner.notes()

    def extra_probes(self) -> list[MemoryProbe]:
        return self.inner.extra_probes()

    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        return self.inner.memory_findings(observation, traces)

    def contract_check(self) -> Check | tuple[str, str] | None:
        return self.inner.contract_check()


class Fault:
    """What a fault does to one call of a step (``call`` counts from 0, the first call)."""

    name: ClassVar[str]
    changes: ClassVar[str]  # "memory" or "values": what the harness must see it by

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        return step.inner.run()

    def optimizer_step(self, step: FaultyStep, workload: Workload) -> None:
        step.inner.optimizer_step(workload)

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Active while the step is compiled and run (faults in a compiler's code generation)."""
        yield

    @classmethod
    def applies(cls, case: Case) -> bool:
        """Whether the fault changes this case's memory or values beyond its dtype's precision."""
        return True


class NoFault(Fault):
    """The clean step, wrapped the same way (what a fault's effect is compared with)."""

    name, changes = "none", "nothing"


class InputClone(Fault):
    name, changes = "input-clone", "memory"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        inputs = step.workload.inputs
        step.workload.inputs = (inputs[0].clone(), *inputs[1:])  # alive for the whole call
        try:
            return step.inner.run()
        finally:
            step.workload.inputs = inputs


class ScratchBuffer(Fault):
    name, changes = "scratch-buffer", "memory"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        scratch = torch.empty(SCRATCH_BYTES // 4)
        out = step.inner.run()
        del scratch
        return out


class LeakFromCall(Fault):
    """Keeps one result the step allocated (not a view of its inputs) from call N on, one more each call."""

    name, changes = f"leak-from-call-{LEAK_FROM_CALL}", "memory"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        out = step.inner.run()
        if call >= LEAK_FROM_CALL:
            inputs = {t.untyped_storage().data_ptr() for t in step.workload.inputs}
            fresh = [t for t in out.outputs if t.untyped_storage().data_ptr() not in inputs]
            if fresh:
                step.kept.append(fresh[0])  # a stale reference
            else:
                step.applied = False  # every result is a view of an input: nothing of the step's to keep
        return out


class StaleResults(Fault):
    name, changes = "stale-results", "values"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        if step.first is None:
            step.first = step.inner.run()
            return step.first
        for name, grad in step.first.retained.items():  # what the first call left on .grad
            params_of(step.workload.model)[name].grad = grad
        return StepOutput(list(step.first.outputs), dict(step.first.retained))


class CorruptFromSecondCall(Fault):
    """Results scaled by 1.1 from the second call on (the first call's are right)."""

    name, changes = "corrupt-from-call-1", "values"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        out = step.inner.run()
        if call >= 1:
            with torch.no_grad():
                for t in [*out.outputs, *out.retained.values()]:
                    t.mul_(1.1)
        return out


class GradRelativeError(Fault):
    """One gradient (the first output where there is none) off by a relative 1e-3."""

    name, changes = "grad-rel-1e-3", "values"

    @classmethod
    def applies(cls, case: Case) -> bool:
        return case.tolerance.rtol < 1e-3  # float32; a 1e-3 error is within bfloat16/float16 precision

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        out = step.inner.run()
        target = next(iter(out.retained.values()), None)
        with torch.no_grad():
            (target if target is not None else out.outputs[0]).mul_(1 + 1e-3)
        return out


class InputsOverwritten(Fault):
    """Every floating input overwritten after the call, as a backend reusing input buffers as scratch would."""

    name, changes = "inputs-overwritten", "values"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        out = step.inner.run()
        floating = [t for t in step.workload.inputs if t.is_floating_point()]
        if not floating:
            step.applied = False
        with torch.no_grad():
            for t in floating:
                t.fill_(0.5)  # in place: no allocation, so only the state check can see it
        return out


#: the one call whose results the middle-call fault corrupts (calls 0 and 1 come before the probes)
MIDDLE_CALL = 3


class CorruptMiddleCall(Fault):
    """Results scaled by 1.1 on one call in the middle only (a race, a bad cache hit): the first and last are right."""

    name, changes = f"corrupt-call-{MIDDLE_CALL}-only", "values"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        out = step.inner.run()
        if call == MIDDLE_CALL:
            with torch.no_grad():
                for t in [*out.outputs, *out.retained.values()]:
                    t.mul_(1.1)
        return out


class LostBufferUpdate(Fault):
    """The step's updates of module buffers (batch norm's running statistics, its counter) dropped."""

    name, changes = "lost-buffer-update", "values"

    @classmethod
    def applies(cls, case: Case) -> bool:
        return case.trains  # in eval mode buffers are read, not updated

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        buffers = dict(step.workload.model.named_buffers())
        before = host_copies(buffers)  # outside torch's allocator: the fault changes values, not memory
        out = step.inner.run()
        changed = [n for n, b in buffers.items() if not torch.equal(b, before[n])]
        if not changed:
            step.applied = False  # no buffer the step updates: nothing to lose
        with torch.no_grad():
            for n in changed:
                buffers[n].copy_(before[n])
        return out


class FrozenWeights(Fault):
    """The step computes with the weights of its first call (baked in, as freezing or a CUDA graph's static
    inputs can do), while the optimizer updates the real ones."""

    name, changes = "weights-frozen-at-first-call", "values"

    @classmethod
    def applies(cls, case: Case) -> bool:
        return case.trains and case.optimizer not in (None, "none")  # parameters change only under an optimizer

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        params = params_of(step.workload.model)
        if call == 0:
            step.kept = [host_copies(dict(params))]
            return step.inner.run()
        current = host_copies(dict(params))
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(step.kept[0][name])
        try:
            return step.inner.run()
        finally:
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(current[name])


class OptimizerSkipsParameter(Fault):
    """The optimizer step leaves the last trainable parameter as it was (its state is still updated)."""

    name, changes = "optimizer-skips-a-parameter", "values"

    @classmethod
    def applies(cls, case: Case) -> bool:
        return FrozenWeights.applies(case)

    def optimizer_step(self, step: FaultyStep, workload: Workload) -> None:
        params = params_of(workload.model)
        last = list(params)[-1] if params else None
        before = host_copies({last: params[last]}) if last is not None and params[last].grad is not None else {}
        step.inner.optimizer_step(workload)
        with torch.no_grad():
            for name, value in before.items():
                params[name].copy_(value)


class WrongOptimizerState(Fault):
    """The optimizer's first state tensor of the first parameter (momentum buffer, Adam's first moment) halved."""

    name, changes = "wrong-optimizer-state", "values"

    @classmethod
    def applies(cls, case: Case) -> bool:
        return FrozenWeights.applies(case)

    def optimizer_step(self, step: FaultyStep, workload: Workload) -> None:
        step.inner.optimizer_step(workload)
        state = [t for n, t in optimizer_state(workload.model, workload.optimizer).items() if not n.endswith(".step")]
        if not state:
            step.applied = False
            return
        with torch.no_grad():
            state[0].mul_(0.5)


class LearningRateOff(Fault):
    """The optimizer steps with a learning rate 0.1% too small (what a learning rate stored in bfloat16 looks like:
    0.01 is 0.010009765625 there, 1e-3 is 0.00099945068359375): every parameter's update is 0.1% short, a
    parameter error far below the parameter's own scale, which only the update's comparison sees."""

    name, changes = "lr-off-by-1e-3", "values"

    @classmethod
    def applies(cls, case: Case) -> bool:
        return FrozenWeights.applies(case)

    def optimizer_step(self, step: FaultyStep, workload: Workload) -> None:
        optimizer = workload.optimizer
        if optimizer is None:
            step.applied = False
            step.inner.optimizer_step(workload)
            return
        rates = [group["lr"] for group in optimizer.param_groups]
        for group, lr in zip(optimizer.param_groups, rates, strict=True):
            group["lr"] = lr * (1 - 1e-3)
        try:
            step.inner.optimizer_step(workload)
        finally:
            for group, lr in zip(optimizer.param_groups, rates, strict=True):
                group["lr"] = lr


class OptimizerHoldsGradients(Fault):
    """The optimizer step keeps references to the gradients it stepped with (until its next step), so
    ``zero_grad(set_to_none=True)`` frees nothing: the gradients outlive every step."""

    name, changes = "optimizer-holds-gradients", "memory"

    @classmethod
    def applies(cls, case: Case) -> bool:
        return FrozenWeights.applies(case)

    def optimizer_step(self, step: FaultyStep, workload: Workload) -> None:
        step.kept = [p.grad for p in params_of(workload.model).values() if p.grad is not None]
        step.inner.optimizer_step(workload)


class OptimizerLeaksPerStep(Fault):
    """Every optimizer step leaves one more tensor alive: a copy of the first parameter's first state
    tensor (momentum buffer, Adam's first moment), kept forever."""

    name, changes = "optimizer-leaks-per-step", "memory"

    @classmethod
    def applies(cls, case: Case) -> bool:
        return FrozenWeights.applies(case)

    def optimizer_step(self, step: FaultyStep, workload: Workload) -> None:
        step.inner.optimizer_step(workload)
        state = [t for n, t in optimizer_state(workload.model, workload.optimizer).items() if not n.endswith(".step")]
        if not state:
            step.applied = False
            return
        step.kept.append(state[0].clone())


class InductorFault(Fault):
    """A fault in inductor's code generation: the program it generates is wrong, nothing else."""

    changes = "memory"

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        import torch._inductor.config as inductor_config

        with self.patch(), inductor_config.patch(force_disable_caches=True):  # generate anew, with the fault
            yield

    def patch(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        with self.compiling():
            return step.inner.run()


class TupleNeverFreed(InductorFault):
    """pytorch/pytorch#163227 undone: a mutating fallback op's outputs are said to alias its inputs,
    so the result tuple is never deleted and its items cannot be reused in place."""

    name = "inductor-pre-163227-alias"

    @contextlib.contextmanager
    def patch(self) -> Iterator[None]:
        from torch._inductor import ir

        original = ir.FallbackKernel.get_inputs_that_alias_output
        ir.FallbackKernel.get_inputs_that_alias_output = lambda self: self.alias_names  # type: ignore[method-assign]
        try:
            yield
        finally:
            ir.FallbackKernel.get_inputs_that_alias_output = original  # type: ignore[method-assign]


class DroppedFree(InductorFault):
    """The wrapper drops its ``del`` of buffers that are not reused: they live until the call returns."""

    name = "inductor-dropped-free"

    @contextlib.contextmanager
    def patch(self) -> Iterator[None]:
        from torch._inductor.codegen import wrapper

        original = wrapper.FreeIfNotReusedLine.codegen

        def codegen(self: Any, code: Any) -> None:
            if self.node.get_name().startswith("buf"):
                return  # the planted fault: no `del bufN`
            original(self, code)

        wrapper.FreeIfNotReusedLine.codegen = codegen  # type: ignore[method-assign]
        try:
            yield
        finally:
            wrapper.FreeIfNotReusedLine.codegen = original  # type: ignore[method-assign]


FAULTS: dict[str, type[Fault]] = {f.name: f for f in (
    InputClone, ScratchBuffer, LeakFromCall, StaleResults, CorruptFromSecondCall, GradRelativeError,
    InputsOverwritten, CorruptMiddleCall, LostBufferUpdate, FrozenWeights, OptimizerSkipsParameter,
    WrongOptimizerState, LearningRateOff, OptimizerHoldsGradients, OptimizerLeaksPerStep, TupleNeverFreed, DroppedFree,
)}
GENERIC = [n for n, f in FAULTS.items() if not issubclass(f, InductorFault)]
INDUCTOR_ONLY = [n for n, f in FAULTS.items() if issubclass(f, InductorFault)]


#: Every step the planted backends made in this process, latest last (the fault matrix reads their programs).
CREATED: list[FaultyStep] = []


def planted(base: type[Backend], fault: str) -> type[Backend]:
    """``base`` with ``fault`` planted: a real adapter class, named ``<base>+<fault>``."""
    fault_cls = NoFault if fault == "none" else FAULTS[fault]

    def compile(self: Backend, case: Case, workload: Workload) -> CompiledStep:
        f = fault_cls()
        with f.compiling():
            inner = base.compile(self, case, workload)
        step = FaultyStep(inner, case, workload, f)
        CREATED.append(step)
        return step

    return type(f"{base.__name__}_{fault.replace('-', '_')}", (base,), {
        "name": f"{base.name}+{fault}", "compile": compile, "manifest_path": None,
        "__module__": __name__,
    })


def backend_classes() -> dict[str, Callable[[], Backend]]:
    """The clean backends the faults are planted in."""
    from example_vendor import ExampleVendorBackend

    from conformance.backends.eager import EagerBackend
    from conformance.backends.inductor import InductorBackend

    return {"eager": EagerBackend, "inductor": InductorBackend, "example-vendor": ExampleVendorBackend}
