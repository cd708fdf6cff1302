"""One step of a workload, the same for every backend: forward, and for training loss and backward.

Also: tracing the whole step into one ATen graph (the user-level graph the
eager backend runs and the lifetime model reads) and the float64 reference.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from conformance.api.case import Case, Workload
from conformance.models.lifetime import HOLD_UNTIL
from conformance.models.optimizer import OptimizerSegment, record_optimizer_step
from conformance.models.rnn_scopes import COMPOSITES, composite_holds, onednn_holds
from conformance.models.transients import GRAD_ENABLED, reference_kernels


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


def functional_step(
    workload: Workload, trains: bool,
    around_backward: Callable[[torch.Tensor], contextlib.AbstractContextManager[Any]] | None = None,
) -> tuple[Callable[..., Any], list[torch.Tensor], list[str]]:
    """The step as a pure function of ``(*state, *inputs)``, state being the module's
    parameters and buffers; for training it returns ``(loss, *grads)``, one grad per
    trainable parameter, in the order of the first names returned.  ``around_backward(loss)``:
    a context the backward runs in (a tracer's hooks on the autograd graph).

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
        with around_backward(out) if around_backward is not None else contextlib.nullcontext():
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


def eager_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules of ``model`` that ``torch.compile`` leaves to eager PyTorch: Dynamo does not trace
    into an ``nn.RNNBase`` (LSTM, GRU, RNN) unless ``torch._dynamo.config.allow_rnn`` is set; it
    breaks the graph there and the module runs its own kernels (oneDNN's, ATen's C++ composites)."""
    import torch._dynamo.config as dynamo_config

    if getattr(dynamo_config, "allow_rnn", False):
        return []
    return [m for m in model.modules() if isinstance(m, torch.nn.RNNBase)]


@contextlib.contextmanager
def _users_kernels() -> Iterator[None]:
    """oneDNN on, as a user's process has it (the reference executor turns it off)."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(True)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def trace_user_kernels(workload: Workload, trains: bool, scopes: bool = True) -> torch.fx.GraphModule:
    """The step traced as eager PyTorch runs it with the user's kernels, for a backend that leaves
    the modules :func:`eager_modules` names to eager (a compiler's graph breaks).

    Unlike :func:`trace_step`: oneDNN is on (``nn.LSTM`` traces to ``mkldnn_rnn_layer`` and its
    backward, modelled from oneDNN's layouts in :mod:`conformance.models.transients`); an inference
    step is traced without grad, as it runs (the LSTM keeps no workspace then); and values live as
    long as the scope that holds them, not to their last use (``HOLD_UNTIL``):

    * what an eager module's ``forward`` makes in Python (the zero initial states), and what its
      caller passes in, until the call returns;
    * what the C++ composite it calls makes (``torch._VF.gru``/``rnn_tanh``/``rnn_relu``/``lstm``,
      seen through a ``TorchFunctionMode``), to RNN.cpp's scopes: a cell's temporaries to its
      step's end, a layer's projected input and outputs to its stack, oneDNN's per-layer outputs
      until the next layer reassigns them (:mod:`conformance.models.rnn_scopes`);
    * what one autograd node's formula (a C++ function) makes, and the saved tensors and gradients
      it is called with, until the node returns (pre- and post-hooks on every node of the loss's
      graph); the root gradient for the whole backward.

    A C++ temporary may die before its scope ends, so this bounds eager PyTorch from above; no value
    lives longer.  ``scopes=False``: every value to its last use (the model's lower bound)."""
    calls: list[list[torch.fx.Node]] = []  # the nodes each eager module's call (each backward node) made
    starts: list[int] = []

    def traced() -> list[torch.fx.Node]:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode

        mode = get_proxy_mode()
        return list(mode.tracer.graph.nodes) if mode is not None else []

    def before(module: torch.nn.Module, inputs: Any) -> None:
        starts.append(len(traced()))

    def after(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        calls.append(traced()[starts.pop():])

    handles: list[Any] = []
    for module in eager_modules(workload.model):
        handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]

    @contextlib.contextmanager
    def scoped_backward(loss: torch.Tensor) -> Iterator[None]:
        """Each autograd node's formula is one C++ function: what it makes lives until it returns.  The
        root gradient (``ones_like`` of the loss, made before any node runs) is held by the engine's
        caller for the whole backward."""
        begin = len(traced())
        first: list[int] = []

        def pre(*_: Any) -> None:
            starts.append(len(traced()))
            first.append(starts[-1])

        def post(*_: Any) -> None:
            calls.append(traced()[starts.pop():])

        seen: set[Any] = set()
        todo = [loss.grad_fn]
        while todo:
            fn = todo.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            handles.extend((fn.register_prehook(pre), fn.register_hook(post)))
            todo.extend(next_fn for next_fn, _ in fn.next_functions)
        yield
        made = traced()
        root = made[begin:first[0]] if first else []
        if root:
            calls.append([*root, made[-1]])

    step, args, _ = functional_step(workload, trains, scoped_backward if trains else None)

    composites: list[list[torch.fx.Node]] = []  # the nodes each call of an RNN.cpp composite made

    class Composites(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if getattr(func, "__name__", None) not in COMPOSITES:
                return func(*args, **(kwargs or {}))
            start = len(traced())
            out = func(*args, **(kwargs or {}))
            composites.append(traced()[start:])
            return out

    def run(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with contextlib.nullcontext() if trains else torch.no_grad(), Composites():
            return step(*a)

    try:
        with _users_kernels():
            gm = make_fx(run, tracing_mode="fake")(*args)
    finally:
        for handle in handles:
            handle.remove()
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}

    def hold(node: torch.fx.Node, until: torch.fx.Node) -> None:
        held = node.meta.get(HOLD_UNTIL)
        if held not in order or order[held] < order[until]:
            node.meta[HOLD_UNTIL] = until

    scoped: dict[torch.fx.Node, torch.fx.Node] = {}  # RNN.cpp's scopes (native and oneDNN's)
    for made in composites:
        onednn = any(n.target is torch.ops.aten.mkldnn_rnn_layer.default for n in made)
        scoped.update(onednn_holds(made) if onednn else composite_holds(made))
    for made in calls if scopes else []:
        if not made:
            continue
        inside = set(made)
        used = [a for n in made for a in n.all_input_nodes if a not in inside]
        for node in made:  # what the call made (what a composite in it made: to the composite's scopes)
            hold(node, scoped.get(node, made[-1]))
        for node in used:  # what its caller holds for it
            hold(node, made[-1])
    for node in nodes:
        if isinstance(node.target, torch._ops.OpOverload):
            node.meta[GRAD_ENABLED] = trains
        if node.target is torch.ops.aten.mkldnn_rnn_layer_backward.default:
            _distinct_bias_grads(gm.graph, node)
    gm.recompile()
    return gm


def _distinct_bias_grads(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """``mkldnn_rnn_layer_backward`` returns the bias gradient and ``at::clone`` of it (RNN.cpp): one for
    ``bias_ih``, one for ``bias_hh``, two storages.  Its meta function returns the same tensor twice, so
    the traced graph hands one gradient to both biases; give the clone its own value and the second
    bias its own gradient, as the kernel does."""
    import operator

    val = node.meta.get("val")
    if not isinstance(val, (list, tuple)) or len(val) < 5 or not all(isinstance(t, torch.Tensor) for t in val[3:5]):
        return
    if val[3].untyped_storage()._cdata != val[4].untyped_storage()._cdata:
        return  # a meta function that already returns two storages
    fake_mode = getattr(val[3], "fake_mode", None)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        clone = torch.empty_like(val[3])
    node.meta["val"] = (*val[:4], clone, *val[5:])
    items = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    used = [items[i] for i in (3, 4) if i in items and items[i].users]
    for index, value in ((3, val[3]), (4, clone)):
        if index not in items:
            with graph.inserting_after(node):
                items[index] = graph.call_function(operator.getitem, (node, index))
        items[index].meta["val"] = value
    seen = 0

    def bias_grad(arg: torch.fx.Node) -> torch.fx.Node:
        nonlocal seen
        if arg not in used:
            return arg
        seen += 1
        return items[3] if seen % 2 else items[4]  # the first use is bias_ih's, the second bias_hh's

    for user in list(dict.fromkeys(u for g in used for u in g.users)):
        user.args = torch.fx.node.map_arg(user.args, bias_grad)
        user.kwargs = torch.fx.node.map_arg(user.kwargs, bias_grad)


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
