"""The reference executor: runs an ATen FX graph op by op, dropping values at their last use.

It follows exactly the discipline :mod:`conformance.models.lifetime` models, with real
tensors and Python reference counting doing the freeing, so what the memory probe
sees of it must equal the model.  Each node runs inside a profiler range named
``node:<label>`` so allocations can be traced back to the node that made them.
Ops run on the kernels the transient table models (:func:`conformance.models.transients.reference_kernels`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch.profiler import record_function

from conformance.models.lifetime import Observation, is_while_loop, loop_parts, release_schedule
from conformance.models.transients import reference_kernels

NODE_RANGE_PREFIX = "node:"

#: A hook a test or a planted-fault backend may install: called with
#: ``(label, value)`` after each node runs; it may keep the value (a leak).
NodeHook = Callable[[str, Any], None]


class GraphExecutor:
    """Runs ATen graphs with the reference lifetime discipline and records loop trip counts."""

    def __init__(self, label_ranges: bool = True, node_hook: NodeHook | None = None) -> None:
        self.label_ranges = label_ranges
        self.node_hook = node_hook
        self.observation = Observation()

    def run(self, gm: torch.fx.GraphModule, args: list[Any], donated: bool = False) -> list[Any]:
        """Run ``gm`` on ``args``.  With ``donated`` the list is cleared so inputs can die early."""
        with reference_kernels():
            return self._run_graph(gm, args, "", donated)

    def _run_graph(self, gm: torch.fx.GraphModule, args: list[Any], prefix: str, donated: bool) -> list[Any]:
        schedule = release_schedule(gm.graph)
        env: dict[torch.fx.Node, Any] = {}
        pending = list(reversed(args))  # popped one by one so no list keeps an input alive
        if donated:
            args.clear()
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = pending.pop()
                continue
            if node.op == "get_attr":
                env[node] = getattr(gm, node.target)  # type: ignore[arg-type]
                continue
            if node.op == "output":
                result = torch.fx.node.map_arg(node.args[0], lambda n: env[n])
                env.clear()
                return list(result) if isinstance(result, (list, tuple)) else [result]
            label = f"{prefix}{node.name}"
            if is_while_loop(node):
                env[node] = self._while_loop(gm, node, env, label)
            elif node.target is operator.getitem:
                env[node] = operator.getitem(env[node.args[0]], node.args[1])  # type: ignore[index]
            else:
                call_args, call_kwargs = torch.fx.node.map_arg(
                    (node.args, node.kwargs), lambda n: env[n]
                )
                if self.label_ranges:
                    with record_function(NODE_RANGE_PREFIX + label):
                        env[node] = node.target(*call_args, **call_kwargs)  # type: ignore[operator]
                else:
                    env[node] = node.target(*call_args, **call_kwargs)  # type: ignore[operator]
                del call_args, call_kwargs
            if self.node_hook is not None:
                self.node_hook(label, env[node])
            for dead in schedule[node]:
                env.pop(dead, None)
        raise RuntimeError(f"graph {prefix or 'root'} has no output node")

    def _while_loop(
        self, gm: torch.fx.GraphModule, node: torch.fx.Node, env: dict[torch.fx.Node, Any], label: str
    ) -> tuple[Any, ...]:
        """The loop the model unrolls: cond, then body replacing the carry, until cond is false."""
        loop = loop_parts(node, gm)
        cond_gm, body_gm, stacked = loop.cond, loop.body, loop.stacked
        carried: list[Any] = [env[n] if isinstance(n, torch.fx.Node) else n for n in loop.carried]
        additional = [env[n] if isinstance(n, torch.fx.Node) else n for n in loop.additional]
        history: list[list[Any]] = []
        trips = 0
        while True:
            (pred,) = self._run_graph(cond_gm, [*carried, *additional], f"{label}.cond{trips}:", False)
            go = bool(pred)
            del pred
            if not go:
                break
            new = self._run_graph(body_gm, [*carried, *additional], f"{label}.body{trips}:", False)
            if stacked:
                history.append(new)
            carried = new
            del new
            trips += 1
        self.observation.trip_counts.append(trips)
        if stacked:
            with record_function(f"{NODE_RANGE_PREFIX}{label}.stack"):
                result = tuple(
                    torch.stack([h[i] for h in history]) if history else carried[i].unsqueeze(0).clone()
                    for i in range(len(carried))
                )
            del history, carried
            return result
        if trips == 0:
            with record_function(f"{NODE_RANGE_PREFIX}{label}.clone"):
                return tuple(c.clone() if isinstance(c, torch.Tensor) else c for c in carried)
        return tuple(carried)
