"""Probe overhead: a steady-state step with the CPU allocator probe vs without.

    python benchmarks/probe_overhead.py [--backend eager|inductor] [--case ID] [--repeat N]

Prints the median step time both ways and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

from conformance.api.adapter import discover
from conformance.api.case import select_cases
from conformance.api.step import clear_grads
from conformance.probes.cpu import CpuAllocatorProbe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", default=None)
    parser.add_argument("--case", action="append", default=None)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    registry = discover()
    for backend_name in args.backend or ["eager", "inductor"]:
        backend = registry.get(backend_name)
        for case in select_cases(args.case or ["mlp-m-train", "mlp-l-infer"]):
            workload = case.build()
            step = backend.compile(case, workload)
            for _ in range(3):
                clear_grads(workload.model)
                step.run()
            plain, probed = [], []
            for _ in range(args.repeat):
                clear_grads(workload.model)
                t = time.perf_counter()
                out = step.run()
                del out
                plain.append(time.perf_counter() - t)
                clear_grads(workload.model)
                t = time.perf_counter()
                with CpuAllocatorProbe():
                    out = step.run()
                    del out
                probed.append(time.perf_counter() - t)
            p, q = statistics.median(plain), statistics.median(probed)
            print(f"{backend.name:10s} {case.id:14s} unprobed {p * 1e3:8.2f} ms  probed {q * 1e3:8.2f} ms  "
                  f"ratio {q / p:5.1f}x  (median of {args.repeat})")


if __name__ == "__main__":
    main()
