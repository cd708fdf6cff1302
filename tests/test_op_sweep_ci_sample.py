"""The op sweep's fixed CI sample: six op cases (a matmul, a broadcast, a reduction, a concatenation and two
training steps through softmax and layer norm) on eager and inductor in one ``conformance run``.  Eager is
exact on each (parity passes, measured peak = modelled peak, byte for byte); inductor gives every pair a
verdict its manifest expects.  The whole sweep runs nightly (``examples/ci/nightly.yml``,
``benchmarks/op_sweep.py``); this keeps a slice of it in every CI run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("expecttest", reason="the op sweep needs expecttest (pip install 'torch-conformance[ops]')")

ROOT = Path(__file__).resolve().parents[1]
CI_SAMPLE = ["op-mm-0-infer", "op-where-1-infer", "op-sum-1-infer", "op-cat-0-train", "op-softmax-1-train",
             "op-nn.functional.layer_norm-1-train"]
BACKENDS = ["eager", "inductor"]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    out = tmp_path_factory.mktemp("op-ci-sample") / "results"
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--workers", "0",
                           *[a for b in BACKENDS for a in ("--backend", b)],
                           *[a for c in CI_SAMPLE for a in ("--case", c)],
                           "--out", str(out), "--no-report", "--no-history"],
                          cwd=out.parent, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]  # every verdict as expected
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_every_pair_of_the_sample_has_a_verdict(records: list[dict[str, object]]) -> None:
    assert sorted((r["case"], r["backend"]) for r in records) == sorted((c, b) for c in CI_SAMPLE for b in BACKENDS)


def test_eager_is_exact_on_the_sample(records: list[dict[str, object]]) -> None:
    for r in (r for r in records if r["backend"] == "eager"):
        assert r["status"] == "pass" and r["raw_status"] == "pass", (r["case"], r["status"], r["reason"])
        memory = r["memory"]
        assert isinstance(memory, dict)
        assert memory["measured_peak_bytes"] == memory["model_peak_bytes"] > 0, r["case"]
        assert memory["measured_residual_bytes"] == memory["model_residual_bytes"], r["case"]


def test_inductor_runs_the_sample_as_its_manifest_expects(records: list[dict[str, object]]) -> None:
    inductor = [r for r in records if r["backend"] == "inductor"]
    assert len(inductor) == len(CI_SAMPLE)
    for r in inductor:  # a non-pass must be an expected one (the manifest's), never a run or harness error
        assert r["status"] == "pass" or r["expected"], (r["case"], r["status"], r["reason"])
        assert r["raw_status"] not in ("fail-run", "crash", "timeout"), (r["case"], r["raw_status"], r["reason"])
