"""What crash isolation costs per case: in-process vs a reused worker vs a fresh worker per case, and what a
crash costs the pair after it: a worker forked from the pool's fork server vs a fresh interpreter.

    python benchmarks/isolation_cost.py --backend eager --case 'mlp-s-*' --repeat 3 [--crashes 4]

The crash figure alternates a pair that segfaults (``tests.planted_crash_backends:SegfaultBackend`` on
``mlp-s-infer``) with a clean one (``mlp-s-train``, eager otherwise) and times the clean pairs, each the
first in a new worker; once with the fork server (the default) and once with ``CONFORMANCE_FORK_SERVER=0``.
"""

from __future__ import annotations

import argparse
import os
import time

from conformance.api.adapter import discover
from conformance.api.case import select_cases
from conformance.run.engine import run_case
from conformance.run.isolation import FORK_SERVER_ENV, WorkerPool

CRASHING = "tests.planted_crash_backends:SegfaultBackend"


def after_crashes(crashes: int, fork_server: bool) -> tuple[float, int]:
    """Mean seconds of a clean pair run right after a crash (its worker new), and the workers forked."""
    os.environ[FORK_SERVER_ENV] = "1" if fork_server else "0"
    try:
        with WorkerPool() as pool:
            pool.run("mlp-s-train", CRASHING, 300)  # the first worker's start-up is not a crash's cost
            took = []
            for _ in range(crashes):
                assert pool.run("mlp-s-infer", CRASHING, 300).status == "crash"
                t0 = time.perf_counter()
                assert pool.run("mlp-s-train", CRASHING, 300).status == "pass"
                took.append(time.perf_counter() - t0)
            return sum(took) / len(took), pool.fork_count
    finally:
        os.environ.pop(FORK_SERVER_ENV, None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="eager")
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--crashes", type=int, default=4, help="crash-then-pass cycles per crash figure (0: none)")
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
    if args.crashes:
        forked, forks = after_crashes(args.crashes, fork_server=True)
        spawned, _ = after_crashes(args.crashes, fork_server=False)
        print(f"pair after a crash, forked:     {forked * 1000:8.1f} ms  ({forks} workers forked)")
        print(f"pair after a crash, spawned:    {spawned * 1000:8.1f} ms  (CONFORMANCE_FORK_SERVER=0)")


if __name__ == "__main__":
    main()
