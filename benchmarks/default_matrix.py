"""The default matrix's wall time, cold then warm, and where its time goes (issue 35's goal: under 60 s warm).

    python benchmarks/default_matrix.py [--workers 2] [--json FILE] [--keep DIR]

Runs ``conformance run --workers N --no-report --no-history --profile-harness`` (the default backends and
the default cases) twice: with fresh compiler caches (a new ``TORCHINDUCTOR_CACHE_DIR`` and IREE module
cache: cold), then again on the same caches (warm).  For each it prints the wall time, the pair phases
summed over the pairs (``--profile-harness``'s split: seconds and share of pair-seconds), and how many
pairs made their case's references and how many loaded them from the run's shared references
(:mod:`conformance.checks.references`).  The machine's load average is printed beside each run:
on a shared machine, compare runs made under the same load only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conformance.util.phases import PAIR_PHASES, key


def run_matrix(out: Path, caches: Path, workers: int) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
           "CONFORMANCE_IREE_CACHE": str(caches / "iree")}
    cmd = [sys.executable, "-m", "conformance", "run", "--workers", str(workers), "--no-report", "--no-history",
           "--profile-harness", "--out", str(out)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] \
        if (out / "results.jsonl").is_file() else []
    phases = {name: sum(r["timing"].get(key(name), 0.0) for r in results) for name in PAIR_PHASES}
    checked = [r for r in results if key("parity") in r["timing"]]
    made = sum(1 for r in checked if key("reference") in r["timing"])
    statuses = sorted({r["status"] for r in results})
    return {"wall_s": wall, "rc": proc.returncode, "pairs": len(results),
            "statuses": {s: sum(1 for r in results if r["status"] == s) for s in statuses},
            "phases_s": phases, "pair_s": sum(phases.values()), "references_made": made,
            "references_loaded": len(checked) - made, "load_before": load, "load_after": os.getloadavg()[0],
            "profile": proc.stderr[proc.stderr.find("where the time went"):] if "where the time went" in proc.stderr
            else proc.stderr[-3000:]}


def show(label: str, figures: dict[str, Any]) -> None:
    print(f"\n== {label}: {figures['wall_s']:.1f}s wall, {figures['pairs']} pairs {figures['statuses']}, rc "
          f"{figures['rc']}; load average {figures['load_before']:.1f} -> {figures['load_after']:.1f}")
    print(f"   references: made by {figures['references_made']} pairs, loaded by {figures['references_loaded']}")
    total = figures["pair_s"] or 1.0
    for name, seconds in figures["phases_s"].items():
        print(f"   {name:<10} {seconds:8.1f}s {100 * seconds / total:4.0f}%")
    print(f"   {'pairs':<10} {figures['pair_s']:8.1f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--keep", type=Path, help="keep both runs' results directories here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="default-matrix-") as tmp:
        root = args.keep or Path(tmp)
        caches = Path(tmp) / "caches"
        figures = {}
        for label in ("cold", "warm"):
            figures[label] = run_matrix(root / label, caches, args.workers)
            show(label, figures[label])
        print("\n" + figures["warm"]["profile"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
