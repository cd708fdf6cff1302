"""The table of planted fault x backend: on how many cases the harness catches each fault.

    python benchmarks/fault_matrix.py [--backend eager] [--fault input-clone] [--case 'mlp-*'] [--json OUT]

Every fault of ``tests/faults.py`` is planted in each clean backend (eager, inductor, the
example vendor) and run on every case of the default set (or ``--case``) the backend can run
here, with the clean backend's own manifest applied, as a user would see it.  A fault counts as *caught* on a case when
the verdict is unexpected (a failure, or an excess other than the manifest's).  A fault
in inductor's code generation counts only on cases where it changes the generated program's
live bytes at one of its allocations (a ``del`` dropped right before ``return`` changes the code,
not the memory);
the others apply everywhere (a value fault changes values, a memory fault allocates), except
a 1e-3 relative error, which is within the precision of bfloat16 and float16 cases.
Also prints, for the clean inductor, whether the measured timeline followed the
generated program exactly on every case it compiled.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.api.case import select_cases
from conformance.api.result import Result
from conformance.checks.manifest import apply, load_manifest
from conformance.run.engine import RunOptions, run_case
from tests.faults import CREATED, FAULTS, INDUCTOR_ONLY, LEAK_FROM_CALL, backend_classes, planted


def program_memory(result: Result) -> list[int]:
    """The generated program's live bytes at each of its allocations: what a codegen fault must change
    to change memory.  Bytes held longer change memory only if something is allocated while they are
    held, so a ``del`` dropped where nothing is allocated before the call returns (the result tuple of
    a fallback op whose items are all returned, a loop's counter deleted just before ``return``)
    changes the code, not the memory."""
    at_allocations: list[int] = []
    before = 0
    for _, live in (result.memory.program_timeline if result.memory else None) or []:
        if int(live) > before:
            at_allocations.append(int(live))
        before = int(live)
    return at_allocations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", default=[])
    parser.add_argument("--fault", action="append", default=[])
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--json", type=Path, default=None, help="write every verdict here")
    args = parser.parse_args()
    backends = {k: v for k, v in backend_classes().items() if not args.backend or k in args.backend}
    faults = [f for f in FAULTS if not args.fault or f in args.fault]
    rows: list[dict[str, object]] = []
    table: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    exact = [0, 0]
    t0 = time.perf_counter()
    for bname, bcls in backends.items():
        clean_backend = bcls()
        manifest = load_manifest(clean_backend.name, getattr(clean_backend, "manifest_path", None))
        cases = [c for c in select_cases(args.case) if not clean_backend.capabilities.missing_for(c)]
        for case in cases:
            clean_memory: list[int] | None = None
            if bname == "inductor":
                CREATED.clear()
                clean = run_case(case, planted(bcls, "none")())  # type: ignore[arg-type]
                clean_memory = program_memory(clean)
                program = clean.check("program")
                if program is not None:
                    exact[1] += 1
                    exact[0] += program.figures.get("timeline") == "exact"
            for fault in faults:
                if fault in INDUCTOR_ONLY and bname != "inductor":
                    continue
                steps = LEAK_FROM_CALL - 1 if fault.startswith("leak") else 3
                CREATED.clear()
                result = run_case(case, planted(bcls, fault)(), RunOptions(steps=steps))  # type: ignore[arg-type]
                result.backend = clean_backend.name
                applies = FAULTS[fault].applies(case) and bool(CREATED) and CREATED[-1].applied
                if fault in INDUCTOR_ONLY:
                    applies = program_memory(result) != clean_memory
                final = apply(result, manifest)
                caught = not final.ok
                if applies:
                    table[(fault, bname)][1] += 1
                    table[(fault, bname)][0] += caught
                rows.append({"backend": bname, "fault": fault, "case": case.id, "applies": applies,
                             "caught": caught, "status": str(final.status), "reason": final.reason[:300]})
                if applies and not caught:
                    print(f"MISSED {fault} on {bname} {case.id}: {final.status} {final.reason[:160]}", flush=True)
    print(f"\nfault x backend: caught / cases where the fault changes memory or values "
          f"({time.perf_counter() - t0:.0f} s)")
    names = list(backends)
    print("| fault | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for fault in faults:
        cells = []
        for b in names:
            hits, total = table.get((fault, b), (0, 0))
            cells.append(f"{hits}/{total}" if total else "n/a")
        print(f"| {fault} | " + " | ".join(cells) + " |")
    if exact[1]:
        print(f"\nclean inductor: measured timeline = generated program's on {exact[0]}/{exact[1]} compiled cases")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
