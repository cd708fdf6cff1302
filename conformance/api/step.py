"""One step of a workload, the same for every backend: forward, and for training loss and backward.

Also: tracing the whole step into one ATen graph (the user-level graph the
eager backend runs and the lifetime model reads) and the float64 reference.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from conformance.api.case import Case, Workload
from conformance.models.optimizer import OptimizerSegment, record_optimizer_step
from conformance.models.transients import reference_kernels


@dataclass
class StepOutput:
    """What a step produced.  ``outputs`` are dropped after the step; ``retained``
    (parameter gradients) outlive it, held by the parameters' ``.grad``."""

    outputs: list[torch.Tensor]
    retained: dict[str, torch.Tensor] = field(default_factory=dict)

    def named(self) -> dict[str, torch.Tensor]:
        named = {f"output[{i}]": t for i, t in enumerate(self.outputs)}
        named.update({f"grad[{k}]": v for k, v in self.retained.items()})
        return named


def snapshot(out: StepOutput) -> dict[str, torch.Tensor]:
    """Copies of a step's named results made outside torch's allocators (through NumPy).

    Taken inside a memory probe's window, so the step's outputs can still be dropped
    there (the residual must not see them) and checked for parity afterwards."""
    return host_copies(out.named())


def host_copies(named: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies of ``named`` made outside torch's allocators (through NumPy; another device's through
    a copy to the CPU, which that device's probe does not see), so taking them disturbs no probe."""
    import numpy as np

    copies: dict[str, torch.Tensor] = {}
    for name, t in named.items():
        t = t.detach()
        if t.device.type != "cpu":
            copies[name] = t.to("cpu", copy=True)  # another device's probe does not see CPU memory
            continue
        if t.dtype in (torch.bfloat16, torch.float16):
            copies[name] = torch.from_numpy(np.array(t.view(torch.int16).numpy(), copy=True)).view(t.dtype)
        else:
            copies[name] = torch.from_numpy(np.array(t.numpy(), copy=True))
    return copies


def params_of(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def clear_grads(model: torch.nn.Module) -> None:
    for p in model.parameters():
        p.grad = None


def step_optimizer(workload: Workload) -> None:
    """The end of a training step as users write it: ``optimizer.step()``, then ``zero_grad(set_to_none=True)``."""
    if workload.optimizer is not None:
        workload.optimizer.step()
        workload.optimizer.zero_grad(set_to_none=True)


def optimizer_segment(case: Case) -> OptimizerSegment | None:
    """The model of the case's optimizer step in the steady state (:mod:`conformance.models.optimizer`),
    recorded on a fresh build of the case: its state made by one step, then one step recorded; ``None``
    for a step with no optimizer."""
    if not case.trains:
        return None
    workload = case.build()
    optimizer = case.make_optimizer(workload.model)
    if optimizer is None:
        return None
    params = list(params_of(workload.model).values())
    for recorded in (False, True):
        with torch.no_grad():
            for p in params:
                p.grad = torch.full_like(p, 1e-3)
        if recorded:
            return record_optimizer_step(params, optimizer, lambda: optimizer.zero_grad(set_to_none=True))
        optimizer.step()  # the state every probed call finds, made by the first call's step
    return None


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, torch.Tensor]:
    """The optimizer's state tensors by name (``optim[fc1.weight].momentum_buffer``): live references."""
    if optimizer is None:
        return {}
    named: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        for key, value in optimizer.state.get(p, {}).items():
            if isinstance(value, torch.Tensor):
                named[f"optim[{name}].{key}"] = value
    return named


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten_outputs(o)]
    raise TypeError(f"a case must return tensors, got {type(out).__name__}")


def run_module_step(call: Callable[..., Any], workload: Workload, trains: bool) -> StepOutput:
    """The step as a user writes it, with ``call`` standing for the (compiled) model."""
    if not trains:
        with torch.no_grad():
            return StepOutput(flatten_outputs(call(*workload.inputs)))
    loss = call(*workload.inputs)
    loss.backward()
    grads = {n: p.grad for n, p in params_of(workload.model).items() if p.grad is not None}
    return StepOutput([loss.detach()], grads)


def functional_step(workload: Workload, trains: bool) -> tuple[Callable[..., Any], list[torch.Tensor], list[str]]:
    """The step as a pure function of ``(*state, *inputs)``, state being the module's
    parameters and buffers; for training it returns ``(loss, *grads)``, one grad per
    trainable parameter, in the order of the first names returned.

    Returns the function, its arguments and the state names."""
    model = workload.model
    trainable = list(params_of(model)) if trains else []
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = trainable + [n for n in state if n not in trainable]
    n_inputs = len(workload.inputs)

    def step(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = dict(zip(names, args[: len(names)]))
        inputs = args[len(names) : len(names) + n_inputs]
        out = torch.func.functional_call(model, values, inputs)
        if not trains:
            return tuple(flatten_outputs(out))
        grads = torch.autograd.grad(out, [values[n] for n in trainable])
        return (out, *grads)

    args = [state[n].detach().requires_grad_(n in trainable) for n in names] + list(workload.inputs)
    return step, args, names


def trace_step(workload: Workload, trains: bool) -> tuple[torch.fx.GraphModule, list[torch.Tensor], list[str]]:
    """Trace the whole step to one ATen graph with fake tensors (nothing real runs).

    Traced on the kernels the reference executor runs and the transient table models (oneDNN
    off, :func:`conformance.models.transients.reference_kernels`): with oneDNN on, ``nn.LSTM``
    traces to ``mkldnn_rnn_layer``, whose workspace layout oneDNN picks from the CPU's vector
    ISA; with it off, to the native cell's ATen ops, whose sizes the graph says."""
    step, args, names = functional_step(workload, trains)
    with reference_kernels():
        gm = make_fx(step, tracing_mode="fake")(*args)
    return gm, args, names


def to_dtype(workload: Workload, dtype: torch.dtype) -> Workload:
    """A deep copy of the workload with floating tensors cast to ``dtype`` (for references)."""
    model = copy.deepcopy(workload.model).to(dtype)
    inputs = tuple(t.to(dtype) if t.is_floating_point() else t.clone() for t in workload.inputs)
    return Workload(model, inputs)  # an optimizer is made for the copy by whoever needs one


def reference_step(case: Case, dtype: torch.dtype, call: int = 0) -> StepOutput:
    """The case's ``call``-th call run in plain eager PyTorch at ``dtype`` (float64: the reference)."""
    built = case.build()
    if call:
        built.inputs = case.inputs_for(call)
    workload = to_dtype(built, dtype)
    out = run_module_step(workload.model, workload, case.trains)
    return StepOutput([t.detach() for t in out.outputs], {k: v.detach() for k, v in out.retained.items()})
