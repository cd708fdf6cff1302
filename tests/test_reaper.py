"""No process outlives its pair: a daemon a backend starts in a new session is killed when the pair ends,
also when the worker dies mid-pair and under ``--no-isolate``; the pair's verdict names it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conformance.api.result import Result
from conformance.run.isolation import WorkerPool
from tests.hostile_backends import PIDFILE_ENV
from tests.test_bad_inputs import child_env, cli_subprocess

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux /proc and prctl")
SPEC = "tests.hostile_backends:"


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def left_pid(pidfile: Path) -> int:
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the adapter never started its daemon"
        time.sleep(0.05)
    return int(pidfile.read_text())


def gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture
def pidfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "daemon.pid"
    monkeypatch.setenv(PIDFILE_ENV, str(path))  # the worker inherits it
    return path


def test_a_daemon_in_a_new_session_is_killed_when_its_pair_ends(pidfile: Path) -> None:
    with WorkerPool() as pool:
        result = pool.run("mlp-s-infer", SPEC + "SetsidChildBackend", timeout_s=300)
        pid = left_pid(pidfile)
        assert gone(pid), f"pid {pid} outlived its pair"  # while the worker lives on
        assert pool._worker is not None and pool._worker.alive()
    assert result.status == "pass", result.reason
    assert any(f"pid {pid} (sleep 300)" in n and "killed" in n for n in result.notes), result.notes


def test_a_daemon_left_by_a_worker_that_exits_is_killed(pidfile: Path) -> None:
    with WorkerPool() as pool:
        result = pool.run("mlp-s-infer", SPEC + "ExitWithChildBackend", timeout_s=300)
        pid = left_pid(pidfile)
        assert gone(pid), f"pid {pid} outlived the worker"
    assert result.status == "crash" and "status 3" in result.reason
    assert any(f"pid {pid} (sleep 300)" in n for n in result.notes), result.notes


def test_a_daemon_under_no_isolate_is_killed_when_its_pair_ends(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    proc = cli_subprocess("run", "--no-isolate", "--out", "out", "--no-history", "--no-report", "--no-auto-repro",
                          "--backend", SPEC + "SetsidChildBackend", "--case", "mlp-s-infer", cwd=tmp_path,
                          env=child_env(**{PIDFILE_ENV: str(pidfile)}))
    pid = left_pid(pidfile)
    assert gone(pid, 1.0), f"pid {pid} outlived `conformance run --no-isolate`"
    (line,) = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    result = Result.from_json(json.loads(line))
    assert result.status == "pass", (result.reason, proc.stderr[-2000:])
    assert any(f"pid {pid} (sleep 300)" in n for n in result.notes), result.notes
