"""Verdicts do not depend on cache state: the same pairs, cold caches then warm, judged the same.

Runs share inductor's FX graph cache and IREE's compiled modules across pairs and runs, and a
run's isolation worker warms its backends up before the first pair.  None of that may change a
verdict or a figure it rests on; the warm run must also really have used the caches (IREE
says its hits in the pair's notes, inductor's cache directory holds the graphs).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.run.isolation import WorkerPool

pytestmark = pytest.mark.slow

#: one graph per backend, compiled by all three (the warm-up test below takes a training case)
CASES = ["mlp-s-infer"]
#: iree (turbine's compile as shipped) and iree-boxed (ours) both get their modules through the cache
BACKENDS = ["inductor", "iree", "iree-boxed"]


def _run(tmp: Path, out: str, *extra: str) -> dict[str, dict[str, Any]]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"), "CONFORMANCE_IREE_CACHE": str(tmp / "iree")}
    cmd = [sys.executable, "-m", "conformance", "run", *[arg for b in BACKENDS for arg in ("--backend", b)],
           *[arg for c in CASES for arg in ("--case", c)], "--no-report", "--no-history", "--out", str(tmp / out),
           *extra]
    proc = subprocess.run(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = (tmp / out / "results.jsonl").read_text().splitlines()
    return {f"{r['case']}@{r['backend']}": r for r in map(json.loads, lines)}


def _judged(result: dict[str, Any]) -> dict[str, Any]:
    """What a verdict is made of: status, reason, every check, parity and memory figures (not times, not notes)."""
    memory = result["memory"]
    return {
        "status": result["status"], "reason": result["reason"], "excess": result["excess_bytes"],
        "checks": [(c["name"], c["status"], c["reason"], c.get("excess_bytes")) for c in result["checks"]],
        "parity": {k: v for k, v in result["parity"].items() if k != "calls"},
        "memory": {k: memory.get(k) for k in ("model_peak_bytes", "measured_peak_bytes", "model_residual_bytes",
                                             "measured_residual_bytes", "residual_per_step", "peak_per_step",
                                             "program_peak_bytes", "domains", "blamed")},
        "timeline": [live for _, live in memory.get("timeline", [])],
    }


def test_cold_and_warm_caches_give_the_same_verdicts(tmp_path: Path) -> None:
    cold = _run(tmp_path, "cold")
    assert any((tmp_path / "inductor").rglob("*")), "inductor's cache stayed empty: nothing was shared"
    warm = _run(tmp_path, "warm")
    assert sorted(cold) == sorted(warm) == sorted(f"{c}@{b}" for c in CASES for b in BACKENDS)
    for pair in cold:
        assert _judged(warm[pair]) == _judged(cold[pair]), pair
    # the IREE pairs say how their modules were got
    cold_use = {p: use for p, r in cold.items() if (use := _iree_cache_use(r)) is not None}
    warm_use = {p: use for p, r in warm.items() if (use := _iree_cache_use(r)) is not None}
    assert len(cold_use) == len(warm_use) == 2
    assert sum(compiled for _, compiled in cold_use.values()) > 0
    for pair, (hits, compiled) in warm_use.items():
        assert hits > 0 and compiled == 0, pair  # every module came from the cache


def _iree_cache_use(result: dict[str, Any]) -> tuple[int, int] | None:
    """(hits, compiled) from an IREE pair's note, None for a pair without one."""
    for note in result["notes"]:
        if found := re.search(r"IREE module cache .*: (\d+) hit\(s\), (\d+) compiled", note):
            return int(found[1]), int(found[2])
    return None


@pytest.mark.full(ci="tests/test_isolation.py::test_a_warm_up_that_crashes_decides_nothing")
def test_a_warmed_up_worker_judges_as_a_cold_one() -> None:
    """The run's first worker warms its backends up (``Backend.warm_up``); its pair's verdict is unchanged
    (a training case: forward and backward graphs, both compiled after the warm-up)."""
    judged = []
    for warm in (["inductor"], None):
        with WorkerPool(warm=warm) as pool:
            judged.append(_judged(pool.run("mlp-s-train", "inductor", timeout_s=300).to_json()))
    assert judged[0] == judged[1]
