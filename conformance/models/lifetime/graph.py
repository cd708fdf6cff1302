"""The graph walk: runs an ATen FX graph node by node the way the reference executor does,
dispatching each concern to its pass (the call's convention, aliasing, loops, liveness)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conformance.models.lifetime.aliasing import Aliases, flatten
from conformance.models.lifetime.liveness import ModelBuilder, release_schedule
from conformance.models.lifetime.loops import is_while_loop, unroll_while_loop
from conformance.models.lifetime.model import ModelError, Storage, op_name
from conformance.models.lifetime.sizes import storage_nbytes
from conformance.models.lifetime.staging import IDEAL, Call, CallingConvention
from conformance.models.transients import kernel_storage_slack, kernel_transient_bounds, kernel_transient_bytes


@dataclass(frozen=True)
class GraphWalker:
    """Models graph calls on ``builder``.  With ``kernel_transients`` an op's event also counts what
    its eager kernel allocates inside the op (:func:`kernel_transient_bytes`): the graph runs op by op."""

    builder: ModelBuilder
    kernel_transients: bool = False
    #: a kernel whose workspace depends on the CPU counts its upper bound (``False``: its lower)
    high: bool = True

    def run_graph(self, gm: torch.fx.GraphModule, inputs: Sequence[Any], prefix: str,
                  convention: CallingConvention = IDEAL) -> list[Any]:
        """Model one call of ``gm``; ``inputs`` are model values the caller holds.  Returns the model
        values of its results, one reference each held for the caller."""
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs):
            raise ModelError(f"{prefix}: {len(placeholders)} placeholders, {len(inputs)} inputs")
        position = {n: i for i, n in enumerate(placeholders)}
        builder = self.builder
        call = Call(builder, convention, gm, prefix)
        aliases = Aliases()
        schedule = release_schedule(gm.graph)
        env: dict[torch.fx.Node, Any] = {}
        outputs: list[Any] = []
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = call.take_input(node, inputs[position[node]])
                aliases.bind(node.meta.get("val"), env[node])
                continue
            if node.op == "get_attr":  # a constant (a tensor the module holds outside its state): held by
                val = node.meta.get("val")  # the graph, not made by the step; its views are its own storage
                env[node] = builder.caller_input(val, node.name) if isinstance(val, torch.Tensor) else None
                builder.acquire(env[node])
                aliases.bind(val, env[node])
                continue
            call.start()  # the first node past the inputs: the call's work begins
            if node.op == "output":
                result: Any = torch.fx.node.map_arg(node.args[0], lambda n: call.returned(n, env[n]))
                outputs = list(result) if isinstance(result, (list, tuple)) else [result]
                builder.acquire(outputs)
                break
            label = f"{prefix}{node.name}"
            if is_while_loop(node):
                env[node] = unroll_while_loop(node, env, label, builder, self.run_graph)
                aliases.bind(node.meta.get("val"), env[node], replace=False)
            elif node.target is operator.getitem:
                container = env[node.args[0]]
                env[node] = container[node.args[1]] if container is not None else None
                builder.acquire(env[node])
            else:
                base = env.get(node.args[0]) if node.args and isinstance(node.args[0], torch.fx.Node) else None
                if _is_view(node) and isinstance(base, Storage):  # a view lives in its base's storage, also where
                    leaves = flatten(node.meta.get("val"))  # a pass remade the base's fake value after the view's
                    aliases.bind(leaves, [base] * len(leaves), replace=False)
                env[node] = self._run_op(node, label, call, aliases)
            for dead in schedule[node]:
                if dead in env:
                    builder.release(env.pop(dead))
        for value in env.values():
            builder.release(value)
        call.end()
        return outputs

    def _run_op(self, node: torch.fx.Node, label: str, call: Call, aliases: Aliases) -> Any:
        """One op's event.  Each leaf of its result is an earlier storage where it aliases one, else
        the buffer the call allocated for it at its start, else a new storage."""

        def allocate(t: torch.Tensor) -> Storage:
            # a kernel that allocates a result larger than its shape (then resizes it down) does so
            # wherever the op runs on it: a compiler's fallback included, so a bound counts it too
            nbytes = storage_nbytes(t, self.builder.symbols) + kernel_storage_slack(node, t)
            return call.take_result(node) or self.builder.new_storage(nbytes, label, op_name(node), t, "intermediate")

        value = aliases.resolve(node.meta.get("val"), allocate)
        self.builder.acquire(value)
        transient = 0
        if self.kernel_transients:
            transient = kernel_transient_bytes(node) if self.high else kernel_transient_bounds(node).low
        self.builder.event(label, transient)
        return value


def _is_view(node: torch.fx.Node) -> bool:
    """An ATen view op (its schema says its result aliases its first argument): ``view``, ``permute``, ``expand``..."""
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
