"""Compare two results directories record by record, field by field, apart from times.

    python tools/compare_results.py BEFORE_DIR AFTER_DIR

``conformance diff`` reports what a user asks about (status, peak, residual); this checks that a
change meant to keep every verdict (a refactor, a cleanup between pairs) kept every field of every
record: checks and their figures, memory timelines, parity numbers, notes.  Times (``timing``,
``*_s`` fields), the version strings of the run, the times of measured timelines, where a
traceback's frames lie, how far a long traceback was clipped (its last line is kept) and a cache's
hit counts are left out.  Exits 1 on any difference.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

IGNORED_KEYS = {"timing", "versions", "wall_s", "phases"}
#: a traceback's frame names a file and line: where the harness's own code lies is not a verdict
FRAME = re.compile(r'File "[^"]*", line \d+')
#: what a cache held when the run started decides these counts, not the backend
CACHE_COUNTS = re.compile(r"\d+ hit\(s\), \d+ compiled")


def _strip(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, k) for k, v in value.items() if k not in IGNORED_KEYS and not k.endswith("_s")}
    if isinstance(value, list):
        if key == "timeline":  # the measured timeline is (time in us, live bytes): keep the bytes
            return [v[1] if isinstance(v, list) and len(v) == 2 else _strip(v) for v in value]
        return [_strip(v) for v in value]
    if isinstance(value, str):
        if value.startswith("…") and "\n" in value:  # a traceback clipped from the front: its last line
            value = "…" + value.rstrip().rsplit("\n", 1)[-1]
        return CACHE_COUNTS.sub("N hit(s), M compiled", FRAME.sub('File "…", line …', value))
    return value


def _records(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    lines = (directory / "results.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return {(r["case"], r["backend"]): _strip(r) for r in records}


def _differences(a: Any, b: Any, where: str = "$") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{where}.{key}: only in {'after' if key in b else 'before'}")
            else:
                out += _differences(a[key], b[key], f"{where}.{key}")
        if list(a) != list(b) and not out:
            out.append(f"{where}: key order differs")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    before, after = (_records(Path(p)) for p in argv)
    changed = 0
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            print(f"{key[0]}@{key[1]}: only in {'after' if key in after else 'before'}")
            changed += 1
            continue
        diffs = _differences(before[key], after[key])
        if diffs:
            changed += 1
            print(f"{key[0]}@{key[1]}: " + "; ".join(diffs[:5]))
    print(f"{len(set(before) | set(after))} pairs, {changed} with a difference (times left out)")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
