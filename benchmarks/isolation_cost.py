"""What crash isolation costs per case: in-process vs a reused worker vs a fresh worker per case.

    python benchmarks/isolation_cost.py --backend eager --case 'mlp-s-*' --repeat 3
"""

from __future__ import annotations

import argparse
import time

from conformance.api.adapter import discover
from conformance.api.case import select_cases
from conformance.run.engine import run_case
from conformance.run.isolation import WorkerPool


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="eager")
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cases = [c.id for c in select_cases(args.case or ["mlp-s-*"])] * args.repeat
    backend = discover().get(args.backend)

    run_case(select_cases([cases[0]])[0], backend)  # warm-up: imports, first-call costs
    t0 = time.perf_counter()
    for cid in cases:
        run_case(select_cases([cid])[0], backend)
    inproc = (time.perf_counter() - t0) / len(cases)

    with WorkerPool() as pool:
        t0 = time.perf_counter()
        pool.start()
        startup = time.perf_counter() - t0
        pool.run(cases[0], args.backend, 300)  # the same warm-up, in the worker
        t0 = time.perf_counter()
        for cid in cases:
            pool.run(cid, args.backend, 300)
        reused = (time.perf_counter() - t0) / len(cases)

    t0 = time.perf_counter()
    for cid in cases:
        with WorkerPool() as fresh_pool:
            fresh_pool.run(cid, args.backend, 300)
    fresh = (time.perf_counter() - t0) / len(cases)

    print(f"backend={args.backend} cases={len(cases)} ({', '.join(sorted(set(cases)))})")
    print(f"in-process run_case (warm):     {inproc * 1000:8.1f} ms/case")
    print(f"isolated, reused worker (warm): {reused * 1000:8.1f} ms/case  overhead {1000 * (reused - inproc):+.1f} ms")
    print(f"worker start-up, once:          {startup * 1000:8.1f} ms")
    print(f"isolated, fresh worker per case:{fresh * 1000:8.1f} ms/case  overhead {1000 * (fresh - inproc):+.1f} ms")


if __name__ == "__main__":
    main()
