"""``openvino``: OpenVINO's own ``torch.compile`` backend (``openvino.torch``) on its CPU plugin, as shipped.

Training needs its ``aot_autograd`` option (without it the compiled forward returns tensors with no
autograd history), so every case takes that route: AOTAutograd, with OpenVINO's decomposition table,
hands each forward and backward graph to the compiler of ``fx_openvino``'s ``aot_autograd`` branch,
repeated here step by step (``replace_params_with_constants``, OpenVINO's ``Partitioner``,
``execute`` on the partitioned module, ``compile_fx`` where any of it raises) so the step can say
what ran where.  What OpenVINO does not take runs in PyTorch, silently: its partitioner leaves
``fused_*`` modules for the supported parts and plain torch nodes for the rest, a partition whose
OpenVINO run fails falls back to its torch graph for good, and a graph that fails to partition is
compiled by inductor.  Each is a :class:`conformance.api.adapter.Fallback` on the record.

OpenVINO's decompositions come from its own module, imported once with torch's global table swapped
for a private one (:func:`openvino_decompositions`): ``import openvino.torch`` would register its
``convolution_backward`` in torch's table, and every backend in the worker would get it.  The table
handed to AOTAutograd is the one a clean process's ``import openvino.torch`` gives OpenVINO.

Memory: OpenVINO allocates its buffers with its own code (native domain, no probe of ours); the
infer request keeps its output buffers (``share_outputs=True``) from one call to the next.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from collections import defaultdict
from importlib import metadata
from importlib.util import find_spec
from typing import Any

import torch
import torch.fx

from conformance.api.adapter import Backend, Capabilities, CompiledStep, Fallback
from conformance.api.aot import AotRecorder, AotStep, CompileFn
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput
from conformance.util.text import clip

DYNAMO = "openvino.frontend.pytorch.torchdynamo"
#: the options of ``torch.compile(backend="openvino", options=...)`` this adapter runs with
OPTIONS = {"aot_autograd": True}


@functools.cache
def openvino_decompositions() -> dict[Any, Any]:
    """The table OpenVINO's backend passes AOTAutograd, built without touching torch's global tables."""
    import torch._decomp as decomp

    private: defaultdict[str, dict[Any, Any]] = defaultdict(dict)
    shipped, decomp.global_decomposition_table = decomp.global_decomposition_table, private  # type: ignore[assignment]
    try:
        module_name = f"{DYNAMO}.decompositions"
        module = sys.modules.get(module_name)
        module = importlib.reload(module) if module is not None else importlib.import_module(module_name)
    finally:
        decomp.global_decomposition_table = shipped
    wanted = module.get_inf_decomposition_list() + module.get_aot_decomposition_list()
    table = decomp.get_decompositions(wanted)
    own = private["post_autograd"]
    table.update({op: fn for op, fn in own.items() if op in wanted or op.overloadpacket in wanted})
    return table


def _ran_in_torch(gm: torch.fx.GraphModule) -> list[str]:
    """The ops the partitioned graph runs outside OpenVINO's ``fused_*`` modules (``getitem`` is plumbing)."""
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "getitem" not in str(n.target)]
    return sorted(set(ops))


class _Errors(logging.Handler):
    """Keeps the first line of each 'execution failed' record OpenVINO's executor logs."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "execution failed" in message:
            first = message.removeprefix("OpenVINO execution failed with ").strip().splitlines()
            self.into.append(clip(first[0] if first else message, 200))


class OpenVinoStep(AotStep):
    def __init__(self, case: Case, workload: Workload) -> None:
        self.recorder = AotRecorder()
        #: per received graph: its label and the partitioned module OpenVINO runs (None: inductor compiled it)
        self.partitioned: list[tuple[str, torch.fx.GraphModule | None]] = []
        self.compile_fallbacks: list[Fallback] = []
        #: what OpenVINO's partition runs raised (it logs them at debug level only, then runs the torch graph)
        self.run_errors: list[str] = []
        backend = self.recorder.backend(self._compiler(False), self._compiler(True),
                                        decompositions=openvino_decompositions())
        super().__init__(case, workload, backend)

    def _compiler(self, is_backward: bool) -> CompileFn:
        def compile_one(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            made = self._compile(gm, example_inputs, f"{'backward' if is_backward else 'forward'} graph "
                                                     f"{len(self.partitioned)}")
            return self.recorder.dispatched(made, self.recorder.graphs[-1])

        return compile_one

    def _compile(self, gm: torch.fx.GraphModule, example_inputs: list[Any], label: str) -> Any:
        """``fx_openvino``'s ``aot_autograd`` branch (openvino 2026.4), its partitioned module kept."""
        from torch._inductor.compile_fx import compile_fx
        from torch._inductor.freezing import replace_params_with_constants

        execute = importlib.import_module(f"{DYNAMO}.execute")
        partition = importlib.import_module(f"{DYNAMO}.partition")
        try:
            context = torch._guards.TracingContext.try_get()
            assert context is not None and context.fw_metadata is not None and context.params_flat is not None
            kept = replace_params_with_constants(gm, context.params_flat, context.fw_metadata)
            module = partition.Partitioner(OPTIONS).make_partitions(gm, OPTIONS)
        except Exception as exc:
            self.partitioned.append((label, None))
            self.compile_fallbacks.append(Fallback(label, "inductor", (), f"{type(exc).__name__}: {exc}"))
            return compile_fx(gm, example_inputs)
        self.partitioned.append((label, module))

        def call(args: list[Any]) -> Any:
            return execute.execute(module, *[args[i] for i in kept], executor="openvino", options=OPTIONS)

        call._boxed_call = True  # type: ignore[attr-defined]  # as shipped: the list is read, never cleared
        return call

    def run(self) -> StepOutput:
        """One step, with what OpenVINO logs when a partition's run fails kept (its logger, for the call only)."""
        logger = logging.getLogger(f"{DYNAMO}.execute")
        errors = _Errors(self.run_errors)
        level = logger.level
        logger.addHandler(errors)
        logger.setLevel(logging.DEBUG)
        try:
            return super().run()
        finally:
            logger.removeHandler(errors)
            logger.setLevel(level)

    def fallbacks(self) -> list[Fallback]:
        execute = sys.modules.get(f"{DYNAMO}.execute")
        found = list(self.compile_fallbacks)
        for label, module in self.partitioned:
            if module is None:
                continue
            ops = _ran_in_torch(module)
            if ops:
                found.append(Fallback(label, "pytorch", tuple(ops), "not supported by OpenVINO's partitioner"))
            for name, child in module.named_children():
                if execute is not None and isinstance(child, execute.OpenVINOGraphModule) and child.perm_fallback:
                    why = f"OpenVINO's run raised: {self.run_errors[0]}" if self.run_errors else "OpenVINO's run raised"
                    found.append(Fallback(f"{label} {name}", "pytorch", tuple(_ran_in_torch(child.gm)), why))
        return found

    def notes(self) -> list[str]:
        n_fw = sum(not g.is_backward for g in self.recorder.graphs)
        n_bw = sum(g.is_backward for g in self.recorder.graphs)
        return [*super().notes(), f"route: torch.compile (openvino.torch, aot_autograd), {n_fw} forward / "
                                  f"{n_bw} backward graph(s) on OpenVINO's CPU plugin"]


class OpenVinoBackend(Backend):
    name = "openvino"
    # not openvino.torch itself: its import registers decompositions in torch's global table
    preload_modules = ("torch._dynamo", "openvino")
    capabilities = Capabilities(memory_domains=("torch-cpu", "native"), dynamic_shapes=True)
    cost_weight = 3.0

    def unavailable_reason(self) -> str | None:
        try:
            found = find_spec(DYNAMO)
        except ImportError as exc:  # openvino itself missing (or set to None)
            found, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = f"{DYNAMO} not found"
        if found is None:
            return f"OpenVINO not usable: {why} (pip install 'torch-conformance[openvino]')"
        return None

    def versions(self) -> dict[str, str]:
        found = {"torch": str(torch.__version__)}
        try:
            found["openvino"] = metadata.version("openvino")
        except metadata.PackageNotFoundError:
            found["openvino"] = "missing"
        return found

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return OpenVinoStep(case, workload)
