"""The lifetime models' cost against graph size, beside torch's own FX memory estimator.

    python benchmarks/lifetime_scaling.py [--nodes 1000 10000 100000] [--shape chain training] [--kind ...]

Two graph shapes, each about ``--nodes`` nodes:

* ``chain``: a fake-traced chain of ``matmul -> relu -> add`` blocks, one weight input per block
  (placeholders grow with the graph, as parameters do in a real model);
* ``training``: a training step shaped like a transformer's: per block a matmul whose result is
  viewed into heads and transposed (views: aliases of one storage), a softmax, the heads merged
  back, a residual add (the residual stream has many users), all blocks' weights' gradients by
  ``torch.autograd.grad`` (the backward: saved activations, ``t()`` views, gradient sums).

Three model kinds, each the one the harness builds for a pair (:mod:`conformance.run.engine`):

* ``user``: :func:`~conformance.models.lifetime.model_graph` on the whole step's graph (the user-level
  model, eager kernels' transients included);
* ``received``: :func:`~conformance.models.lifetime.model_forward_backward` on the forward and backward
  AOTAutograd partitions of the same step (the received-graph model);
* ``program``: the same, through :class:`~conformance.models.program.WrapperProgram` models of Python
  wrappers in inductor's dialect written from those graphs, one statement per node (buffers from
  ``empty_strided_cpu``, ``extern_kernels.mm``, C++ kernels, ``reinterpret_tensor`` views, ``del`` after
  each buffer's last use): the generated-program model, at sizes no real compile reaches here.

Prints, per shape, kind and size, the CPU seconds of the model, the CPU seconds
``torch._inductor.fx_passes.memory_estimator.build_memory_profile`` takes on the same graphs (the
joint graph; the forward and backward for the other two) and their ratio; then the microseconds
per node, whose flatness is the linear growth issue 59 asks for.  CPU seconds, not wall time: the
figures hold on a loaded machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conformance.models.lifetime import model_forward_backward, model_graph
from conformance.models.program import WrapperProgram

WIDTH, HEADS, BATCH = 8, 2, 4
#: nodes per block of each shape, forward and backward together (measured: keeps --nodes honest)
BLOCK_NODES = {"chain": 4, "training": 26}


def chain_step(blocks: int) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    def f(x: torch.Tensor, *ws: torch.Tensor) -> torch.Tensor:
        for w in ws:
            x = torch.relu(x @ w) + x
        return x

    return f, [torch.randn(WIDTH, WIDTH)] + [torch.randn(WIDTH, WIDTH) for _ in range(blocks)]


def training_forward(x: torch.Tensor, *ws: torch.Tensor) -> torch.Tensor:
    """Transformer-like blocks on a residual stream: head views, softmax, merged heads, residual add."""
    h = x
    for w in ws:
        heads = (h @ w).view(BATCH, HEADS, WIDTH // HEADS).transpose(0, 1)
        merged = torch.softmax(heads, -1).transpose(0, 1).reshape(BATCH, WIDTH)
        h = torch.relu(merged) + h
    return h.sum()


def training_step(blocks: int) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    def step(x: torch.Tensor, *ws: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loss = training_forward(x, *ws)
        return (loss, *torch.autograd.grad(loss, ws))

    return step, [torch.randn(BATCH, WIDTH)] + [torch.randn(WIDTH, WIDTH, requires_grad=True) for _ in range(blocks)]


def joint_graph(shape: str, nodes: int) -> torch.fx.GraphModule:
    """The whole step as one fake-traced ATen graph (what the user-level model walks)."""
    blocks = max(1, nodes // BLOCK_NODES[shape])
    fn, args = (chain_step if shape == "chain" else training_step)(blocks)
    return make_fx(fn, tracing_mode="fake")(*args)


def partitioned(shape: str, nodes: int) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule | None]:
    """The step's forward and backward as AOTAutograd hands them to a compiler (the received graphs)."""
    from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition

    blocks = max(1, nodes // BLOCK_NODES[shape])
    got: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, _: Any) -> Any:
        got.append(gm)
        return make_boxed_func(gm.forward)

    if shape == "chain":
        fn, args = chain_step(blocks)
        args = [args[0]] + [w.requires_grad_() for w in args[1:]]
        forward: Callable[..., Any] = lambda *a: fn(*a).sum()  # noqa: E731
    else:
        _, args = training_step(blocks)
        forward = training_forward
    compiled = aot_function(forward, fw_compiler=keep, bw_compiler=keep,
                            partition_fn=min_cut_rematerialization_partition)
    compiled(*args).backward()
    return got[0], got[1] if len(got) > 1 else None


# ------------------------------------------------------------------------------------------ wrappers

_PREAMBLE = """
import torch
from torch._inductor.select_algorithm import extern_kernels
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
async_compile = None
cpp_kernel = async_compile.cpp_pybinding(['float*'], r'''kernel''')
"""


def wrapper_of(gm: torch.fx.GraphModule) -> str:
    """A Python wrapper in inductor's dialect that runs ``gm`` one node per kernel: each result a buffer of its own
    (``extern_kernels.mm`` for a matmul, a C++ kernel otherwise), a view a ``reinterpret_tensor`` of its base, each
    name deleted after its last use, as inductor's wrapper does (without its fusion and reuse)."""
    nodes = list(gm.graph.nodes)
    last: dict[torch.fx.Node, int] = {}
    for i, node in enumerate(nodes):
        for used in node.all_input_nodes:
            last[used] = i
    names: dict[torch.fx.Node, str] = {}
    body = []
    placeholders = [n for n in nodes if n.op == "placeholder"]
    for i, n in enumerate(placeholders):
        names[n] = f"arg{i}_1"
    if placeholders:
        body.append(", ".join(names[n] for n in placeholders) + ", = args")
    body.append("args.clear()")
    returned: set[torch.fx.Node] = set()
    for i, node in enumerate(nodes):
        if node.op == "placeholder":
            continue
        if node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            returned.update(o for o in outs if isinstance(o, torch.fx.Node))
            body.append("return (" + "".join(f"{names[o]}, " if isinstance(o, torch.fx.Node) else "None, "
                                            for o in outs) + ")")
            break
        val = node.meta.get("val")
        name = names[node] = f"buf{i}"
        if not isinstance(val, torch.Tensor):
            body.append(f"{name} = None")
            continue
        size, stride = tuple(val.shape), tuple(val.stride())
        operands = [names[a] for a in node.all_input_nodes if a in names]
        base = node.all_input_nodes[0] if node.all_input_nodes else None
        if isinstance(node.target, torch._ops.OpOverload) and node.target.is_view and base in names:
            offset = val.storage_offset() - base.meta["val"].storage_offset()  # the wrapper's is the base's plus
            body.append(f"{name} = reinterpret_tensor({names[base]}, {size}, {stride}, {offset})")
        else:
            body.append(f"{name} = empty_strided_cpu({size}, {stride}, {val.dtype})")
            if node.target is torch.ops.aten.mm.default and len(operands) == 2:
                body.append(f"extern_kernels.mm({operands[0]}, {operands[1]}, out={name})")
            else:
                body.append(f"cpp_kernel({', '.join([*operands, name])})")
        dead = [names[a] for a in node.all_input_nodes if last.get(a) == i and a not in returned and a in names]
        if dead:
            body.append("del " + ", ".join(dead))
    return _PREAMBLE + "\n\ndef call(args):\n" + "".join(f"    {line}\n" for line in body)


# ------------------------------------------------------------------------------------------ timing


def cpu_seconds(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.process_time()
    value = fn()
    return time.process_time() - t0, value


def estimator_seconds(*graphs: torch.fx.GraphModule | None) -> float:
    """CPU seconds of torch's FX memory estimator over ``graphs``."""
    return sum(torch_estimate(gm)[0] for gm in graphs if gm is not None)


def torch_estimate(gm: torch.fx.GraphModule) -> tuple[float, int]:
    """(CPU seconds, peak) of ``build_memory_profile`` on ``gm`` (``benchmarks/harness_speed.py`` reads it)."""
    from torch._inductor.fx_passes.memory_estimator import build_memory_profile

    seconds, profile = cpu_seconds(lambda: build_memory_profile(gm.graph, lambda n: n.op != "placeholder"))
    return seconds, max(profile, default=0)


def chain(nodes: int) -> torch.fx.GraphModule:
    """The chain's whole-step graph (``benchmarks/harness_speed.py`` reads it)."""
    return joint_graph("chain", nodes)


def ours(gm: torch.fx.GraphModule) -> tuple[float, int]:
    """(CPU seconds, peak) of the user-level model of ``gm``."""
    seconds, model = cpu_seconds(lambda: model_graph(gm))
    return seconds, model.peak_bytes


def measure(shape: str, kind: str, nodes: int) -> tuple[int, float, float]:
    """(nodes modelled, the model's CPU seconds, the FX estimator's on the same graphs)."""
    if kind == "user":
        gm = joint_graph(shape, nodes)
        seconds, _ = ours(gm)
        return len(gm.graph.nodes), seconds, estimator_seconds(gm)
    fw, bw = partitioned(shape, nodes)
    size = len(fw.graph.nodes) + (len(bw.graph.nodes) if bw is not None else 0)
    programs: list[WrapperProgram | None] = []
    if kind == "program":
        programs = [WrapperProgram(wrapper_of(fw), "forward")]
        programs.append(WrapperProgram(wrapper_of(bw), "backward") if bw is not None else None)
    seconds, _ = cpu_seconds(lambda: model_forward_backward(fw, bw, programs=programs))
    return size, seconds, estimator_seconds(fw, bw)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--shape", nargs="+", choices=sorted(BLOCK_NODES), default=["training", "chain"])
    parser.add_argument("--kind", nargs="+", choices=["user", "received", "program"],
                        default=["user", "received", "program"])
    args = parser.parse_args()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))  # deep graphs: fx's own recursion
    print("| shape | model | nodes | model (CPU s) | torch FX estimator (CPU s) | ratio | model us/node |")
    print("|---|---|---|---|---|---|---|")
    for shape in args.shape:
        for kind in args.kind:
            for n in args.nodes:
                size, ours, theirs = measure(shape, kind, n)
                print(f"| {shape} | {kind} | {size} | {ours:.3f} | {theirs:.3f} | {ours / max(theirs, 1e-9):.2f}x "
                      f"| {1e6 * ours / size:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
