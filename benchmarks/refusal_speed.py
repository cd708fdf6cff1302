"""How long `conformance run` takes to refuse bad input: each refusal timed through the real command.

    python benchmarks/refusal_speed.py [--repeat N] [--json PATH] [--cold]

The goal is under 2 s each on a 2-core machine: the options, the folder and the names are checked
before torch is imported and before the isolation worker starts.  The names (backends, case ids) come
from the catalog the last full load recorded, so the benchmark first runs `conformance list cases` once
in its own cache home and reports that full load's time too; ``--cold`` also times each refusal with no
catalog at all (then the backend and case refusals wait for the full load, as they did before).

Prints, per refusal, the median wall time and the median CPU time (user + system) of the command over
``--repeat`` runs: on a machine other processes load, wall time grows with the load and CPU time does not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 2.0
#: refusal -> (arguments, a part of the one line it prints)
REFUSALS: dict[str, tuple[list[str], str]] = {
    "unknown option": (["run", "--bakend", "eager", "--out", "fresh"], "unknown option"),
    "bad option value": (["run", "--steps", "0", "--out", "fresh"], "--steps must be"),
    "unknown backend": (["run", "--backend", "eagr", "--out", "fresh"], "unknown backend 'eagr'"),
    "unknown case glob": (["run", "--case", "mlp-*-infr", "--out", "fresh"], "unknown case 'mlp-*-infr'"),
    "unknown case id": (["run", "--case", "mlp-s-infr", "--out", "fresh"], "unknown case 'mlp-s-infr'"),
    "unknown case of --cases": (["run", "--cases", "my_cases.py", "--case", "mine-linear-infr", "--out", "fresh"],
                                "unknown case 'mine-linear-infr'"),
    "missing --cases file": (["run", "--cases", "nosuch.py", "--out", "fresh"], "no such file"),
    "used --out": (["run", "--backend", "eager", "--case", "mlp-s-infer"], "already holds results"),
}
CASES_FILE = '''
import torch
from torch import nn

from conformance.case import Case, Workload, register


def build(seed: int) -> Workload:
    return Workload(nn.Linear(4, 2), (torch.randn(3, 4),))


register(Case("mine-linear-infer", "inference", "mine", seed=0, builder=build))
'''


def _command() -> list[str]:
    """The installed `conformance` script beside this interpreter, else the same launcher through ``-m``."""
    script = Path(sys.executable).parent / "conformance"
    return [str(script)] if script.exists() else [sys.executable, "-m", "conformance"]


def _timed(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([*_command(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def _measure(ws: Path, env: dict[str, str], repeat: int, cold: bool = False) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    for name, (args, expected) in REFUSALS.items():
        walls, cpus = [], []
        for _ in range(repeat):
            if cold:  # each run with no catalog: a full load records one, which the next run would read
                shutil.rmtree(env["XDG_CACHE_HOME"], ignore_errors=True)
            wall, cpu, proc = _timed(args, ws, env)
            if proc.returncode != 2 or expected not in proc.stderr:
                raise SystemExit(f"{name}: expected a refusal saying {expected!r}, got {proc.returncode}: "
                                 f"{proc.stderr[-500:]}")
            walls.append(wall)
            cpus.append(cpu)
        figures[name] = {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}
    return figures


def _table(title: str, figures: dict[str, dict[str, float]]) -> None:
    print(f"\n{title}")
    print(f"{'refusal':26s} {'wall s':>8s} {'cpu s':>8s}")
    for name, f in figures.items():
        mark = "" if f["wall_s"] < GOAL_S else f"  (over {GOAL_S:g} s)"
        print(f"{name:26s} {f['wall_s']:8.2f} {f['cpu_s']:8.2f}{mark}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per refusal (the median is reported)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--cold", action="store_true", help="also time each refusal with no catalog recorded")
    args = parser.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="refusal-speed-"))
    try:
        (ws / "my_cases.py").write_text(CASES_FILE)
        used = ws / "conformance-results"
        used.mkdir()
        (used / "results.jsonl").write_text("{}\n")
        env = {**os.environ, "XDG_CACHE_HOME": str(ws / "cache")}
        print(f"command: {' '.join(_command())}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        report: dict[str, object] = {"load_average": os.getloadavg()[0], "cores": os.cpu_count()}
        if args.cold:
            cold = _measure(ws, env, 1, cold=True)
            _table("no catalog yet (the names wait for the full load)", cold)
            report["cold"] = cold
        shutil.rmtree(ws / "cache", ignore_errors=True)
        loads = {}
        for extra in ([], ["--cases", "my_cases.py"]):
            wall, cpu, proc = _timed(["list", "cases", *extra], ws, env)
            if proc.returncode != 0:
                raise SystemExit(f"conformance list cases failed: {proc.stderr[-1000:]}")
            loads[" ".join(["list", "cases", *extra])] = {"wall_s": wall, "cpu_s": cpu}
        _table("full loads (each records a catalog)", loads)
        warm = _measure(ws, env, args.repeat)
        _table(f"each refusal, catalog recorded (median of {args.repeat})", warm)
        report.update({"full_loads": loads, "refusals": warm})
        if args.json is not None:
            args.json.write_text(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(ws, ignore_errors=True)


if __name__ == "__main__":
    main()
