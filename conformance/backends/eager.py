"""``eager``: the case's ATen graph run op by op with the reference lifetime discipline.

This is the memory-exact baseline: its measured peak and residual must equal
the lifetime model's, byte for byte, on every case.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from conformance.api.adapter import Backend, Capabilities, CompiledStep
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput, params_of, trace_step
from conformance.models.interpreter import GraphExecutor, NodeHook


class EagerStep(CompiledStep):
    def __init__(self, case: Case, workload: Workload, node_hook: NodeHook | None) -> None:
        self.trains = case.trains
        self.workload = workload
        self.gm, _, self.param_names = trace_step(workload, case.trains)
        self.state = {**dict(workload.model.named_parameters()), **dict(workload.model.named_buffers())}
        self.trainable = list(params_of(workload.model)) if case.trains else []
        self.node_hook = node_hook

    def run(self) -> StepOutput:
        executor = GraphExecutor(node_hook=self.node_hook)
        args: list[Any] = [self.state[n].detach() for n in self.param_names]
        args.extend(self.workload.inputs)
        with torch.no_grad():
            outs = executor.run(self.gm, args)
        del args
        if not self.trains:
            return StepOutput(outs)
        loss, grads = outs[0], outs[1:]
        del outs
        for name, g in zip(self.trainable, grads):
            self.state[name].grad = g
        return StepOutput([loss], dict(zip(self.trainable, grads)))


class EagerBackend(Backend):
    name = "eager"
    capabilities = Capabilities(exact_memory=True)
    node_hook: ClassVar[NodeHook | None] = None

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return EagerStep(case, workload, type(self).node_hook)
