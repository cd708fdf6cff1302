"""``onnxrt``: ONNX Runtime (CPU execution provider) behind ``aot_autograd``, as vendors build it.

torch 2.13 ships no ``onnxrt`` backend any more.  This is the one a vendor writes: AOTAutograd
partitions the step into a forward and a backward ATen graph; each is exported with
``torch.onnx.export(..., dynamo=True)`` at compile time (on zero tensors of the example inputs'
shapes: static shapes) and run in an ``onnxruntime.InferenceSession``; the session's outputs (numpy
arrays) become torch tensors with ``torch.from_numpy``.  The call is boxed: AOTAutograd's argument
list is cleared once its tensors are handed to the session, so saved activations die with the call.

A graph the exporter or the session cannot take runs in PyTorch instead (the received graph,
eagerly), and the step says so (:class:`conformance.api.adapter.Fallback`).

Memory: ONNX Runtime allocates with its own code and hands results back in numpy memory, outside
torch's allocator; the pair is held on the native domain (no probe of ours).  The session's CPU
arena is turned off (``enable_cpu_mem_arena=False``): with it, a call's intermediates come from
chunks the arena kept from earlier calls, which no window sees allocated, so the step's transient
memory would go unmeasured.  One intra-op thread: a thread pool's workers make state of their own the
first time each runs work, in whichever call that happens to be.  What a session keeps from its third
run on (24 B, once per session: docs/findings/onnxrt-repro-third-run-state.py) is in the manifest.
"""

from __future__ import annotations

import io
from importlib import metadata
from importlib.util import find_spec
from typing import Any

import torch
import torch.fx

from conformance.api.adapter import Backend, Capabilities, CompiledStep, Fallback
from conformance.api.aot import AotRecorder, AotStep, CompileFn
from conformance.api.case import Case, Workload
from conformance.models.lifetime import LifetimeModel, Observation
from conformance.probes.cpu import MemoryTrace
from conformance.util.text import clip, without_escapes

PROVIDERS = ["CPUExecutionProvider"]


def _example(value: Any) -> Any:
    """A real tensor of a (fake) example input's shape and dtype, to export with."""
    if isinstance(value, torch.Tensor):
        return torch.zeros(value.shape, dtype=value.dtype)
    return value


def export_session(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """``gm`` exported to ONNX (dynamo exporter) and loaded into a CPU ``InferenceSession``."""
    import onnxruntime

    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        args = tuple(_example(a) for a in example_inputs)
        program = torch.onnx.export(gm, args, dynamo=True, verbose=False, optimize=True)
    assert program is not None
    model = io.BytesIO()
    program.save(model)  # type: ignore[arg-type]  # onnx.save takes a file object too
    options = onnxruntime.SessionOptions()
    options.enable_cpu_mem_arena = False
    # one thread: a pool's worker threads make their own state the first time each works, in whichever call
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(model.getvalue(), options, providers=PROVIDERS)


def root_cause(exc: BaseException) -> str:
    """The innermost exception of a chain, in one line (the exporter wraps its reason in a generic one)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = without_escapes(str(exc)).strip().splitlines()
    return clip(f"{type(exc).__name__}: {lines[0] if lines else ''}", 300)


def session_call(session: Any, gm: torch.fx.GraphModule) -> Any:
    """The boxed callable running ``session`` on AOTAutograd's argument list (cleared when handed over).

    The exported model has no output for a ``None`` result of ``gm`` (a backward's gradient of an input that
    needs none): those are put back where ``gm`` returns them."""
    names = [i.name for i in session.get_inputs()]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(names) != len(placeholders):  # inputs are matched by position: one the exporter dropped shifts them
        raise ValueError(f"the exported model takes {len(names)} inputs, the graph {len(placeholders)}")
    returned = list(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    absent = [r is None for r in returned]

    def run(args: list[Any]) -> list[torch.Tensor | None]:
        feeds = {name: a.detach().contiguous().numpy() if isinstance(a, torch.Tensor) else a
                 for name, a in zip(names, args)}
        args.clear()
        outs = session.run(None, feeds)
        del feeds
        tensors = iter([torch.from_numpy(o) for o in outs])
        del outs
        return [None if none else next(tensors) for none in absent]

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def eager_call(gm: torch.fx.GraphModule) -> Any:
    """The received graph run by PyTorch (a graph ONNX could not take), boxed like the session call."""

    def run(args: list[Any]) -> Any:
        return torch.fx.Interpreter(gm, garbage_collect_values=True).boxed_run(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


class OnnxRtStep(AotStep):
    def __init__(self, case: Case, workload: Workload) -> None:
        self.recorder = AotRecorder()
        self.fallen_back: list[Fallback] = []
        super().__init__(case, workload, self.recorder.backend(self._compiler(False), self._compiler(True)))

    def _compiler(self, is_backward: bool) -> CompileFn:
        def compile_one(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            label = f"{'backward' if is_backward else 'forward'} graph {len(self.recorder.graphs) - 1}"
            try:
                made = session_call(export_session(gm, example_inputs), gm)
            except Exception as exc:
                ops = sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
                self.fallen_back.append(Fallback(label, "pytorch", tuple(ops), root_cause(exc)))
                made = eager_call(gm)
            return self.recorder.dispatched(made, self.recorder.graphs[-1])

        return compile_one

    def fallbacks(self) -> list[Fallback]:
        return list(self.fallen_back)

    def _model_options(self) -> dict[str, Any]:
        """Where every graph ran in PyTorch (an FX interpreter with eager kernels), the model counts those
        kernels' in-op allocations, as for any interpreting backend; otherwise ONNX Runtime ran the graphs."""
        everything_fell_back = bool(self.recorder.graphs) and len(self.fallen_back) == len(self.recorder.graphs)
        return {"kernel_transients": True} if everything_fell_back else {}

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        return self.recorder.received_model(observation, **self._model_options())

    def split_model(self, observation: Observation) -> LifetimeModel | None:
        return None if self._model_options() else super().split_model(observation)

    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        if not self.case.trains:
            return {}
        return self.recorder.backward_findings(traces, observation, **self._model_options())

    def notes(self) -> list[str]:
        n_fw = sum(not g.is_backward for g in self.recorder.graphs)
        n_bw = sum(g.is_backward for g in self.recorder.graphs)
        return [*super().notes(), f"route: aot_autograd, {n_fw} forward / {n_bw} backward graph(s) exported to "
                                  f"ONNX (dynamo exporter) and run by ONNX Runtime's CPU execution provider"]


class OnnxRtBackend(Backend):
    name = "onnxrt"
    preload_modules = ("torch._dynamo", "onnxruntime", "onnxscript", "torch.onnx._internal.exporter._core")
    capabilities = Capabilities(memory_domains=("torch-cpu", "native"))
    cost_weight = 3.0

    def unavailable_reason(self) -> str | None:
        for module in ("onnxruntime", "onnxscript", "onnx"):
            try:
                found = find_spec(module)
            except (ImportError, ValueError) as exc:
                return f"ONNX Runtime not usable: {type(exc).__name__}: {exc} (pip install 'torch-conformance[onnxrt]')"
            if found is None:
                return f"ONNX Runtime not usable: {module} not found (pip install 'torch-conformance[onnxrt]')"
        return None

    def versions(self) -> dict[str, str]:
        found = {"torch": str(torch.__version__)}
        for dist in ("onnxruntime", "onnxscript", "onnx"):
            try:
                found[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                found[dist] = "missing"
        return found

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return OnnxRtStep(case, workload)
