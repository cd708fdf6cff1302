"""Baselines: a pair whose measured peak or residual grew since an earlier run fails; ``diff`` says what changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.api.result import MemoryFigures, Result
from conformance.api.verdict import Status
from conformance.checks.baseline import BaselineError, Tolerance, apply_baseline, diff, format_diff
from conformance.output.records import read_results


def _result(peak: int, residual: int = 0, status: str = "pass") -> Result:
    return Result("mlp-s-infer", "eager", Status(status), memory=MemoryFigures(
        domain="torch-cpu", measured_peak_bytes=peak, measured_residual_bytes=residual))


@pytest.mark.parametrize("text, before, after, ok", [
    ("0", 1000, 1000, True), ("0", 1000, 1001, False), ("4096", 1000, 5096, True), ("4096", 1000, 5097, False),
    ("5%", 1000, 1050, True), ("5%", 1000, 1051, False),
])
def test_tolerance(text: str, before: int, after: int, ok: bool) -> None:
    assert Tolerance.parse(text).allows(before, after) is ok


@pytest.mark.parametrize("bad", ["five", "-3", "5 %%", "1e3"])
def test_bad_tolerance_is_refused(bad: str) -> None:
    with pytest.raises(BaselineError, match="baseline tolerance"):
        Tolerance.parse(bad)


def test_growth_fails_a_passing_pair_and_names_both_figures() -> None:
    r = apply_baseline(_result(2052), _result(2048), Tolerance(), "baseline nightly")
    assert r.status == Status.FAIL_PEAK and r.excess_bytes == 4
    assert "measured peak grew +4 B since the baseline (2048 -> 2052 B" in r.reason
    check = r.check("baseline")
    assert check is not None and check.figures["peak_before"] == 2048
    # the record's headline is the deciding check's: growth 4 B over 0 B allowed, the excess said, not blamed
    assert r.memory is not None and r.memory.check == "baseline" and r.memory.contract == check.contract
    assert check.contract is not None and check.contract.violated and check.contract.excess_bytes == 4
    assert r.memory.blame_unexplained_bytes == 4 and r.memory.blame_note
    leak = apply_baseline(_result(2048, residual=32), _result(2048), Tolerance(), "b")
    assert leak.status == Status.FAIL_RESIDUAL and "residual grew +32 B" in leak.reason


def test_no_growth_or_no_earlier_pair_leaves_the_verdict() -> None:
    assert apply_baseline(_result(2048), _result(4096), Tolerance(), "b").status == Status.PASS  # shrank
    assert apply_baseline(_result(2048), None, Tolerance(), "b").status == Status.PASS
    failing = apply_baseline(_result(9999, status="fail-parity"), _result(1), Tolerance(), "b")
    assert failing.status == Status.FAIL_PARITY  # the baseline check is recorded, the verdict stays


def test_diff_lists_changed_pairs() -> None:
    a = [_result(2048), Result("x", "eager", Status.PASS)]
    b = [_result(2052), Result("x", "eager", Status.FAIL_PEAK)]
    lines = format_diff(diff(a, b))
    assert any("mlp-s-infer@eager: pass; peak 2048 -> 2052 (+4) B" in ln for ln in lines)
    assert any(ln.startswith("x@eager: pass -> fail-peak") for ln in lines)
    assert lines[-1] == "2 of 2 pairs changed (status, peak or residual)"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_a_real_run_against_a_baseline_with_a_smaller_peak_fails(tmp_path: Path) -> None:
    first = _run("run", "--backend", "eager", "--case", "mlp-s-infer", "--no-isolate", "--out", str(tmp_path / "a"),
                 "--no-report", "--no-history", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    (earlier,) = read_results(tmp_path / "a" / "results.jsonl")
    # the same run, as if last night had measured 16 B less
    record = earlier.to_json()
    record["memory"]["measured_peak_bytes"] -= 16
    (tmp_path / "night").mkdir()
    (tmp_path / "night" / "results.jsonl").write_text(json.dumps(record) + "\n")
    second = _run("run", "--backend", "eager", "--case", "mlp-s-infer", "--no-isolate", "--out", str(tmp_path / "b"),
                  "--no-report", "--no-history", "--baseline", str(tmp_path / "night"), cwd=tmp_path)
    assert second.returncode == 1, second.stderr[-2000:]
    (now,) = read_results(tmp_path / "b" / "results.jsonl")
    assert now.status == Status.FAIL_PEAK and "grew +16 B since the baseline" in now.reason
    tolerated = _run("run", "--backend", "eager", "--case", "mlp-s-infer", "--no-isolate", "--out",
                     str(tmp_path / "c"), "--no-report", "--no-history", "--baseline", str(tmp_path / "night"),
                     "--baseline-tolerance", "16", cwd=tmp_path)
    assert tolerated.returncode == 0, tolerated.stderr[-2000:]
    shown = _run("diff", str(tmp_path / "night"), str(tmp_path / "b"), cwd=tmp_path)
    assert shown.returncode == 0 and "(+16) B" in shown.stdout
    missing = _run("run", "--backend", "eager", "--case", "mlp-s-infer", "--out", str(tmp_path / "d"),
                   "--baseline", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2 and "no results.jsonl" in missing.stderr
    assert not (tmp_path / "d").exists()
