"""The lifetime model's cost against graph size, beside torch's own FX memory estimator.

    python benchmarks/lifetime_scaling.py [--nodes 1000 10000 50000]

Each graph is a fake-traced chain of ``matmul -> relu -> add`` blocks, one weight input per block
(so placeholders grow with the graph, as parameters do in a real model).  Prints, per size, the
seconds :func:`conformance.models.lifetime.model_graph` takes, the seconds
``torch._inductor.fx_passes.memory_estimator.build_memory_profile`` takes on the same graph,
their ratio, and both peaks (they model different things: ours counts storages and their
references, torch's counts node outputs, so the peaks need not agree).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conformance.models.lifetime import model_graph


def chain(nodes: int) -> torch.fx.GraphModule:
    """About ``nodes`` nodes: each block is a placeholder, mm, relu and add."""
    blocks = max(1, nodes // 4)

    def f(x: torch.Tensor, *ws: torch.Tensor) -> torch.Tensor:
        for w in ws:
            x = torch.relu(x @ w) + x
        return x

    args = [torch.randn(8, 8)] + [torch.randn(8, 8) for _ in range(blocks)]
    return make_fx(f, tracing_mode="fake")(*args)


def torch_estimate(gm: torch.fx.GraphModule) -> tuple[float, int]:
    from torch._inductor.fx_passes.memory_estimator import build_memory_profile

    t0 = time.perf_counter()
    profile = build_memory_profile(gm.graph, lambda n: n.op != "placeholder")
    return time.perf_counter() - t0, max(profile, default=0)


def ours(gm: torch.fx.GraphModule) -> tuple[float, int]:
    t0 = time.perf_counter()
    model = model_graph(gm)
    return time.perf_counter() - t0, model.peak_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    args = parser.parse_args()
    print("| nodes | lifetime model (s) | torch FX estimator (s) | ratio |")
    print("|---|---|---|---|")
    for n in args.nodes:
        gm = chain(n)
        size = len(gm.graph.nodes)
        t_ours, _ = ours(gm)
        t_torch, _ = torch_estimate(gm)
        print(f"| {size} | {t_ours:.3f} | {t_torch:.3f} | {t_ours / t_torch:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
