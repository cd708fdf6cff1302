"""Native domain overhead: a steady-state step without the preloaded observer, with it (no window open), and
inside a native window.

    python benchmarks/native_domain_overhead.py [--backend NAME ...] [--case ID ...] [--repeat N]

The observer is preloaded into a process at its start (``LD_PRELOAD``), so each configuration runs in a
child interpreter of its own: one without the preload, one with it.  Prints the fastest step's CPU time
(the process's, one torch thread: on a shared machine, wall time measures the neighbours) of each and
the ratios: what every allocation of a worker pays for the interposition, and what a probed step pays
for its window.  Backends are any registered name or ``module:Class``
(``tests.planted_native_backends:NumpyRuntimeBackend`` allocates its results in numpy memory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(backend_name: str, case_id: str, repeat: int, window: bool) -> dict[str, float]:
    """Least CPU seconds per step (and per step inside a native window, where ``window``), in this process."""
    import torch

    from conformance.api.adapter import discover
    from conformance.api.case import select_cases
    from conformance.api.step import clear_grads
    from conformance.probes import native_heap

    torch.set_num_threads(1)
    registry = discover()
    backend = registry.get(backend_name)
    (case,) = select_cases([case_id])
    workload = case.build()
    step = backend.compile(case, workload)
    for _ in range(3):
        clear_grads(workload.model)
        del_out = step.run()
        del del_out
    plain, probed, native_peak = [], [], 0
    for _ in range(repeat):
        clear_grads(workload.model)
        t = time.process_time()
        out = step.run()
        del out
        plain.append(time.process_time() - t)
        if window:
            clear_grads(workload.model)
            t = time.process_time()
            with native_heap.NativeHeapProbe() as probe:
                out = step.run()
                del out
            probed.append(time.process_time() - t)
            native_peak = max(native_peak, probe.trace.peak_bytes)
    figures = {"plain": min(plain), "plain_median": statistics.median(plain)}
    if window:
        figures.update(probed=min(probed), native_peak=native_peak)
    return figures


def child(args: argparse.Namespace, preload: bool) -> dict[str, float]:
    from conformance.probes import native_heap

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    env.pop("LD_PRELOAD", None)
    if preload:
        env = native_heap.worker_environment(env)
    code = ("import json, sys; sys.argv = sys.argv[:1]; from benchmarks.native_domain_overhead import measure; "
            "from conformance.probes import native_heap; native_heap.start_tracking(); "
            f"print(json.dumps(measure({args.backend_name!r}, {args.case_id!r}, {args.repeat}, {preload})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", default=None)
    parser.add_argument("--case", action="append", default=None)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    for backend_name in args.backend or ["eager", "tests.planted_native_backends:NumpyRuntimeBackend"]:
        for case_id in args.case or ["mlp-m-train", "mlp-l-infer"]:
            args.backend_name, args.case_id = backend_name, case_id
            bare = child(args, preload=False)
            loaded = child(args, preload=True)
            p, q, w = bare["plain"], loaded["plain"], loaded["probed"]
            print(f"{backend_name.rpartition(':')[2]:22s} {case_id:12s} no preload {p * 1e3:7.3f} ms  "
                  f"preloaded {q * 1e3:7.3f} ms ({q / p:4.2f}x)  in a native window {w * 1e3:7.3f} ms "
                  f"({w / p:4.2f}x)  native peak {int(loaded['native_peak'])} B  (least CPU time of {args.repeat})")


if __name__ == "__main__":
    main()
