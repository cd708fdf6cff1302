"""A wide eager sweep: is ``eager`` byte-exact on every generated program?  (Not in CI: minutes.)

    python benchmarks/eager_sweep.py [--count 300] [--hypothesis-seed 2025] [--steps 1] [--json OUT]

Draws ``--count`` generated programs the way ``conformance run --generated N --hypothesis-seed S``
does (DAGs and ``while_loop`` programs, with and without autograd), plus the seeded
``gen-early-*`` ones, runs each on ``eager`` in this process with the full engine (parity against
float64, peak and residual against the lifetime model, byte for byte), applies eager's manifest,
and prints the verdicts, the failures grouped by cause (:mod:`conformance.output.triage`), and
the wall time.  Any failure is a gap in the lifetime model or the reference executor: its cause
and a ``conformance repro`` command come with it.  Exit 1 when one is found.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.api.result import Result
from conformance.backends.eager import EagerBackend
from conformance.cases.generated import early_cases, generated_cases
from conformance.checks.manifest import apply, load_manifest
from conformance.output.triage import render_text, triage
from conformance.run.engine import RunOptions, run_case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--hypothesis-seed", type=int, default=2025)
    parser.add_argument("--steps", type=int, default=1, help="probed calls per pair (a run's default is 3)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures and every record here")
    args = parser.parse_args(argv)

    cases = generated_cases(args.count, args.hypothesis_seed) + early_cases(3, args.hypothesis_seed)
    unique = list({c.id: c for c in cases}.values())
    manifest = load_manifest("eager")
    options = RunOptions(steps=args.steps)
    results: list[Result] = []
    t0 = time.perf_counter()
    for i, case in enumerate(unique, 1):
        t = time.perf_counter()
        r = apply(run_case(case, EagerBackend(), options), manifest)
        results.append(r)
        if not r.ok or i % 50 == 0:
            print(f"[{i}/{len(unique)}] {case.id}: {r.status} ({time.perf_counter() - t:.1f}s) {r.reason[:120]}",
                  flush=True)
    wall = time.perf_counter() - t0
    kinds = Counter(f"{c.family}{'-train' if c.trains else ''}" for c in unique)
    statuses = Counter(str(r.status) for r in results)
    print(f"\n{len(unique)} generated programs ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}) "
          f"from {args.count} draws, --hypothesis-seed {args.hypothesis_seed}, {args.steps} probed call(s) each")
    print(f"verdicts: {dict(sorted(statuses.items()))}")
    print(f"wall {wall:.1f}s, {wall / max(len(unique), 1):.2f}s per program")
    for line in render_text(triage(results)):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps({
            "count": len(unique), "hypothesis_seed": args.hypothesis_seed, "wall_s": wall,
            "statuses": dict(statuses), "kinds": dict(kinds), "records": [r.to_json() for r in results],
        }, default=str) + "\n", encoding="utf-8")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
