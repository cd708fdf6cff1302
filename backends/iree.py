"""``iree`` and ``iree-boxed``: IREE on the CPU (``llvm-cpu``) through iree-turbine.

``iree`` is iree-turbine's own ``torch.compile`` backend as shipped
(``iree.turbine.dynamo.backends.base``: ``aot_autograd(fw_compiler=_backend)``), so the
verdicts are what iree-turbine users get.  The adapter only adds recording: it hands
AOTAutograd a forward and a backward compiler that both call turbine's ``_backend``
unchanged (as shipped, the backward compiler *is* the forward one), keeps the graphs
they receive for the lifetime model, and watches the compiled backward
(:class:`conformance.models.donation.BackwardWatch`).

Routes.  Training cases with a ``while_loop`` go the AOT route instead: AOTAutograd
cannot trace the backward of a loop whose trip count is data (it needs
``aten._local_scalar_dense``), so Dynamo silently falls back to eager and IREE would
compile nothing.  The AOT route exports the whole step (forward, loss and backward as
``make_fx`` traces it) with ``iree.turbine.aot.export``, compiles it with IREE and runs
it with ``iree.runtime``.  Any case where the ``torch.compile`` route ends up compiling
no graph at all fails (``fail-compile``) instead of passing on eager's numbers.

Memory, two domains.  The torch CPU allocator (the engine's probe) sees what torch
allocates: tangents, anything outside the compiled graphs.  IREE's HAL allocator
(:class:`conformance.probes.hal.HalAllocatorProbe`) sees the rest: turbine copies every
call input into a HAL buffer (``allocate_buffer_copy``) held by the VM argument list
for the whole call; the program's transients; and the results, which stay in IREE
memory (torch tensors over mapped HAL buffers), so saved activations and gradients
live there.  The device is a ``local-sync`` one (installed as turbine's device for
``torch.device("cpu")``) because only that driver counts the program's allocations.
The verdict is taken on the sum of both domains (``combine_traces``: same clock) against
the lifetime model of the received graphs with ``staged=True, results_at_start=64``:
each call's inputs are charged as copies held for the call (a donated original dies
right after its copy), and each result the graph computes is allocated when the call
starts, 64-byte aligned, as IREE does; each result remains its own storage that dies
with its last user.  These are modelled, not allowed as slack, so a tensor the backend
keeps past its modelled death still shows: in the peak and residual (a leaked result
fails ``fail-residual``, tests/planted_iree_backends.py), and for backward inputs in
``result.memory.findings["backward_inputs"]`` (:mod:`conformance.models.donation`), which fails the
peak contract by itself when saved activations are measured alive past their release
(as shipped: held for the whole call; iree-boxed: released, but their bytes stay
allocated because IREE packs a call's results into one buffer shared with the loss).

``iree-boxed`` calls the same compiled IREE functions (same pass pipeline, importer
and ``Launchable``) with the boxed convention: it clears AOTAutograd's argument list and
drops each input right after copying it into its device buffer.  It also drops the
``None`` gradients AOTAutograd's backward returns for inputs that need none, which as
shipped make the IREE import fail (``unhandled torch type: '!torch.none'``).  And it runs
``while_loop``: before import, every loop's additional inputs (what its body and condition
read from outside) become carries the body returns unchanged
(:func:`conformance.backends.iree_loops.lift_loop_inputs`), which the shipped importer lowers
to a ``torch.prim.Loop`` that verifies; as shipped the loop fails verification and the
compile segfaults (docs/findings/iree-repro-while-loop-additional-inputs.py).  A loop's Python
int carries (a counter, a size) become 0-d int64 tensors
(:func:`conformance.backends.iree_loops.number_carries_as_tensors`), and the model reads the
received graph with that rewrite applied (the counter's buffer each trip, as run).  The verdict
holds the loop as IREE runs it (one VM invocation, its trips inside) to the received graph's
model unrolled with the observed trip count, in both domains.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, ClassVar

import torch
import torch._functorch.config
import torch.fx
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

from conformance.api.adapter import Backend, Capabilities, CompiledStep, CompileError
from conformance.api.aot import AotRecorder, DynamoStep, graph_breaks, snapshot
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput, depends_on_data, params_of, trace_step
from conformance.models.donation import classify
from conformance.models.lifetime import LifetimeModel, Observation, model_forward_backward, model_graph
from conformance.probes.cpu import MemoryProbe, MemoryTrace
from conformance.probes.hal import HalAllocatorProbe, active_probe

from . import iree_cache as cache
from .iree_cache import cached_module, compiled_sources, jit_loader, turbine_module_cache
from .iree_loops import (
    has_nested_loop,
    lift_loop_inputs,
    max_for_full_amax,
    missing_hops,
    non_tensor_carries,
    number_carries_as_tensors,
    views_for_view_copies,
)
from .iree_stream import declared_transients

DRIVER = "local-sync"
#: IREE allocates a function's results when it starts, packed at this alignment (stream resource alignment).
RESULT_ALIGNMENT = 64
AOT_ROUTE_REASON = (
    "AOT route: AOTAutograd cannot trace the backward of a while_loop whose trip count is data "
    "(aten._local_scalar_dense), so torch.compile falls back to eager and IREE would compile nothing; "
    "the whole step is exported with iree.turbine.aot.export instead"
)

AOT_BOXED_NOTE = (
    "AOT route (as for iree, torch.compile would fall back to eager), boxed: the step as make_fx traces it "
    "goes through turbine's passes and importer as in the torch.compile route, its loops' outer reads carried; "
    "not through iree.turbine.aot.export, whose torch.export re-trace rejects a loop body that returns a "
    "carried-through input"
)


# -- device and invocation plumbing ----------------------------------------------------


@dataclass
class _Runtime:
    device: Any  # iree.turbine.runtime.device.Device on local-sync
    allocator: Any


_RUNTIME: _Runtime | None = None


def runtime() -> _Runtime:
    """Install a ``local-sync`` turbine device for ``torch.device("cpu")`` (once per process).

    Turbine would create a ``local-task`` one; the compile flags are the same
    (``llvm-cpu``, host CPU features), only the driver differs.  The HAL probe sees inside
    each call through :class:`TurbineHalProbe`, for its window only.
    """
    global _RUNTIME
    if _RUNTIME is not None:
        return _RUNTIME
    from iree.turbine.runtime import device as tdev

    cpu = torch.device("cpu")
    state = tdev.DeviceState(driver=DRIVER, torch_device=cpu, dlpack_device_type_code=1,
                             enumerated_info={"device_id": "conformance"})
    device = tdev.Device(device_state=state)
    mapping = getattr(tdev._CURRENT_THREAD, "device_by_torch_device", None)
    if mapping is None:
        mapping = tdev._CURRENT_THREAD.device_by_torch_device = {}
    mapping[(cpu, None)] = device
    _RUNTIME = _Runtime(device, device.hal_device.allocator)
    return _RUNTIME


class TurbineHalProbe(HalAllocatorProbe):
    """The HAL probe, with turbine's VM invocations run inside it (``around_invoke``) for its window only.

    Turbine's ``launch.invoke_vm_function`` (and ``_export_torch_tensor``, which makes each result a
    torch tensor over its HAL buffer) are replaced when the window opens and put back when it closes:
    outside a probed call turbine is as shipped.  Each invocation's record also says what it was handed
    (``inputs``: the HAL copies' shapes, dtypes and bytes), what it returned (``results``, each with
    ``same_buffer_as`` where IREE returned one buffer twice, and ``buffer``/``offset``: which of the call's
    result allocations holds it, :func:`result_allocations`) and which earlier results were still alive
    when it started (``alive_before``); at the window's end each result says whether it outlived the
    step (``alive_after``), so blame can name one result buffer (:func:`conformance.checks.blame.runtime_buffers`)."""

    def __enter__(self) -> TurbineHalProbe:
        from iree.runtime import VmVariantList
        from iree.turbine.runtime import launch

        super().__enter__()
        self._exported: list[tuple[int, int, StorageWeakRef]] = []
        self._ptrs: dict[int, list[int]] = {}
        self._spans: dict[int, list[tuple[int, int]]] = {}
        shipped = self._shipped = launch.invoke_vm_function
        shipped_export = self._shipped_export = launch._export_torch_tensor

        def probed_invoke(*args: Any, **kwargs: Any) -> Any:
            alive = [[k, j] for k, j, weak in self._exported if not weak.expired()]
            lists = [a for a in args if isinstance(a, VmVariantList)]
            inputs = _views(lists[0]) if lists else []
            out = self.around_invoke(lambda: shipped(*args, **kwargs))
            self.invocations[-1].update(inputs=inputs, results=[], alive_before=alive)
            return out

        def probed_export(bv: Any, device: Any) -> Any:
            tensor = shipped_export(bv, device)
            if self.invocations and isinstance(tensor, torch.Tensor):
                k = len(self.invocations) - 1
                results = self.invocations[k].setdefault("results", [])
                ptrs = self._ptrs.setdefault(k, [])
                entry: dict[str, Any] = {"shape": list(tensor.shape), "dtype": _dtype(tensor.dtype),
                                         "bytes": tensor.numel() * tensor.element_size()}
                if tensor.data_ptr() in ptrs:
                    entry["same_buffer_as"] = ptrs.index(tensor.data_ptr())
                ptrs.append(tensor.data_ptr())
                self._spans.setdefault(k, []).append((tensor.data_ptr(), entry["bytes"]))
                self._exported.append((k, len(results), StorageWeakRef(tensor.untyped_storage())))
                results.append(entry)
            return tensor

        launch.invoke_vm_function = probed_invoke
        launch._export_torch_tensor = probed_export  # type: ignore[assignment]  # same call, recorded
        return self

    def __exit__(self, *exc: object) -> None:
        from iree.turbine.runtime import launch

        launch.invoke_vm_function = self._shipped
        launch._export_torch_tensor = self._shipped_export
        for k, j, weak in self._exported:
            self.invocations[k]["results"][j]["alive_after"] = not weak.expired()
        for k, spans in self._spans.items():  # which of the call's HAL allocations holds each result
            for entry, (buffer, offset) in zip(self.invocations[k]["results"], result_allocations(spans)):
                entry.update(buffer=buffer, offset=offset)
        self._exported, self._ptrs, self._spans = [], {}, {}
        super().__exit__(*exc)


def result_allocations(spans: list[tuple[int, int]], alignment: int = RESULT_ALIGNMENT) -> list[tuple[int, int]]:
    """Per result of one call (its host address and bytes), the HAL allocation it lies in and its offset there.

    IREE packs several results into one allocation at consecutive ``alignment``-aligned offsets
    (``stream.resource.alloca`` + ``stream.resource.subview``), but may return a call's results in several
    (one per execution region: shape-seq-train's forward returns two).  On local-sync a HAL buffer is host
    memory, and a separate allocation starts past its own buffer header, so a result begins the previous
    one's allocation exactly where the previous result's aligned slot ends or it begins another allocation.
    A result returned twice (the same address) shares its twin's allocation and offset."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    placed: dict[int, tuple[int, int]] = {}
    buffers = 0
    prev: tuple[int, int, int, int] | None = None  # (address, bytes, buffer, offset) of the last result placed
    for i in order:
        ptr, nbytes = spans[i]
        if prev is not None and ptr == prev[0]:
            placed[i] = (prev[2], prev[3])
            continue
        if prev is not None and ptr == prev[0] + -(-prev[1] // alignment) * alignment:
            place = (prev[2], prev[3] + ptr - prev[0])
        else:
            place, buffers = (buffers, 0), buffers + 1
        placed[i] = place
        prev = (ptr, nbytes, *place)
    # number the allocations in the order the call returned their first result
    first: dict[int, int] = {}
    for i in range(len(spans)):
        first.setdefault(placed[i][0], len(first))
    return [(first[placed[i][0]], placed[i][1]) for i in range(len(spans))]


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _views(arg_list: Any) -> list[dict[str, Any]]:
    """The HAL buffer views an invocation is handed (its input copies): shape, dtype, bytes."""
    from iree.runtime import HalBufferView, VmRef
    from iree.turbine.runtime.launch import _INFERRED_ELEMENT_TYPE_TO_DTYPE

    views = []
    for i in range(len(arg_list)):
        ref = arg_list.get_variant(i)
        bv = ref.deref(HalBufferView, True) if isinstance(ref, VmRef) else None
        if bv is not None:
            dtype = _INFERRED_ELEMENT_TYPE_TO_DTYPE.get(int(bv.element_type))
            views.append({"shape": list(bv.shape), "dtype": _dtype(dtype) if dtype else str(bv.element_type),
                          "bytes": int(bv.byte_length)})
    return views


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Capture fd 2 (the IREE compiler prints its diagnostics there) into the yielded list."""
    sink: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield sink
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", errors="replace")
            sink.append(text)
            os.write(2, text.encode())  # still shown to the user


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if "error:" in ln]
    return lines[0][:300] if lines else ""


#: iree-compile diagnostics whose cause is known, and what the verdict says of it (the missing piece)
KNOWN_DIAGNOSTICS = (
    ("failed to legalize unresolved target materialization from ('i1') to ('!stream.resource<*>', 'index')",
     "the missing piece: iree-compile cannot lower the device-to-host read of a while_loop's entry condition "
     "(docs/findings/iree-repro-while-loop-amax-cond.py; seen: a condition reducing with amax over all dims, which "
     "the loop route computes as max, and a loop nested in another loop's body)"),
)

#: The verdict for that error where the graph has a loop in another loop's body (its other cause).
NESTED_LOOP_PIECE = (
    "the missing piece: iree-compile cannot lower a while_loop nested in another's body: the host read of the "
    "inner loop's entry condition (with it constant the program compiles; docs/findings/iree-repro-while-loop-"
    "nested.py)"
)


def _compile_guarded(what: str, compile_fn: Callable[[], Any], nested_loop: bool = False) -> Any:
    with captured_stderr() as err:
        try:
            return compile_fn()
        except Exception as exc:
            failure = exc
    text = err[0] if err else ""
    diag = _first_error(text)
    known = [why for mark, why in KNOWN_DIAGNOSTICS if mark in text or mark in str(failure)]
    if known and nested_loop and known[0] is KNOWN_DIAGNOSTICS[0][1]:
        known[0] = NESTED_LOOP_PIECE
    raise CompileError(f"IREE compile of the {what} failed: " + (f"{known[0]}; " if known else "")
                       + f"{type(failure).__name__}: {failure}" + (f" [{diag}]" if diag else "")) from failure


def _module_bytes(output: Any) -> bytes:
    """The bytes of the module ``exported.compile(save_to=None)`` returns (an ``Output`` to map)."""
    return bytes(output.map_memory())


def cache_note(hits: int, misses: int) -> str:
    where = cache.cache_root()
    if where is None:
        return f"IREE module cache off (${cache.CACHE_ENV})"
    return f"IREE module cache {where}: {hits} hit(s), {misses} compiled"


def label_invocations(invocations: list[dict[str, Any]], graphs: list[tuple[str, torch.fx.GraphModule]]) -> None:
    """Name each recorded invocation's input copies and results by the graph it ran (``graphs``: the
    model's prefix and the graph, one per invocation, in order) as the lifetime model names their
    storages (``fw:stage:primals_1``, ``bw:add_7``), so blame can set a measured buffer beside the
    model's.  Left as recorded where the invocations are not those graphs' calls one for one."""
    if len(invocations) != len(graphs):
        return
    for call, (prefix, gm) in zip(invocations, graphs):
        inputs = [f"{prefix}stage:{n.name}" for n in gm.graph.nodes
                  if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)]
        output = next(n for n in gm.graph.nodes if n.op == "output")
        flat: list[torch.fx.Node] = []
        torch.fx.node.map_arg(output.args[0], flat.append)
        returned = [f"{prefix}stage:{n.name}" if n.op == "placeholder" else f"{prefix}{n.name}"
                    for n in flat if isinstance(n.meta.get("val"), torch.Tensor)]
        for entries, names in ((call.get("inputs") or [], inputs), (call.get("results") or [], returned)):
            if len(entries) == len(names):
                for entry, name in zip(entries, names):
                    entry["label"] = name


def call_transients(call: dict[str, Any]) -> int:
    """The bytes a recorded call allocated and freed inside itself (its peak over what it kept), as blame reads them."""
    kept = max(0, int(call["live_after"]) - int(call["live_before"]))
    return max(0, int(call["peak_rise"]) - kept)


def add_program_transients(invocations: list[dict[str, Any]], sources: list[str | None], flags: list[str]) -> None:
    """Where the call that reached the HAL peak allocated buffers of its own, the bytes its compiled program
    declares as its own (:func:`conformance.backends.iree_stream.declared_transients`, read from the source
    it ran: ``sources``, one per invocation), as ``program_transients``, for blame to hold them to."""
    if not invocations or len(sources) != len(invocations):
        return
    k, top = max(enumerate(invocations), key=lambda kv: kv[1]["live_before"] + kv[1]["peak_rise"])
    source = sources[k]
    if source is not None and call_transients(top) > 0:
        top["program_transients"] = declared_transients(source, flags)


# -- the torch.compile route -----------------------------------------------------------


CompileFn = Callable[[torch.fx.GraphModule, list[Any]], Any]


def guarded(compile_graph: CompileFn, what: str) -> CompileFn:
    """``compile_graph`` with IREE's compile failures turned into one-line compile errors, and its
    modules through the compiled-module cache (:mod:`conformance.backends.iree_cache`)."""

    def compile_one(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        with turbine_module_cache():
            return _compile_guarded(what, lambda: compile_graph(gm, example_inputs), has_nested_loop(gm))

    return compile_one


def shipped_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """iree-turbine's own ``_backend``, untouched."""
    from iree.turbine.dynamo.backends.base import _backend

    return _backend(gm, example_inputs)


@dataclass
class BoxedSource:
    """What :func:`boxed_compile` hands IREE: the imported program's MLIR and how to call it."""

    mlir: str
    entry_point: str
    none_positions: list[int]


def boxed_source(gm: torch.fx.GraphModule, example_inputs: list[Any], passes: bool = True) -> BoxedSource:
    """Turbine's ``_backend`` up to the MLIR it compiles (same passes, importer, custom-op expansion),
    with the ``None`` results dropped and every ``while_loop``'s additional inputs carried
    (:func:`conformance.backends.iree_loops.lift_loop_inputs`).  ``passes=False``: without turbine's
    decompositions (a step ``make_fx`` traced, as the AOT route's ``aot.export`` imports it)."""
    from iree.compiler.extras.fx_importer import FxImporter
    from iree.turbine.dynamo.passes import turbine_cpu_pass_pipeline
    from iree.turbine.transforms.general.custom_op_expansion import ExpandCustomOpsPass

    none_positions = _strip_none_outputs(gm)
    if passes:
        gm = turbine_cpu_pass_pipeline(gm, example_inputs)
    lift_loop_inputs(gm)
    number_carries_as_tensors(gm)
    refused = non_tensor_carries(gm)  # what is left: a float carry
    if refused:
        raise CompileError(refused)
    views_for_view_copies(gm)
    max_for_full_amax(gm)
    importer = FxImporter()
    importer.import_graph_module(gm)
    _verified(importer.module_op)
    ExpandCustomOpsPass(importer.module_op).run()
    entry_point = "main" if len(example_inputs) == 0 else "main$async"  # as turbine does (its issue #984)
    return BoxedSource(str(importer.module_op), entry_point, none_positions)


def _verified(module: Any) -> None:
    """Refuse an imported module that fails MLIR verification, with the verifier's first error: compiled in
    process, such a module can take the process down (the shipped while_loop import segfaults there)."""
    try:
        module.verify()
    except Exception as exc:  # the bindings' MLIRError, with the diagnostics in its text
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise CompileError("the imported module fails MLIR verification (refused before the in-process "
                           f"compile, which can crash on it): {' '.join(lines[:3])[:400]}") from exc


def boxed_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """The same compile as turbine's ``_backend``, returning a callable with the boxed convention."""
    from iree.turbine.runtime.launch import Launchable

    source = boxed_source(gm, example_inputs)
    launch = Launchable.jit_compile(source.mlir, entry_point=source.entry_point)
    launch.preload(device=torch.device("cpu"))
    return BoxedLaunch(launch, source.none_positions)


def nonefix_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """Turbine's ``_backend`` untouched, on the graph without its ``None`` results.

    Keeps the shipped calling convention (``make_boxed_func`` around ``*args``), so
    training runs and the convention's effect on backward inputs can be measured."""
    none_positions = _strip_none_outputs(gm)
    return _ReinsertNones(shipped_compile(gm, example_inputs), none_positions)


@dataclass
class _ReinsertNones:
    compiled: Any
    none_positions: list[int]
    _boxed_call: bool = True

    def __call__(self, args: list[Any]) -> Any:
        results = list(self.compiled(args))
        for pos in self.none_positions:
            results.insert(pos, None)
        return results


def _strip_none_outputs(gm: torch.fx.GraphModule) -> list[int]:
    """Remove ``None`` results (grads of inputs that need none); their positions, to put back."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = output.args[0]
    if not isinstance(values, (list, tuple)):
        return []
    positions = [i for i, v in enumerate(values) if v is None]
    if positions:
        output.args = (tuple(v for v in values if v is not None),)
        gm.recompile()
    return positions


@dataclass
class BoxedLaunch:
    """Calls a compiled ``Launchable`` taking AOTAutograd's list over: each input dies once copied."""

    launch: Any
    none_positions: list[int]
    _boxed_call: bool = True
    #: Per probed call: bytes of inputs whose storage died when dropped after their copy, and how
    #: many of those bytes the HAL allocator really freed while the inputs were dropped (the rest share
    #: an allocation still in use).
    staging: list[dict[str, int]] = field(default_factory=list)

    def __call__(self, args: list[Any]) -> Any:
        from iree.runtime import HalBufferView, VmRef, VmVariantList
        from iree.turbine.runtime.launch import _export_torch_tensor, invoke_vm_function

        device = runtime().device
        probe = active_probe()
        arg_list = VmVariantList(len(args))
        pending = list(reversed(args))
        args.clear()  # the caller's list no longer keeps anything alive
        dropped = freed = 0
        seen: set[int] = set()  # IREE may return one buffer for two results (relu and its detach)
        while pending:
            arg = pending.pop()
            weak, nbytes, live0 = None, 0, probe.live() if probe is not None else 0
            if isinstance(arg, torch.Tensor):
                copy_bytes = arg.numel() * arg.element_size()
                if arg.untyped_storage().data_ptr() not in seen:
                    seen.add(arg.untyped_storage().data_ptr())
                    weak, nbytes = StorageWeakRef(arg.untyped_storage()), arg.untyped_storage().nbytes()
                arg_list.push_ref(device.import_torch_tensor(arg.data.contiguous()))
            elif isinstance(arg, int):
                arg_list.push_int(arg)
            elif isinstance(arg, float):
                arg_list.push_float(arg)
            if probe is not None:
                probe.sample()  # original and copy both alive here, at most one input at a time
            del arg  # its last use was the copy
            if probe is not None and weak is not None and weak.expired():  # credited once all aliases died
                dropped += nbytes
                # freed now: its own bytes, or with them the bytes of earlier dropped inputs that shared its
                # allocation (IREE frees a result allocation with the last result in it)
                freed += min(dropped - freed, max(0, live0 + copy_bytes - probe.live()))
        if probe is not None:
            self.staging.append({"dropped_bytes": dropped, "hal_freed_bytes": freed,
                                 "still_allocated_bytes": dropped - freed})
        vm_context, vm_function = self.launch._resolve_target_binary(device)
        ret_list = VmVariantList(0)
        invoke_vm_function(device, self.launch._is_async, vm_context, vm_function, arg_list, ret_list)
        del arg_list
        results: list[Any] = []
        for i in range(len(ret_list)):
            ref = ret_list.get_variant(i)
            if isinstance(ref, VmRef):
                bv = ref.deref(HalBufferView, True)
                if bv is not None:
                    results.append(_export_torch_tensor(bv, device))
            elif isinstance(ref, (int, float)):  # a dynamic graph's sizes (the forward saves them for the backward)
                results.append(ref)
        for pos in self.none_positions:
            results.insert(pos, None)
        return results


class IreeDynamoStep(DynamoStep):
    """A case through ``torch.compile`` with a recording AOTAutograd backend.

    A case whose shapes change is compiled as its schedule says (``follows_compile_mode``:
    Dynamo's default recompiles, ``dynamic=True``, ``mark_dynamic``), and each graph IREE compiles
    logs the calls that ran it, so each probed call is held to the model of the graph it ran at
    its own sizes; :meth:`notes` says per call which graph ran and whether its dims were dynamic."""

    follows_compile_mode = True

    def __init__(self, case: Case, workload: Workload, compile_graph: CompileFn, slack: int,
                 as_run: Callable[[torch.fx.GraphModule], Any] | None = None) -> None:
        self.rt = runtime()
        self.recorder = AotRecorder()
        self.slack = slack
        #: rewrites a received graph's snapshot into the program as IREE runs it, for the model (iree-boxed: a
        #: loop's number carries as the 0-d tensors the program carries)
        self.as_run = as_run
        #: per received graph (its index), the MLIR source IREE compiled it from
        self.sources: dict[int, str | None] = {}
        self.cache_before = (cache.STATS.hits, cache.STATS.misses)  # the graphs compile at the first call
        self.breaks_before = graph_breaks()
        super().__init__(case, workload, self._backend(guarded(compile_graph, "forward graph"),
                                                       guarded(compile_graph, "backward graph")))

    def _backend(self, forward: CompileFn, backward: CompileFn) -> Any:
        """aot_autograd with compilers that record each graph, log the calls that run it and watch the backward."""
        from torch._dynamo.backends.common import aot_autograd

        def compiler(compile_graph: CompileFn, is_backward: bool) -> CompileFn:
            def compile_one(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
                received = self.recorder.record(gm, is_backward)
                if self.as_run is not None:
                    self.as_run(received.gm)
                with compiled_sources() as sources:
                    made = compile_graph(gm, example_inputs)
                self.sources[len(self.recorder.graphs) - 1] = sources[-1] if sources else None
                compiled = self.recorder.dispatched(made, received)
                return self.recorder.watch(compiled, gm) if is_backward else compiled

            return compile_one

        return aot_autograd(fw_compiler=compiler(forward, False), bw_compiler=compiler(backward, True))

    def begin_call(self) -> None:
        self.recorder.log.begin_call()

    def run(self) -> StepOutput:
        out = super().run()
        if not self.recorder.graphs:
            why = [r for r, n in graph_breaks().items() if n > self.breaks_before.get(r, 0)]
            said = f" ({' '.join(why[0].split()[:40])})" if why else ""
            raise CompileError(f"torch.compile route compiled no graph with IREE: Dynamo ran the case in eager{said}")
        return out

    def _models(self, observation: Observation) -> tuple[LifetimeModel, LifetimeModel | None] | None:
        """The received forward (and backward) the observed call ran, at that call's sizes."""
        ran = self.recorder.ran(observation)
        if ran is None:
            return None
        fw, bw_graph, bound = ran
        bw = bw_graph.gm if bw_graph is not None else None
        kw: dict[str, Any] = {"staged": True, "results_at_start": RESULT_ALIGNMENT}
        donated = model_forward_backward(fw.gm, bw, bound, **kw)
        held = model_forward_backward(fw.gm, bw, bound, "held", **kw) if bw else None
        return donated, held

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        models = self._models(observation)
        return models[0] if models else None

    def extra_probes(self) -> list[MemoryProbe]:
        self.hal_probe = TurbineHalProbe(self.rt.allocator)
        return [self.hal_probe]

    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        found: dict[str, Any] = {"iree_invocations": self.hal_probe.invocations}
        ran = self.recorder.log.calls[-1] if self.recorder.log.calls else []
        graphs = [self.recorder.graphs[d.graph] for d in ran]
        label_invocations(self.hal_probe.invocations, [("bw:" if g.is_backward else "fw:", g.gm) for g in graphs])
        add_program_transients(self.hal_probe.invocations, [self.sources.get(d.graph) for d in ran],
                               list(self.rt.device.compile_target_flags))
        if not self.case.trains:
            return found
        launches = [getattr(w.compiled, "compiled", w.compiled) for w in self.recorder.watches]  # under the log
        staged = [c.staging[-1] for c in launches if isinstance(c, BoxedLaunch) and c.staging]
        pinned = staged[-1]["still_allocated_bytes"] if staged else 0
        if staged:  # dropped saved inputs whose IREE buffer stayed allocated (shared with live results)
            found["backward_inputs_staging"] = staged[-1]
        models = self._models(observation)
        donated, held = models if models else (None, None)
        found.update(classify(self.recorder.watches, max(t.peak_bytes for t in traces), donated, held, self.slack,
                              pinned).to_json())
        return found

    def notes(self) -> list[str]:
        n_fw = sum(not g.is_backward for g in self.recorder.graphs)
        n_bw = sum(g.is_backward for g in self.recorder.graphs)
        notes = [f"route: torch.compile (iree-turbine aot_autograd), {n_fw} forward / {n_bw} backward graph(s) "
                 f"compiled by IREE on {DRIVER}",
                 cache_note(cache.STATS.hits - self.cache_before[0], cache.STATS.misses - self.cache_before[1])]
        if self.case.shapes is not None:
            notes.append(shape_note(self.recorder))
        return notes


def _dims(gm: torch.fx.GraphModule) -> str:
    """A graph's input shapes, its dynamic dims by their symbols (``[s0, 16]``)."""
    shapes = []
    for node in gm.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if isinstance(val, torch.Tensor) and val.dim():
            shapes.append("[" + ", ".join(str(d) for d in val.shape) + "]")
    return " ".join(shapes)


def shape_note(recorder: AotRecorder) -> str:
    """Per call of a case whose shapes change, what IREE ran: a graph compiled for that call (static or with
    dynamic dims, and its input shapes) or one an earlier call compiled."""
    seen: set[int] = set()
    parts = []
    for call, ran in enumerate(recorder.log.calls):
        forwards = list(dict.fromkeys(d.graph for d in ran if not recorder.graphs[d.graph].is_backward))
        what = []
        for g in forwards:
            gm = recorder.graphs[g].gm
            dynamic = any(isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape)
                          for v in (n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"))
            kind = "dynamic dims" if dynamic else "static"
            what.append(f"graph {g} ({'reused' if g in seen else 'compiled'}, {kind} {_dims(gm)})")
            seen.add(g)
        parts.append(f"call {call}: " + ("; ".join(what) if what else "no IREE graph ran"))
    return "IREE per call: " + " | ".join(parts)


# -- the AOT route ---------------------------------------------------------------------


class IreeAotStep(CompiledStep):
    """The whole step exported with ``iree.turbine.aot``, compiled by IREE, run with ``iree.runtime``."""

    def __init__(self, case: Case, workload: Workload, boxed: bool = False) -> None:
        from iree.runtime import VmContext, VmModule, create_hal_module
        from iree.turbine import aot

        self.rt = runtime()
        self.case = case
        self.workload = workload
        self.boxed = boxed
        self.gm, args, self.param_names = trace_step(workload, case.trains)
        if depends_on_data(self.gm):  # its Python read the first call's values: no one graph runs every call
            raise CompileError("the step's graph depends on its values (traced on the first call's): one exported "
                               "module cannot run every call")
        self.state = {**dict(workload.model.named_parameters()), **dict(workload.model.named_buffers())}
        self.trainable = list(params_of(workload.model)) if case.trains else []

        #: the MLIR source IREE compiled the step from
        self.source: str | None = None

        def build() -> bytes:
            exported = aot.export(self.gm, *[a.detach() for a in args])
            flags = self.rt.device.compile_target_flags[1:]  # host CPU features, as turbine
            exported.session.set_flags(*flags)
            self.source = str(exported.mlir_module)
            return cached_module(str(exported.mlir_module), ["llvm-cpu", *flags],
                                 lambda: _module_bytes(exported.compile(save_to=None, target_backends="llvm-cpu")))

        def build_boxed() -> Any:
            traced = snapshot(self.gm)  # the lifetime model keeps reading the step as traced
            self.source = boxed_source(traced, [a.detach() for a in args], passes=False).mlir
            return jit_loader(self.source)(self.rt.device)

        cache_before = (cache.STATS.hits, cache.STATS.misses)
        if boxed:
            missing = missing_hops(self.gm)
            if missing:  # one clear reason, not the importer's traceback
                raise CompileError(f"IREE cannot import the traced step: {missing}")
            module = _compile_guarded("traced step", build_boxed, has_nested_loop(self.gm))
        else:
            module = VmModule.copy_buffer(self.rt.device.vm_instance, _compile_guarded("exported step", build))
        self.cache_use = (cache.STATS.hits - cache_before[0], cache.STATS.misses - cache_before[1])
        instance = self.rt.device.vm_instance
        self.context = VmContext(instance, [create_hal_module(instance, self.rt.device.hal_device), module])
        self.function = module.lookup_function("main")

    def run(self) -> StepOutput:
        from iree.runtime import HalBufferView, VmRef, VmVariantList
        from iree.turbine.runtime.launch import _export_torch_tensor, invoke_vm_function

        device = self.rt.device
        args: list[Any] = [self.state[n].detach() for n in self.param_names]
        args.extend(pytree.tree_leaves(tuple(self.workload.inputs)))
        arg_list = VmVariantList(len(args))
        for a in args:
            arg_list.push_ref(device.import_torch_tensor(a.contiguous()))
        del args, a
        ret_list = VmVariantList(0)
        invoke_vm_function(device, False, self.context, self.function, arg_list, ret_list)
        del arg_list
        outs = [_export_torch_tensor(ret_list.get_variant(i).deref(HalBufferView, True), device)
                for i in range(len(ret_list)) if isinstance(ret_list.get_variant(i), VmRef)]
        del ret_list
        if not self.case.trains:
            return StepOutput(outs)
        loss, grads = outs[0], outs[1:]
        del outs
        for name, g in zip(self.trainable, grads):
            self.state[name].grad = g
        return StepOutput([loss], dict(zip(self.trainable, grads)))

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        retained = range(1, 1 + len(self.trainable)) if self.case.trains else ()
        return model_graph(self.gm, observation, retained, staged=True, results_at_start=RESULT_ALIGNMENT,
                           kernel_transients=False)

    def extra_probes(self) -> list[MemoryProbe]:
        self.hal_probe = TurbineHalProbe(self.rt.allocator)
        return [self.hal_probe]

    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        label_invocations(self.hal_probe.invocations, [("", self.gm)])
        add_program_transients(self.hal_probe.invocations, [self.source] * len(self.hal_probe.invocations),
                               list(self.rt.device.compile_target_flags))
        return {"iree_invocations": self.hal_probe.invocations}

    def notes(self) -> list[str]:
        how = (AOT_BOXED_NOTE if self.boxed else AOT_ROUTE_REASON)
        return [how, cache_note(*self.cache_use)]


# -- adapters --------------------------------------------------------------------------


def uses_aot_route(case: Case) -> bool:
    return case.trains and "while_loop" in case.requires


class IreeBackend(Backend):
    name = "iree"
    preload_modules = ("torch._dynamo", "iree.compiler.extras.fx_importer", "iree.runtime",
                       "iree.turbine.dynamo.backends.base")
    capabilities = Capabilities(memory_domains=("torch-cpu", "iree-hal"), dynamic_shapes=True)
    compile_graph: ClassVar[CompileFn] = staticmethod(shipped_compile)
    #: the harness's convention fixes on the AOT route too (loops' outer reads carried, no torch.export re-trace)
    harness_fixes: ClassVar[bool] = False

    def warm_up(self) -> None:
        """The compiler, the runtime and turbine's importer (a second or two of imports)."""
        import iree.compiler.extras.fx_importer
        import iree.runtime
        import iree.turbine.dynamo.backends.base  # noqa: F401

    def unavailable_reason(self) -> str | None:
        try:
            import iree.compiler
            import iree.runtime
            import iree.turbine.dynamo.backends.base

            iree.runtime.get_driver(DRIVER)
        except Exception as exc:
            return f"IREE not usable: {type(exc).__name__}: {exc} (pip install 'torch-conformance[iree]')"
        return None

    def versions(self) -> dict[str, str]:
        found: dict[str, str] = {"torch": str(torch.__version__)}
        for dist in ("iree-turbine", "iree-base-compiler", "iree-base-runtime"):
            try:
                found[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                found[dist] = "missing"
        found["iree-driver"] = DRIVER
        return found

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        if uses_aot_route(case):
            return IreeAotStep(case, workload, boxed=self.harness_fixes)
        return IreeDynamoStep(case, workload, type(self).compile_graph, self.peak_slack_bytes,
                              number_carries_as_tensors if self.harness_fixes else None)


class IreeBoxedBackend(IreeBackend):
    """The same IREE programs, called with the boxed convention (the fix, for users to copy)."""

    name = "iree-boxed"
    compile_graph: ClassVar[CompileFn] = staticmethod(boxed_compile)
    harness_fixes: ClassVar[bool] = True


class IreeNoneFixBackend(IreeBackend):
    """Turbine's compile and calling convention as shipped; only the ``None`` gradients dropped.

    Not an entry point: select it as ``conformance.backends.iree:IreeNoneFixBackend`` to see
    what the shipped convention does to backward inputs on cases the shipped backend cannot compile."""

    name = "iree-nonefix"
    compile_graph: ClassVar[CompileFn] = staticmethod(nonefix_compile)
