"""How long reading records and building the report take for a large results file (a nightly op sweep's).

    python benchmarks/report_build.py RESULTS_DIR_OR_FILE [--copies N] [--json FILE]

Takes the records of a real run, copies them (each copy under another case id) up to ``--copies`` times, and
times: checking every record against the schema with the reader's fast path (``check_record``) and with the
whole schema alone (jsonschema's ``is_valid``, what the reader did before the fast path), reading the file
(``read_records``), and ``build_report`` end to end (no history).  Seconds per thousand records are printed
beside each; the machine's load average too (on a shared machine, compare runs made under the same load).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from conformance.output.records import _validator, check_record, read_records
from conformance.output.report import build_report, results_file


def _timed(what: str, n: int, fn: Any, figures: dict[str, float]) -> None:
    start = time.perf_counter()
    fn()
    took = time.perf_counter() - start
    figures[what] = round(took, 3)
    print(f"  {what:<28} {took:7.2f} s   {1000 * took / max(n, 1):6.2f} s per 1000 records")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("results", type=Path, help="a results directory or results.jsonl of a real run")
    parser.add_argument("--copies", type=int, default=2000, help="records in the file timed (default: 2000)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    source = [json.loads(line) for line in results_file(args.results).read_text().splitlines() if line.strip()]
    records = [{**source[i % len(source)], "case": f"{source[i % len(source)]['case']}~{i}"}
               for i in range(args.copies)]
    print(f"{len(records)} records (copies of {len(source)} from {args.results}); load average "
          f"{os.getloadavg()[0]:.2f}")
    figures: dict[str, float] = {}
    _timed("check_record (fast path)", len(records), lambda: [check_record(r) for r in records], figures)
    _timed("whole schema (jsonschema)", len(records), lambda: [_validator().is_valid(r) for r in records], figures)
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        out = Path(tmp)
        (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        _timed("read_records", len(records), lambda: read_records(out / "results.jsonl"), figures)
        _timed("build_report", len(records), lambda: build_report([out], out / "site", history=None), figures)
    if args.json is not None:
        args.json.write_text(json.dumps({"records": len(records), "seconds": figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
