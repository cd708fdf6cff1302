"""What a pair pays for starting clean (:mod:`conformance.run.pristine`): two snapshots and their diff.

    python benchmarks/pristine_cost.py [--repeat 50]

Imports torch and inductor (as a worker has them), then times ``snapshot()``, ``snapshot()`` and ``diff()``
(what ``run_case`` does around every pair, less the restore of an unchanged state), and the part of it that
reads torch's decomposition tables and ``torch.library``'s registrations.  Compare runs made under the same
load only.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    import torch._inductor.compile_fx  # noqa: F401  (a worker's imports: inductor's decomposition table)

    from conformance.run import pristine

    pristine.snapshot()  # the first one installs the registration watch
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        before = pristine.snapshot()
        pristine.diff(before, pristine.snapshot())
    pair = (time.perf_counter() - t0) / args.repeat
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        {name: dict(table) for name, table in pristine._tables().items()}
        pristine._registrations()
    tables = (time.perf_counter() - t0) / args.repeat
    print(f"per pair: two snapshots and their diff {pair * 1e3:.2f} ms; of one snapshot, the decomposition tables "
          f"and registrations {tables * 1e3:.2f} ms (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
