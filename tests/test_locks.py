"""Every command that writes into an output directory takes its lock: while a run (or anything else)
holds it, ``merge`` and ``report`` are refused with one line and write nothing there."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.api.result import Result, append_result
from conformance.cli.main import main as cli
from conformance.output.outdir import LOCK
from tests.test_bad_inputs import child_env, snapshot

HOLD = ("import sys, time; from pathlib import Path; from conformance.output.outdir import claim; "
        "claim(Path(sys.argv[1]), 'resume'); print('held', flush=True); time.sleep(120)")


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    shard = tmp_path / "shard"
    shard.mkdir()
    append_result(shard / "results.jsonl", Result("mlp-s-infer", "eager", "pass"))
    return shard


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A directory holding a run's verdicts, its lock held by another process (as a running run holds it)."""
    out = tmp_path / "out"
    out.mkdir()
    append_result(out / "results.jsonl", Result("mlp-s-train", "inductor", "fail-peak", "the run's own verdict"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True,
                              env=child_env())
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield out, holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_merge_into_a_locked_directory_is_refused(shard: Path, running: tuple[Path, int],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out, pid = running
    before = snapshot(out)
    assert cli(["merge", str(shard), "-o", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"(pid {pid}) is writing there" in err[0], err
    assert snapshot(out) == before  # the run's verdicts are still there


def test_report_into_a_locked_directory_or_under_it_is_refused(shard: Path, running: tuple[Path, int],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out, pid = running
    before = snapshot(out)
    for site in (out, out / "report"):
        assert cli(["report", str(shard), "-o", str(site), "--no-history"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"(pid {pid}) is writing" in err[0], err
    assert {k: v for k, v in snapshot(out).items() if k != "report"} == before


def test_merge_and_report_release_their_lock(shard: Path, tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    assert cli(["merge", str(shard), "-o", str(merged)]) == 0
    assert cli(["report", str(merged), "-o", str(merged / "report"), "--no-history"]) == 0
    assert not (merged / LOCK).exists() and not (merged / "report" / LOCK).exists()
    assert cli(["merge", str(shard), "-o", str(merged), "--overwrite"]) == 0
