"""How fast the harness is, as the ratios issue 14 sets goals for, all measured in one run.

    python benchmarks/harness_speed.py [--backend inductor] [--case ID]... [--matrix] [--json FILE]

1. **Harness vs a bare script** on the same cases (by default the 9 ``mlp-*``, ``customop-*``
   and ``loop-rnn-t3`` cases on inductor), cold caches (a fresh ``TORCHINDUCTOR_CACHE_DIR`` and
   a fresh IREE module cache) and then warm (the same directories again).  The bare script is
   what a user would write instead: build each case, ``torch.compile`` it, one step, one eager
   step, ``assert_close`` on the results (gradients included).  The harness is
   ``conformance run --no-report --no-history`` (float64 reference, models, probes, isolation).
   Goal: <= 1.2x.
2. **The lifetime model vs torch's FX memory estimator** on fake-traced chains up to 50,000
   nodes (``benchmarks/lifetime_scaling.py``).  Goal: <= 1x.
3. **Probe overhead**: a probed steady-state step against an unprobed one, median of
   ``--repeat``, on the MLP cases and, where transformers is installed, the zoo's transformer
   models; once with the native allocator observer (the default) and once with the profiler.
   The ratio is the recording window's (what the probed step pays); ``with_trace_ratio`` adds
   building the trace from it (what the run pays per probed call).  Goal: <= 1.1x.
4. With ``--matrix``: the default matrix, warm, ``conformance run -n 2`` (about 4 minutes on
   2 cores).  Goal: <= 300 s.

Each figure runs in its own process, so nothing one measures warms another.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_CASES = ["mlp-*", "customop-*", "loop-rnn-t3"]


def bare(case_globs: list[str]) -> None:
    """The script a user would write instead of the harness (run in its own process)."""
    import torch

    from conformance.api.case import select_cases

    for case in select_cases(case_globs):
        compiled_w, eager_w = case.build(), case.build()
        compiled = torch.compile(compiled_w.model)
        got = compiled(*compiled_w.inputs)
        want = eager_w.model(*eager_w.inputs)
        if case.trains:
            got.backward()
            want.backward()
            for (name, p), q in zip(compiled_w.model.named_parameters(), eager_w.model.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4, msg=name)
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
        torch._dynamo.reset()


def case_args(cases: list[str]) -> list[str]:
    return [arg for c in cases for arg in ("--case", c)]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}")
    return wall


def harness_vs_bare(backend: str, cases: list[str], root: Path) -> list[dict[str, Any]]:
    rows = []
    caches = {"bare": root / "cache-bare", "harness": root / "cache-harness"}
    for temperature in ("cold", "warm"):
        figures: dict[str, float] = {}
        for who, cache in caches.items():
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
                   "CONFORMANCE_IREE_CACHE": str(cache / "iree")}
            if who == "bare":
                cmd = [sys.executable, str(Path(__file__).resolve()), "--bare", *case_args(cases)]
            else:
                out = root / f"results-{temperature}"
                cmd = [sys.executable, "-m", "conformance", "run", "--backend", backend, "--no-report",
                       "--no-history", "--overwrite", "--out", str(out), *case_args(cases)]
            figures[who] = timed(cmd, env)
        rows.append({"figure": f"harness / bare script ({backend}, {temperature} caches)",
                     "harness_s": figures["harness"], "bare_s": figures["bare"],
                     "ratio": figures["harness"] / figures["bare"], "goal": 1.2})
    return rows


def lifetime(nodes: list[int]) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    from lifetime_scaling import chain, ours, torch_estimate

    rows = []
    for n in nodes:
        gm = chain(n)
        t_ours, _ = ours(gm)
        t_torch, _ = torch_estimate(gm)
        rows.append({"figure": f"lifetime model / torch FX estimator ({len(gm.graph.nodes)} nodes)",
                     "ours_s": t_ours, "torch_s": t_torch, "ratio": t_ours / t_torch, "goal": 1.0})
    return rows


def probe_overhead(backend_name: str, case_globs: list[str], repeat: int) -> list[dict[str, Any]]:
    """Median steady-state step, unprobed and probed by each recorder: the window alone (what the step
    pays for being recorded), and the window plus building its trace (what a run pays per probed call)."""
    from conformance.api.adapter import discover
    from conformance.api.case import select_cases
    from conformance.api.step import clear_grads
    from conformance.probes.cpu import CpuAllocatorProbe
    from conformance.probes.observer import use_observer

    backend = discover().get(backend_name)
    recorders = ["observer", "profiler"] if use_observer() else ["profiler"]
    rows = []
    for case in select_cases(case_globs):
        workload = case.build()
        step = backend.compile(case, workload)
        for _ in range(3):
            clear_grads(workload.model)
            step.run()
        times: dict[str, list[float]] = {"unprobed": []}
        for how in recorders:
            times[how] = []
            times[f"{how} window"] = []
        for _ in range(repeat):
            clear_grads(workload.model)
            t = time.perf_counter()
            out = step.run()
            del out
            times["unprobed"].append(time.perf_counter() - t)
            for how in recorders:
                clear_grads(workload.model)
                t = time.perf_counter()
                with CpuAllocatorProbe(how) as probe:
                    out = step.run()
                    del out
                t_window = time.perf_counter()
                probe.trace  # noqa: B018 (building the trace is part of what a run pays)
                times[f"{how} window"].append(t_window - t)
                times[how].append(time.perf_counter() - t)
        ms = {how: statistics.median(ts) * 1e3 for how, ts in times.items()}
        for how in recorders:
            rows.append({"figure": f"probed / unprobed step ({backend_name}, {case.id}, {how})",
                         "unprobed_ms": ms["unprobed"], "window_ms": ms[f"{how} window"],
                         "with_trace_ms": ms[how], "ratio": ms[f"{how} window"] / ms["unprobed"],
                         "with_trace_ratio": ms[how] / ms["unprobed"], "goal": 1.1})
    return rows


def probe_rows(repeat: int) -> list[dict[str, Any]]:
    """In a child process per backend: the probe's cost must not include another backend's warm-up."""
    rows = []
    cases = ["mlp-m-train", "mlp-l-infer", "mlp-l-train"]
    try:
        import transformers  # noqa: F401

        cases += ["zoo-bert-train", "zoo-gpt2-infer", "zoo-llama-train"]
    except ImportError:
        pass
    for backend in ("eager", "inductor"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--probe-only", backend, "--repeat", str(repeat),
               *case_args(cases)]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
        rows += json.loads(proc.stdout.strip().splitlines()[-1])
    return rows


def matrix(root: Path) -> list[dict[str, Any]]:
    out = root / "matrix"
    cmd = [sys.executable, "-m", "conformance", "run", "-n", "2", "--overwrite", "--no-history", "--out", str(out)]
    timed(cmd, dict(os.environ))  # warm the caches
    wall = timed(cmd, dict(os.environ))
    return [{"figure": "default matrix, warm, -n 2 (s)", "wall_s": wall, "ratio": wall / 300, "goal": 1.0}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--case", action="append", default=None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--matrix", action="store_true", help="also time the default matrix (about 4 minutes)")
    parser.add_argument("--skip", action="append", default=[], choices=["harness", "lifetime", "probe"])
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe-only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cases = args.case or DEFAULT_CASES
    if args.bare:
        bare(cases)
        return 0
    if args.probe_only:
        print(json.dumps(probe_overhead(args.probe_only, cases, args.repeat)))
        return 0
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="conformance-speed-") as tmp:
        if "harness" not in args.skip:
            rows += harness_vs_bare(args.backend, cases, Path(tmp))
        if "lifetime" not in args.skip:
            rows += lifetime(args.nodes)
        if "probe" not in args.skip:
            rows += probe_rows(args.repeat)
        if args.matrix:
            rows += matrix(Path(tmp))
    print("| figure | figures | ratio | goal |")
    print("|---|---|---|---|")
    for row in rows:
        figures = ", ".join(f"{k} {v:.3f}" for k, v in row.items() if k not in ("figure", "ratio", "goal"))
        mark = "ok" if row["ratio"] <= row["goal"] else "over"
        print(f"| {row['figure']} | {figures} | {row['ratio']:.2f}x | <= {row['goal']}x ({mark}) |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
