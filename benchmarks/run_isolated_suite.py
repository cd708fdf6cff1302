"""Run the default case set on one or more backends, each case isolated in a worker; print a table.

    python benchmarks/run_isolated_suite.py --backend iree --backend inductor --out results.jsonl

Each line of ``--out`` is a :class:`conformance.api.result.Result` (raw verdicts: no manifest applied).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.api.case import select_cases
from conformance.api.result import MemoryFigures, Result, append_result
from conformance.checks.manifest import apply, load_manifest
from conformance.run.isolation import WorkerPool


def row(r: Result) -> str:
    m = r.memory or MemoryFigures()
    dom = m.domains or {}
    torch_pk = dom["torch-cpu"].peak_bytes if "torch-cpu" in dom else m.measured_peak_bytes
    hal_pk = dom["iree-hal"].peak_bytes if "iree-hal" in dom else ""
    verdict = m.backward_inputs
    par = r.parity.get("max_abs_err", "")
    par = f"{par:.2e}" if isinstance(par, float) else par
    t = r.timing
    status = f"{r.status} ({r.raw_status})" if r.raw_status and r.raw_status != r.status else r.status
    return (f"| {r.case} | {r.backend} | {status} | {m.model_peak_bytes} | {torch_pk} | {hal_pk} | "
            f"{m.measured_peak_bytes} | {m.model_residual_bytes} | "
            f"{m.measured_residual_bytes} | {par} | {verdict.verdict if verdict else ''} | "
            f"{t.get('compile_s', 0):.2f} | {t.get('run_s', 0) * 1000:.2f} | {r.reason[:160]} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append", required=True)
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=Path("results.jsonl"))
    ap.add_argument("--apply-manifest", action="store_true", help="turn raw verdicts into xfail/xpass")
    args = ap.parse_args()
    print("| case | backend | verdict | model peak B | torch-cpu peak B | iree-hal peak B | combined peak B | "
          "model resid B | measured resid B | max abs err vs fp64 | backward inputs | compile+1st run s | run ms | "
          "reason |")
    print("|" + "---|" * 14)
    with WorkerPool() as pool:
        for backend in args.backend:
            for case in select_cases(args.case):
                r = pool.run(case.id, backend, args.timeout)
                if args.apply_manifest:
                    r = apply(r, load_manifest(r.backend))
                append_result(args.out, r)
                print(row(r), flush=True)


if __name__ == "__main__":
    main()
