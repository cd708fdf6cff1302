"""A run and its warm rerun side by side: what the result cache and the compilers' caches save (issue 59).

    python benchmarks/warm_rerun.py [--workers 2] [--cache DIR] [--keep DIR] [--json FILE] [RUN ARGS...]

Runs ``conformance run --workers N --profile-harness`` twice, one after the other on the same machine, into
two results directories, both with the cache folder ``DIR`` (``$XDG_CACHE_HOME``: inductor's FX graph cache,
IREE's modules and the result cache of references and lifetime models; a fresh one by default, so the first
run is cold).  For each run it prints the wall time, the CPU seconds of the whole process tree, and per pair
phase the wall and CPU seconds summed over the pairs; then the result cache's hits and misses per kind and
``conformance diff``'s count of changed verdicts between the two (the goal: 0).  Extra arguments go to both
runs (``--case mlp-*``, ``--backend inductor``); the default is the default matrix.  On a shared machine the
wall times are upper bounds: the CPU seconds say what each phase cost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conformance.util.phases import PAIR_PHASES, cpu_key, key
from conformance.util.result_cache import merge_counts


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(out: Path, cache: Path, workers: int, extra: list[str]) -> dict[str, Any]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    for name in ("TORCHINDUCTOR_CACHE_DIR", "CONFORMANCE_IREE_CACHE", "CONFORMANCE_RESULT_CACHE"):
        env.pop(name, None)  # every cache under the one folder
    cmd = [sys.executable, "-m", "conformance", "run", "--workers", str(workers), "--profile-harness",
           "--out", str(out), *extra]
    load, cpu0, t0 = os.getloadavg()[0], _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    lines = (out / "results.jsonl").read_text().splitlines() if (out / "results.jsonl").is_file() else []
    results = [json.loads(line) for line in lines]
    return {
        "wall_s": wall, "cpu_s": cpu, "rc": proc.returncode, "pairs": len(results),
        "load_before": load, "load_after": os.getloadavg()[0],
        "phases_s": {n: sum(r["timing"].get(key(n), 0.0) for r in results) for n in PAIR_PHASES},
        "phases_cpu_s": {n: sum(r["timing"].get(cpu_key(n), 0.0) for r in results) for n in PAIR_PHASES},
        "cache": merge_counts(r.get("cache") or {} for r in results),
        "profile": proc.stderr[proc.stderr.find("where the time went"):] if "where the time went" in proc.stderr
        else proc.stderr[-3000:],
    }


def changed(first: Path, second: Path) -> str:
    """``conformance diff``'s summary line between the two runs."""
    proc = subprocess.run([sys.executable, "-m", "conformance", "diff", str(first), str(second)],
                          capture_output=True, text=True)
    return next((line for line in proc.stdout.splitlines() if "changed" in line), proc.stdout.strip()[-300:])


def show(label: str, f: dict[str, Any]) -> None:
    print(f"\n== {label}: {f['wall_s']:.1f}s wall, {f['cpu_s']:.1f} CPU-s, {f['pairs']} pairs, rc {f['rc']}; "
          f"load average {f['load_before']:.1f} -> {f['load_after']:.1f}")
    print(f"   {'phase':<10} {'wall s':>8} {'CPU s':>8}")
    for name in PAIR_PHASES:
        print(f"   {name:<10} {f['phases_s'][name]:8.1f} {f['phases_cpu_s'][name]:8.1f}")
    print(f"   {'pairs':<10} {sum(f['phases_s'].values()):8.1f} {sum(f['phases_cpu_s'].values()):8.1f}")
    for kind, outcomes in f["cache"].items():
        print(f"   result cache {kind}: " + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", type=Path, help="the cache folder both runs share (default: a fresh one)")
    parser.add_argument("--keep", type=Path, help="keep both runs' results directories here")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args, extra = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="warm-rerun-") as tmp:
        root = args.keep or Path(tmp)
        cache = args.cache or Path(tmp) / "cache"
        figures: dict[str, Any] = {label: run(root / label, cache, args.workers, extra) for label in ("first", "warm")}
        for label in ("first", "warm"):
            show(label, figures[label])
        figures["diff"] = changed(root / "first", root / "warm")
        print(f"\n== conformance diff first warm: {figures['diff']}")
        print("\n" + figures["warm"]["profile"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
