"""One step of a workload, the same for every backend: forward, and for training loss and backward.

Also: tracing the whole step into one ATen graph (the user-level graph the
eager backend runs and the lifetime model reads) and the float64 reference.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from conformance.api.case import Case, Workload
from conformance.models.lifetime import HOLD_UNTIL
from conformance.models.lifetime.sizes import storage_exact_fake_mode
from conformance.models.optimizer import OptimizerSegment, record_optimizer_step
from conformance.models.rnn_scopes import COMPOSITES, composite_holds, onednn_holds
from conformance.models.transients import (
    GRAD_ENABLED,
    MEASURED_WORKSPACE,
    KernelNotModelled,
    depends_on_values,
    reference_kernels,
)
from conformance.probes.workspace import measure_on_values


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
    copies: dict[str, torch.Tensor] = {}
    for name, t in named.items():
        t = t.detach()
        if t.device.type != "cpu":
            copies[name] = t.to("cpu", copy=True)  # another device's probe does not see CPU memory
            continue
        copies[name] = _host_copy(t)
    return copies


#: Dtypes NumPy has no type for, copied as the integer dtype of their width (their bits, unchanged).
_AS_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.complex32: torch.int32}


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    """One CPU tensor's values, copied through NumPy. A lazy tensor (a conjugate or negative view, autograd's
    zero tensor) is resolved on the NumPy side: torch's own ``resolve_conj`` would allocate in the window."""
    import numpy as np

    if t.layout == torch.sparse_coo:
        return _sparse_coo_host_copy(t)
    if t.is_sparse_csr or t.layout in (torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        raise TypeError(f"a {t.layout} result is not compared yet (sparse COO results are, as their dense values)")
    if t._is_zerotensor():
        zeros = np.zeros(t.numel() * t.element_size(), dtype=np.uint8)  # any dtype's zero is all zero bits
        return torch.from_numpy(zeros).view(t.dtype).reshape(t.shape)
    if t.is_conj():
        return torch.from_numpy(np.conj(t.conj().numpy()))  # .conj() of a conjugate view clears the bit: no copy
    if t.is_neg():
        return torch.from_numpy(np.negative(t._neg_view().numpy()))
    if t.dtype in _AS_BITS:
        return torch.from_numpy(np.array(t.view(_AS_BITS[t.dtype]).numpy(), copy=True)).view(t.dtype)
    return torch.from_numpy(np.array(t.numpy(), copy=True))


def value_copy(t: torch.Tensor) -> torch.Tensor:
    """A reference's copy of one tensor of a step's state, as parity compares it: a sparse COO tensor (a sparse
    gradient: ``Embedding(sparse=True)``) as the dense tensor it stands for, as :func:`host_copies` gives the
    backend's; any other as a clone."""
    t = t.detach()
    return t.to_dense() if t.layout == torch.sparse_coo else t.clone()


def _sparse_coo_host_copy(t: torch.Tensor) -> torch.Tensor:
    """A sparse COO tensor's values as the dense tensor it stands for, made on the NumPy side: its values
    summed into zeros at its indices (an uncoalesced tensor's repeated indices add, as ``to_dense`` does), so
    parity compares what a sparse gradient means, whatever order or duplication a kernel left its entries in.
    ``_indices``/``_values`` are views: reading them allocates nothing in torch."""
    import numpy as np

    if t.dtype in _AS_BITS:  # bits cannot be summed
        raise TypeError(f"a sparse {t.dtype} result is not compared yet")
    values = _host_copy(t._values()).numpy()
    dense = np.zeros(tuple(t.shape), dtype=values.dtype)
    np.add.at(dense, tuple(t._indices().numpy()), values)
    return torch.from_numpy(dense)


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
    a context the backward runs in (a tracer's hooks on the autograd graph).  Inputs that are
    containers (a list of tensors) are passed flattened: every argument is one tensor, one graph
    placeholder.

    Returns the function, its arguments and the state names."""
    model = workload.model
    trainable = list(params_of(model)) if trains else []
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = trainable + [n for n in state if n not in trainable]
    flat_inputs, spec = pytree.tree_flatten(tuple(workload.inputs))

    def step(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = dict(zip(names, args[: len(names)]))
        inputs = pytree.tree_unflatten(list(args[len(names) :]), spec)
        out = torch.func.functional_call(model, values, tuple(inputs))
        if not trains:
            return tuple(flatten_outputs(out))
        with around_backward(out) if around_backward is not None else contextlib.nullcontext():
            grads = torch.autograd.grad(out, [values[n] for n in trainable])
        return (out, *grads)

    args = [state[n].detach().requires_grad_(n in trainable) for n in names] + list(flat_inputs)
    return step, args, names


#: ``GraphModule.meta`` key: the graph was traced on the values of one call (:func:`trace_step`)
DEPENDS_ON_DATA = "conformance.depends_on_data"


def depends_on_data(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` holds one call's data-dependent decisions (:func:`trace_step`): then it is the
    graph of that call only, and each call is traced again on its own values."""
    return bool(gm.meta.get(DEPENDS_ON_DATA, False))


def trace_step(workload: Workload, trains: bool) -> tuple[torch.fx.GraphModule, list[torch.Tensor], list[str]]:
    """Trace the whole step to one ATen graph (:func:`trace_graph`).

    Traced on the kernels the reference executor runs and the transient table models (oneDNN
    off, :func:`conformance.models.transients.reference_kernels`): with oneDNN on, ``nn.LSTM``
    traces to ``mkldnn_rnn_layer``, whose workspace layout oneDNN picks from the CPU's vector
    ISA; with it off, to the native cell's ATen ops, whose sizes the graph says."""
    step, args, names = functional_step(workload, trains)
    with reference_kernels():
        try:
            gm = trace_graph(step, args, workload.model)
        except Exception as trace_error:
            plain = plain_failure(workload, trains)
            if plain is not None:  # the program's own error, not the tracer's
                raise ProgramError(f"the step fails in plain PyTorch, without any compiler: "
                                   f"{_why(plain)}") from trace_error
            raise
    return gm, args, names


def trace_graph(fn: Callable[..., Any], args: list[torch.Tensor], model: torch.nn.Module) -> torch.fx.GraphModule:
    """``fn(*args)`` (a step of ``model``) as one ATen graph, for any program plain PyTorch runs.

    First with fake tensors (nothing real runs; tensors the module holds outside its state, plain
    attributes, become the graph's constants): the graph of every call when it traces with static
    sizes.  A program whose Python reads its tensors' values (``.item()``, ``float(t)``, an ``if``
    on a tensor) stops a fake trace; one whose sizes follow its values (``nonzero``,
    ``unique_consecutive``) traces to sizes no graph can say.  Such a step is traced on the
    call's real values instead (:func:`_trace_concrete`): its graph is that call's, marked
    :func:`depends_on_data`, and the caller traces every call again on its own values."""
    try:
        gm = make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(*args)
    except Exception as fake_error:  # any program plain PyTorch runs has a concrete trace
        try:
            return _trace_concrete(fn, args, model)
        except Exception as real_error:
            raise real_error from fake_error
    if _has_data_dependent_sizes(gm) or _calls_value_dependent_kernel(gm):
        return _trace_concrete(fn, args, model)
    if any(n.op == "get_attr" and isinstance(n.meta.get("val"), torch.Tensor) for n in gm.graph.nodes):
        _fake_values(gm, args)  # a constant's recorded value is a fake of its own, not the one its views share
    return gm


class StepTraces:
    """The user-level graphs this process traced, by case and by the signature of the step's arguments:
    the engine's user-level model and the eager backend's step trace a case once between them.

    A fake trace is the graph of every call whose arguments have the same shapes, dtypes and strides
    (nothing of their values is in it), so the pairs of a case that one isolation worker runs, and the
    probed calls of a loop (modelled one by one, for their trip counts), trace it once.  Not kept: a
    graph traced on one call's values (:func:`depends_on_data`), or one holding tensors of the module's
    own as constants (a step may update those in place when the graph runs).  A case is its object:
    a shrink's candidates share an id, not a builder.  A kept graph is only read (run, modelled)."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        #: by the case object's id (kept alive in the value, so the id is not reused) and the signature
        self._graphs: OrderedDict[tuple[Any, ...], tuple[Case, torch.fx.GraphModule, list[str]]] = OrderedDict()

    def trace(self, case: Case, workload: Workload) -> tuple[torch.fx.GraphModule, list[torch.Tensor], list[str]]:
        """:func:`trace_step` of ``workload`` (a build of ``case``): the graph, its arguments, the state's names."""
        _, args, names = functional_step(workload, case.trains)
        key = (id(case), tuple(_signature(a) for a in args))
        kept = self._graphs.get(key)
        if kept is not None and kept[0] is case:
            self._graphs.move_to_end(key)
            return kept[1], args, kept[2]
        gm, args, names = trace_step(workload, case.trains)
        if not depends_on_data(gm) and not any(n.op == "get_attr" and isinstance(getattr(gm, str(n.target), None),
                                                                               torch.Tensor)
                                               for n in gm.graph.nodes):
            self._graphs[key] = case, gm, names
            while len(self._graphs) > self.size:
                self._graphs.popitem(last=False)
        return gm, args, names

    def clear(self) -> None:
        self._graphs.clear()


def _signature(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return (type(t).__name__, repr(t))
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device.type, t.requires_grad, t.storage_offset())


#: this process's user-level graphs (:class:`StepTraces`)
STEP_TRACES = StepTraces()


class ProgramError(RuntimeError):
    """The case's step fails when plain PyTorch runs it: the verdict is the program's, whatever the backend."""


def _why(error: BaseException) -> str:
    """An error's type and the line that says why: a Dynamo error's own message is one line ("RuntimeError
    when making fake tensor call"); the error it wraps, its cause or context, has the ``Explanation:``."""
    chain = [error]
    while (inner := chain[-1].__cause__ or chain[-1].__context__) is not None and inner not in chain:
        chain.append(inner)
    for e in reversed(chain):
        for line in str(e).splitlines():
            if line.strip().startswith("Explanation:"):
                return f"{type(error).__name__}: {line.strip().removeprefix('Explanation:').strip()}"
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def plain_failure(workload: Workload, trains: bool) -> Exception | None:
    """What the step raises when plain PyTorch runs it as a user does (``model(*inputs)``, then
    ``loss.backward()`` for a step that trains), on copies of the model and inputs; ``None`` where it
    runs.  Asked only when no trace could be made, to tell the program's own error from a tracer's (a
    ``while_loop`` counting with a Python int under autograd, which torch refuses itself); the pair ends
    with this error, so Dynamo's caches are reset first, as they are after every pair."""
    torch._dynamo.reset()  # a trace that failed inside torch's own compile of the op (while_loop's) marked it to skip
    try:
        model = copy.deepcopy(workload.model)
        inputs = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in workload.inputs]
        with torch.random.fork_rng(), torch.set_grad_enabled(trains):
            out = model(*inputs)
            if trains:
                out.backward()
    except Exception as error:
        return error
    return None


def _has_data_dependent_sizes(gm: torch.fx.GraphModule) -> bool:
    """A fake trace made symbols (unbacked: a size or a scalar read from the values), other than those of
    a ``while_loop``'s results (whose sizes the loop model binds from observed trip counts)."""
    loop_symbols: set[Any] = set()
    for node in gm.graph.nodes:
        symbols = _free_symbols(node.meta.get("val"))
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            loop_symbols |= symbols
        elif symbols - loop_symbols:
            return True
    return False


def _calls_value_dependent_kernel(gm: torch.fx.GraphModule) -> bool:
    """A node's eager kernel allocates temporaries that follow the values (``unique``'s, ``matrix_exp``'s, a
    mask's ``index_put``: :func:`conformance.models.transients.depends_on_values`): the model needs them
    measured on the call's own values, so the step is traced on them."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and depends_on_values(
                node.target, torch.fx.node.map_arg(node.args, lambda n: n.meta.get("val"))):
            return True
    return False


def _free_symbols(val: Any) -> set[Any]:
    symbols: set[Any] = set()
    for leaf in pytree.tree_leaves(val):
        if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            symbols |= leaf.node.expr.free_symbols
        elif isinstance(leaf, torch.Tensor):
            for n in (*leaf.shape, *leaf.stride()):
                if isinstance(n, torch.SymInt):
                    symbols |= n.node.expr.free_symbols
    return symbols


def _trace_concrete(fn: Callable[..., Any], args: list[torch.Tensor], model: torch.nn.Module) -> torch.fx.GraphModule:
    """``fn`` traced on real values (``make_fx`` real mode): Python reads the call's concrete values and
    every size is known.  Nothing of the caller's changes: the step runs on copies of its arguments
    (the state and inputs it may update in place) and of the tensors ``model`` holds outside its
    state (the graph then holds the originals as its constants), with the random generator forked.
    The values the graph records are remade as fake tensors that share storages where the traced
    ones did (:func:`_fake_values`): the lifetime model reads storages from them."""
    copies = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    originals: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id of a copy -> (the copy, kept alive; original)

    def copy_of(t: torch.Tensor) -> torch.Tensor:
        c = t.detach().clone()
        originals[id(c)] = (c, t)
        return c

    restore = map_plain_tensors(model, copy_of)
    filled = _NativeFills()

    def traced(*a: Any) -> Any:
        with filled:
            return fn(*a)

    try:
        with torch.random.fork_rng():
            gm = make_fx(traced, tracing_mode="real", _error_on_data_dependent_ops=False)(*copies)
    finally:
        restore()
    _keep_native_fills(gm, filled.values)
    for name, value in list(vars(gm).items()) + list(gm._buffers.items()):
        if isinstance(value, torch.Tensor) and id(value) in originals:
            setattr(gm, name, originals[id(value)][1])
    _fake_values(gm, args, filled.storages)
    _attach_measured(gm, filled.workspaces)
    gm.meta[DEPENDS_ON_DATA] = True
    return gm


#: ops whose result holds whatever its memory held (their contents are what is written next)
_UNDEFINED = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})


def _undefined(func: Any) -> bool:
    return isinstance(func, torch._ops.OpOverload) and func.overloadpacket.__name__ in _UNDEFINED


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


#: per op, per call in order, each result's (shape, storage bytes) as the real kernel made it (``None``: no storage)
StorageSizes = dict[Any, list[list[tuple[tuple[int, ...], int] | None]]]


class _NativeFills(TorchDispatchMode):
    """Which ``empty``-like results native code fills outside the dispatcher before an op reads them
    (``at::tensor(int_list)`` is ``empty`` and a ``memcpy``: the lengths ``ctc_loss`` reads).  A trace
    records the ``empty``, not the values: ``values[k]`` is what the ``k``-th ``empty``-like op's result
    held when first read, where its bytes had changed since it was made."""

    #: a higher-order op (``while_loop``) passes through as a call: without this, torch refuses it under the mode
    #: and that refusal, not the program's own outcome, would be the verdict
    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[int, torch.Tensor] = {}
        self._made: dict[int, tuple[int, torch.Tensor, torch.Tensor]] = {}  # storage -> (k, tensor, bytes)
        self._count = 0
        #: per op, per call in order: each result's (shape, storage bytes) as the real kernel made it
        self.storages: StorageSizes = {}
        #: per op whose temporaries follow the values, per call in order: the bytes its kernel allocated beyond
        #: its outputs on the call's values (``None``: the meter could not say)
        self.workspaces: dict[Any, list[int | None]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self._made:
            with _disable_current_modes():  # the tracer below records none of this
                for t in pytree.tree_leaves((args, kwargs)):
                    made = self._made.pop(t.untyped_storage().data_ptr(), None) if isinstance(t, torch.Tensor) else None
                    if made is not None and not torch.equal(_storage_bytes(made[1]), made[2]):
                        self.values[made[0]] = made[1].detach().clone()
        if depends_on_values(func, args):
            try:
                measured: int | None = measure_on_values(func, args, kwargs)
            except KernelNotModelled:
                measured = None
            self.workspaces.setdefault(func, []).append(measured)
        out = func(*args, **kwargs)
        if isinstance(func, torch._ops.OpOverload):
            self.storages.setdefault(func, []).append(
                [(tuple(t.shape), t.untyped_storage().nbytes()) if isinstance(t, torch.Tensor)
                 and t.layout == torch.strided and not t._is_zerotensor() else None for t in pytree.tree_leaves(out)])
        if _undefined(func):
            if isinstance(out, torch.Tensor) and out.untyped_storage().data_ptr():
                with _disable_current_modes():
                    self._made[out.untyped_storage().data_ptr()] = (self._count, out, _storage_bytes(out).clone())
            self._count += 1
        return out


def _keep_native_fills(gm: torch.fx.GraphModule, values: dict[int, torch.Tensor]) -> None:
    """Write what native code filled into each such ``empty``-like result, as the graph's constant, right
    after the node that makes it (the allocation stays the program's)."""
    if not values:
        return
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and _undefined(n.target)]
    for k, value in values.items():
        node = nodes[k] if k < len(nodes) else None
        made = node.meta.get("val") if node is not None else None
        if node is None or not isinstance(made, torch.Tensor) or (made.shape, made.dtype) != (value.shape, value.dtype):
            continue  # not the op the mode saw (the k-th ``empty`` of the trace is): leave the graph as traced
        name = f"_native_fill_{k}"
        setattr(gm, name, value)
        with gm.graph.inserting_after(node), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a plain tensor attribute: a constant, as make_fx's own
            const = gm.graph.get_attr(name)
        with gm.graph.inserting_after(const):
            gm.graph.call_function(torch.ops.aten.copy_.default, (node, const))
    gm.graph.lint()
    gm.recompile()


def _attach_measured(gm: torch.fx.GraphModule, workspaces: dict[Any, list[int | None]]) -> None:
    """Give each node of a value-dependent kernel the workspace measured on its call's values
    (:data:`~conformance.models.transients.MEASURED_WORKSPACE`): the ``k``-th call of an op is its ``k``-th
    node; an op whose calls and nodes do not pair up one to one keeps its table entry."""
    for target, measured in workspaces.items():
        nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target == target]
        if len(nodes) != len(measured):
            continue
        for node, nbytes in zip(nodes, measured, strict=True):
            if nbytes is not None:
                node.meta[MEASURED_WORKSPACE] = nbytes


def _fake_values(gm: torch.fx.GraphModule, args: list[torch.Tensor], traced: StorageSizes | None = None) -> None:
    """Each node's ``meta["val"]`` as fake tensors of one mode, run from the arguments' fakes, so values
    share storages exactly where the real ones did (a real trace records each value in a mode of its
    own).  An op whose result fake tensors cannot say (a data-dependent size, a scalar read from a
    tensor, an op with no fake kernel) gets the traced value's sizes and strides in a fresh storage, as
    large as the real kernel's where ``traced`` says (the ``k``-th call of an op is its ``k``-th node):
    ``lstsq``'s solution is a view into a copy of ``b``, ``unique``'s result a storage resized down."""
    mode = storage_exact_fake_mode(allow_non_fake_inputs=True)

    def fake(v: Any) -> Any:
        return mode.from_tensor(v) if isinstance(v, torch.Tensor) else v

    def fresh(v: Any, real: tuple[tuple[int, ...], int] | None = None) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        with mode:
            made = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
            if real is not None and real[0] == tuple(v.shape) and real[1] > made.untyped_storage().nbytes():
                made.untyped_storage().resize_(real[1])
            return made

    def fresh_values(node: torch.fx.Node) -> Any:
        calls = (traced or {}).get(node.target, [])
        k = seen[node.target] = seen.get(node.target, -1) + 1
        leaves, spec = pytree.tree_flatten(node.meta.get("val"))
        real = calls[k] if k < len(calls) and len(calls[k]) == len(leaves) else [None] * len(leaves)
        return pytree.tree_unflatten([fresh(v, r) for v, r in zip(leaves, real, strict=True)], spec)

    seen: dict[Any, int] = {}
    env: dict[torch.fx.Node, Any] = {}
    pending = iter(args)
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = fake(next(pending).detach())
            elif node.op == "get_attr":
                value = getattr(gm, node.target)  # type: ignore[arg-type]
                env[node] = fake(value.detach()) if isinstance(value, torch.Tensor) else value
            elif node.op == "call_function":
                call_args, call_kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
                try:
                    with mode:
                        env[node] = node.target(*call_args, **call_kwargs)  # type: ignore[operator]
                    seen[node.target] = seen.get(node.target, -1) + 1
                except Exception:  # what fake tensors cannot say, the traced value says
                    env[node] = fresh_values(node)
            else:
                continue
            node.meta["val"] = env[node]


def eager_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules of ``model`` that ``torch.compile`` leaves to eager PyTorch: Dynamo does not trace
    into an ``nn.RNNBase`` (LSTM, GRU, RNN) unless ``torch._dynamo.config.allow_rnn`` is set; it
    breaks the graph there and the module runs its own kernels (oneDNN's, ATen's C++ composites)."""
    rnns: list[torch.nn.Module] = [m for m in model.modules() if isinstance(m, torch.nn.RNNBase)]
    if not rnns:  # asked only then: importing Dynamo's config imports Dynamo (0.7 s)
        return []
    import torch._dynamo.config as dynamo_config

    return [] if getattr(dynamo_config, "allow_rnn", False) else rnns


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
            gm = trace_graph(run, args, workload.model)
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


#: what every ``nn.Module`` keeps in its ``__dict__`` for itself (its state, hooks, submodules)
_MODULE_SLOTS = frozenset(vars(torch.nn.Module()))


def map_plain_tensors(model: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
    """Replace every tensor ``model``'s modules hold outside their parameters and buffers (a plain
    attribute, or inside lists, tuples and dicts held as attributes) by ``fn(tensor)``.

    Returns a function that puts the originals back.  ``Module.to`` and ``functional_call`` see only
    registered state: these are what a float64 copy must convert too, and what a trace must not change."""
    replaced: list[tuple[torch.nn.Module, str, Any]] = []
    registered = {id(t) for t in (*model.parameters(), *model.buffers())}  # (``RNNBase._flat_weights`` lists them)

    def plain(t: torch.Tensor) -> torch.Tensor:
        return t if id(t) in registered else fn(t)

    for module in model.modules():
        for name, value in list(vars(module).items()):
            if name in _MODULE_SLOTS:
                continue
            new = _map_tensors(value, plain)
            if new is not value:
                replaced.append((module, name, value))
                module.__dict__[name] = new

    def restore() -> None:
        for module, name, value in replaced:
            module.__dict__[name] = value

    return restore


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``fn`` applied to its tensors (through lists, tuples, dicts); ``value`` itself where
    it holds none."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        items = [_map_tensors(v, fn) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # a namedtuple's fields
    if isinstance(value, dict):
        mapped = {k: _map_tensors(v, fn) for k, v in value.items()}
        if all(mapped[k] is value[k] for k in value):
            return value
        return type(value)(mapped) if type(value) is not dict else mapped
    return value


def cast(value: Any, dtype: torch.dtype) -> Any:
    """``value``'s tensors (through lists, tuples, dicts) copied, floating ones cast to ``dtype``."""
    return _map_tensors(value, lambda t: _cast_view(t, dtype) if t.is_floating_point() else t.clone())


def _cast_view(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` cast to ``dtype``; a view of part of its storage (an OpInfo's partial view, which ``as_strided``
    reads beyond) as the same view of its whole storage cast."""
    nbytes = t.untyped_storage().nbytes()
    if t.dtype == dtype or t.layout != torch.strided or (t.storage_offset() == 0 and nbytes == t.nbytes):
        return t.to(dtype)
    elements = nbytes // t.element_size()
    whole = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (elements,), (1,))
    return whole.to(dtype).as_strided(t.shape, t.stride(), t.storage_offset())


def to_dtype(workload: Workload, dtype: torch.dtype) -> Workload:
    """A deep copy of the workload with floating tensors cast to ``dtype`` (for references): the module's
    parameters and buffers, the tensors it holds outside them (:func:`map_plain_tensors`), the inputs."""
    model = copy.deepcopy(workload.model).to(dtype)
    map_plain_tensors(model, lambda t: t.to(dtype) if t.is_floating_point() else t)
    inputs = tuple(cast(t, dtype) for t in workload.inputs)
    return Workload(model, inputs)  # an optimizer is made for the copy by whoever needs one


def reference_step(case: Case, dtype: torch.dtype, call: int = 0) -> StepOutput:
    """The case's ``call``-th call run in plain eager PyTorch at ``dtype`` (float64: the reference)."""
    built = case.build()
    if call:
        built.inputs = case.inputs_for(call)
    workload = to_dtype(built, dtype)
    out = run_module_step(workload.model, workload, case.trains)
    return StepOutput([t.detach() for t in out.outputs], {k: v.detach() for k, v in out.retained.items()})
