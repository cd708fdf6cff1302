"""``eager``: the case's ATen graph run op by op with the reference lifetime discipline.

This is the memory-exact baseline: its measured peak and residual must equal
the lifetime model's, byte for byte, on every case.  A step whose graph depends on its
values (:func:`conformance.api.step.depends_on_data`) is traced again before every call, on
that call's inputs and state, outside the probes' window (:meth:`EagerStep.prepare_call`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.utils._pytree as pytree

from conformance.api.adapter import Backend, Capabilities, CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import STEP_TRACES, StepOutput, depends_on_data, params_of, trace_step
from conformance.models.interpreter import GraphExecutor, NodeHook


class EagerStep(CompiledStep):
    def __init__(self, case: Case, workload: Workload, node_hook: NodeHook | None) -> None:
        self.trains = case.trains
        self.workload = workload
        self.gm, _, self.param_names = STEP_TRACES.trace(case, workload)  # the user-level model's graph
        #: the graph is one call's (traced on its values): each call is traced on its own
        self.per_call = depends_on_data(self.gm)
        #: the graph the next call runs, where it was traced for that call (the first call's: now)
        self.prepared: torch.fx.GraphModule | None = self.gm if self.per_call else None
        #: one graph per input shapes (a case whose shapes change is traced again at each new one)
        self.graphs = {_shapes(workload.inputs): self.gm}
        if case.shapes is not None and not self.per_call:  # traced now, as any compiler does: tracing a
            for call in range(1, len(case.shapes.sizes)):   # while_loop runs Dynamo
                self._trace(case.inputs_for(call))
        self.state = {**dict(workload.model.named_parameters()), **dict(workload.model.named_buffers())}
        self.trainable = list(params_of(workload.model)) if case.trains else []
        self.node_hook = node_hook

    def prepare_call(self) -> None:
        if self.per_call:
            self.prepared = trace_step(self.workload, self.trains)[0]

    def run(self) -> StepOutput:
        if self.per_call:  # unprepared (a caller that does not call prepare_call): traced here
            gm, self.prepared = self.prepared or trace_step(self.workload, self.trains)[0], None
        else:
            gm = self.graphs[self._trace(self.workload.inputs)]
        executor = GraphExecutor(node_hook=self.node_hook)
        args: list[Any] = [self.state[n].detach() for n in self.param_names]
        args.extend(pytree.tree_leaves(tuple(self.workload.inputs)))
        with torch.no_grad():
            outs = executor.run(gm, args)
        del args, gm
        if not self.trains:
            return StepOutput(outs)
        loss, grads = outs[0], outs[1:]
        del outs
        for name, g in zip(self.trainable, grads):
            self.state[name].grad = g
        return StepOutput([loss], dict(zip(self.trainable, grads)))

    def _trace(self, inputs: tuple[Any, ...]) -> tuple[tuple[int, ...], ...]:
        """The graph for ``inputs``' shapes, traced the first time they come."""
        key = _shapes(inputs)
        if key not in self.graphs:
            self.graphs[key] = trace_step(Workload(self.workload.model, inputs), self.trains)[0]
        return key


def _shapes(inputs: tuple[Any, ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(t.shape) for t in pytree.tree_leaves(tuple(inputs)) if isinstance(t, torch.Tensor))


class EagerBackend(Backend):
    name = "eager"
    capabilities = Capabilities(exact_memory=True, dynamic_shapes=True, dtypes=("float32", "float64"))
    node_hook: ClassVar[NodeHook | None] = None

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return EagerStep(case, workload, type(self).node_hook)
