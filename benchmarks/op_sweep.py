"""The op sweep's size and wall time: ``conformance run --case 'op-*'`` on eager + inductor, ``-n 2``.
(Not in CI: the whole sweep is about 10 minutes on 2 idle cores with inductor's cache warm, 37 with it empty.)

    python benchmarks/op_sweep.py [--backend eager --backend inductor] [-n 2] [--shard I/N]
                                  [--case 'op-*'] [--out DIR] [--json OUT] [--later-samples N]

Prints the family's size at this torch release (ops, samples, pairs per backend, what is left out),
then runs the selection through the real CLI (isolated workers, the backends' manifests) and prints
what it ran (ops, samples, pairs), the wall time, and the verdict counts per backend (the raw ones and
how many of them the manifests expect).  With ``--shard I/N`` it also prints the whole sweep's wall
time extrapolated as N times the shard's time after its start-up (the CLI's "before pytest"), plus
one start-up: shards are balanced by expected cost, so this is a rough figure, to choose a shard count
for a CI job limit (``examples/ci/nightly.yml``).  Exit 1 when a pair
failed unexpectedly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: an op case's id (``op-add-0-infer``; another dtype than float32 named: ``op-add-0-float64-infer``)
_ID = re.compile(r"^op-(?P<key>.+)-(?P<k>\d+)(?:-(?P<dtype>b?float\d+))?-(?P<step>infer|train)$")


def _later(pattern: str, k: int) -> str:
    """``pattern`` narrowed to sample ``k`` (``op-*``: ``op-*-2-*``; ``op-add-*``: ``op-add-2-*``); an id as it is."""
    if pattern.endswith("-*") and pattern != "op-*":
        return f"{pattern[:-1]}{k}-*"
    return f"{pattern}-{k}-*" if pattern.endswith("*") else pattern


def family_size() -> str:
    """One line: the whole family at this torch release (read from the sweep's screening cache)."""
    from conformance.cases import ops

    if not ops.available():
        return "op sweep unavailable here: expecttest is not installed (pip install 'torch-conformance[ops]')"
    screened = ops.whole_sweep()
    cases = [c for s in screened for c in s.cases]
    samples = {c.id.rsplit("-", 1)[0] for c in cases}
    train = sum(c.kind == "train_step" for c in cases)
    left = ops.left_out()
    return (f"family at torch {ops.torch.__version__}: {sum(bool(s.cases) for s in screened)} ops with cases, "
            f"{len(samples)} samples, {len(cases)} pairs per backend ({len(cases) - train} inference, "
            f"{train} training); {len(left)} ops, samples or steps left out, each with its reason")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", default=None, help="repeatable (default: eager, inductor)")
    parser.add_argument("-n", "--workers", default="2")
    parser.add_argument("--shard", default=None, metavar="I/N")
    parser.add_argument("--case", action="append", default=None, help="repeatable (default: op-*)")
    parser.add_argument("--out", type=Path, default=None, help="results directory (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--later-samples", type=int, default=0, metavar="N",
                        help="run each op's N samples after the first two instead (CONFORMANCE_OP_SAMPLES=2+N, "
                             "op-*-2-* ...): samples the default sweep never runs")
    args = parser.parse_args(argv)
    backends = args.backend or ["eager", "inductor"]
    patterns = args.case or ["op-*"]
    if args.later_samples > 0:
        os.environ["CONFORMANCE_OP_SAMPLES"] = str(2 + args.later_samples)
        patterns = [_later(p, k) for p in patterns for k in range(2, 2 + args.later_samples)]

    print(family_size(), flush=True)
    with tempfile.TemporaryDirectory(prefix="op-sweep-") as tmp:
        out = args.out or Path(tmp) / "results"
        command = [sys.executable, "-m", "conformance.cli", "run", *[a for b in backends for a in ("--backend", b)],
                   *[a for c in patterns for a in ("--case", c)], "--workers", str(args.workers),
                   "--out", str(out), "--overwrite", "--no-report", "--no-history"]
        if args.shard:
            command += ["--shard", args.shard]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        print("$ conformance " + " ".join(command[3:]), flush=True)
        t0 = time.perf_counter()
        startup = 0.0  # the CLI's "before pytest" seconds: paid once per run, not per pair
        with subprocess.Popen(command, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) as proc:
            for line in proc.stdout or ():
                print(line, end="", flush=True)
                if m := re.search(r"before pytest ([\d.]+)s", line):
                    startup = float(m[1])
        wall = time.perf_counter() - t0
        found = out / "results.jsonl"
        lines = found.read_text(encoding="utf-8").splitlines() if found.exists() else []
    records = [json.loads(line) for line in lines]
    ids = [m for r in records if (m := _ID.match(r["case"]))]
    ops_ran = {(m["key"], m["dtype"]) for m in ids}  # an op in two dtypes counts twice
    samples = {(m["key"], m["k"], m["dtype"]) for m in ids}
    print(f"\nran {len(ops_ran)} ops, {len(samples)} samples, {len(records)} pairs "
          f"({', '.join(backends)}, -n {args.workers}{', shard ' + args.shard if args.shard else ''})")
    print(f"wall {wall:.1f}s, {wall / max(len(records), 1):.2f}s per pair")
    figures: dict[str, object] = {"backends": backends, "workers": args.workers, "shard": args.shard,
                                  "ops": len(ops_ran), "samples": len(samples), "pairs": len(records), "wall_s": wall}
    for backend in backends:
        mine = [r for r in records if r["backend"] == backend]
        raw = Counter(r.get("raw_status") or r["status"] for r in mine)
        final = Counter(r["status"] for r in mine)
        print(f"  {backend}: {len(mine)} pairs; raw verdicts {dict(sorted(raw.items()))}; "
              f"after its manifest {dict(sorted(final.items()))}")
        figures[backend] = {"raw": dict(raw), "final": dict(final)}
    if args.shard:
        count = int(args.shard.split("/")[1])
        whole = startup + (wall - startup) * count
        print(f"whole sweep on this machine, extrapolated: about {whole / 60:.0f} minutes "
              f"({count} x this shard's {wall - startup:.0f} s after its start-up, plus one start-up of "
              f"{startup:.0f} s; each of {count} machines would take about {wall / 60:.1f} minutes). An upper bound: "
              "a small shard's time also holds its workers' start-up")
        figures["extrapolated_s"] = whole
    figures["startup_s"] = startup
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
