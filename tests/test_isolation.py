"""Crash isolation: a backend that segfaults, aborts or hangs costs one verdict, not the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.run import isolation, reaper
from conformance.run.isolation import FORK_SERVER_ENV, WorkerPool, describe_exit

CASES = ["mlp-s-train", "mlp-s-infer", "loop-rnn-t3"]


@pytest.fixture
def pool():
    with WorkerPool() as p:
        yield p


def test_segfault_is_a_crash_and_the_run_goes_on(pool: WorkerPool) -> None:
    spec = "tests.planted_crash_backends:SegfaultBackend"
    results = {c: pool.run(c, spec, timeout_s=120) for c in CASES}
    crashed = results["mlp-s-infer"]
    assert crashed.status == "crash"
    assert "SIGSEGV" in crashed.reason
    assert crashed.kind == "inference" and crashed.repro  # the parent still describes the case
    assert any("Fatal Python error" in n or "Segmentation" in n for n in crashed.notes)  # faulthandler's tail
    assert results["mlp-s-train"].status == "pass", results["mlp-s-train"].reason
    assert results["loop-rnn-t3"].status == "pass", results["loop-rnn-t3"].reason  # ran in a respawned worker
    assert pool.spawn_count == 2  # one worker before the crash, reused for the first case; one after


def test_abort_is_a_crash(pool: WorkerPool) -> None:
    result = pool.run("mlp-s-infer", "tests.planted_crash_backends:AbortBackend", timeout_s=120)
    assert result.status == "crash" and "SIGABRT" in result.reason


def test_hang_is_a_timeout_and_the_worker_is_replaced(pool: WorkerPool) -> None:
    spec = "tests.planted_crash_backends:HangBackend"
    hung = pool.run("mlp-s-infer", spec, timeout_s=8)
    assert hung.status == "timeout"
    assert "8 s" in hung.reason
    after = pool.run("mlp-s-train", spec, timeout_s=120)
    assert after.status == "pass", after.reason


def test_clean_backend_reuses_one_worker(pool: WorkerPool) -> None:
    for case in ("mlp-s-infer", "mlp-s-train"):
        assert pool.run(case, "eager", timeout_s=120).status == "pass"
    assert pool.spawn_count == 1


def test_a_warm_up_that_crashes_decides_nothing() -> None:
    """The run's first worker warms its backends up; one that dies doing so is replaced by a worker that
    does not, and the pair is judged as usual."""
    spec = "tests.planted_crash_backends:WarmUpSegfaultBackend"
    with WorkerPool(warm=[spec]) as pool:
        assert pool.run("mlp-s-infer", spec, timeout_s=120).status == "pass"
        assert pool.spawn_count == 2


def test_describe_exit() -> None:
    assert describe_exit(-11) == "worker killed by signal SIGSEGV (11)"
    assert "status 3" in describe_exit(3)


def test_the_worker_wire_is_typed_records() -> None:
    """A request and a reply cross the pipe as the records they are, fields by name, nothing positional."""
    from conformance.run.isolation import Reply, Request
    from conformance.run.options import RunOptions

    request = Request("gen-dag-6634@shrunk", "tests.planted:LeakyEagerBackend", RunOptions(steps=5),
                      {"program": {"ops": []}, "seed": 7})
    assert Request.from_line(request.to_line()) == request
    assert Request.from_line(Request("mlp-s-infer", "eager").to_line()).options == RunOptions()
    reply = Reply("ok", {"case": "mlp-s-infer"}, recycle=True)
    assert Reply.from_line(reply.to_line().encode()) == reply


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[1])


@pytest.mark.skipif(not reaper.supported(), reason="the fork server needs a subreaper (Linux)")
def test_a_worker_after_a_crash_is_forked_and_adopted_by_the_run() -> None:
    """Workers come from the fork server, and each is this process's child: its exit status (the
    signal) reaches the pool as a spawned worker's does, and the verdicts are a fresh interpreter's."""
    spec = "tests.planted_crash_backends:SegfaultBackend"
    with WorkerPool() as pool:
        assert pool.run("mlp-s-train", spec, timeout_s=120).status == "pass"
        crashed = pool.run("mlp-s-infer", spec, timeout_s=120)
        after = pool.run("mlp-s-train", spec, timeout_s=120)
        assert pool._worker is not None and _parent_of(pool._worker.process.pid) == os.getpid()
        assert (pool.spawn_count, pool.fork_count) == (2, 2)
        server = pool._server
        assert server is not None and server.process.poll() is None
    assert server.process.poll() is not None  # closing the pool ends its fork server
    assert crashed.status == "crash" and "SIGSEGV" in crashed.reason
    assert any("Fatal Python error" in n or "Segmentation" in n for n in crashed.notes)
    assert after.status == "pass", after.reason


@pytest.mark.full(ci="tests/test_isolation.py::test_without_the_fork_server_workers_are_fresh_interpreters")
@pytest.mark.skipif(not reaper.supported(), reason="the fork server needs a subreaper (Linux)")
def test_a_fork_server_whose_imports_initialised_a_device_forks_no_worker() -> None:
    """A backend's preload that initialises CUDA in the server (torch then refuses CUDA in each forked
    child): the server exits with its reason, and the pairs run in fresh interpreters, as without it."""
    spec = "tests.planted_crash_backends:ForkPoisoningBackend"
    with WorkerPool(warm=[spec]) as pool:
        with pytest.warns(RuntimeWarning, match="could not use cuda"):
            assert pool.run("mlp-s-train", spec, timeout_s=120).status == "pass"
        assert pool.run("mlp-s-infer", spec, timeout_s=120).status == "pass"
        assert pool._server is None and pool._no_server
        assert "could not use cuda" in pool.fork_server_refusal
        assert (pool.spawn_count, pool.fork_count) == (2, 1)  # the forked attempt, then one fresh interpreter


def test_without_the_fork_server_workers_are_fresh_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FORK_SERVER_ENV, "0")
    spec = "tests.planted_crash_backends:SegfaultBackend"
    with WorkerPool() as pool:
        assert pool.run("mlp-s-infer", spec, timeout_s=120).status == "crash"
        assert pool.run("mlp-s-train", spec, timeout_s=120).status == "pass"
        assert (pool.spawn_count, pool.fork_count) == (2, 0) and pool._server is None


@pytest.mark.full(ci="tests/test_isolation.py::test_a_worker_after_a_crash_is_forked_and_adopted_by_the_run")
@pytest.mark.skipif(not reaper.supported(), reason="the fork server needs a subreaper (Linux)")
def test_a_changed_environment_or_a_dead_server_gets_a_new_fork_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's imports read the environment it started with: a worker spawned after the run's
    environment changed comes from a new server that has the new one; a server that died is replaced."""
    spec = "tests.planted_crash_backends:SegfaultBackend"
    with WorkerPool() as pool:
        assert pool.run("mlp-s-infer", spec, timeout_s=120).status == "crash"
        first = pool._server
        assert first is not None
        monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test")  # changes per test, read by no import
        assert pool.run("mlp-s-infer", spec, timeout_s=120).status == "crash"
        assert pool._server is first
        monkeypatch.setenv("CONFORMANCE_TEST_MARK", "1")
        assert pool.run("mlp-s-infer", spec, timeout_s=120).status == "crash"
        second = pool._server
        assert second is not None and second is not first and second.env["CONFORMANCE_TEST_MARK"] == "1"
        assert first.process.poll() is not None
        second.process.kill()
        second.process.wait()
        assert pool.run("mlp-s-train", spec, timeout_s=120).status == "pass"
        assert pool._server is not None and pool._server is not second
        assert pool.fork_count == pool.spawn_count == 4


@pytest.mark.full(ci="tests/test_isolation.py::test_without_the_fork_server_workers_are_fresh_interpreters")
@pytest.mark.skipif(not reaper.supported(), reason="the fork server needs a subreaper (Linux)")
def test_a_fork_server_that_does_not_answer_is_ended_and_workers_are_spawned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that gives no pid in time (a preload that hangs; here, one still importing torch) is killed,
    the worker is a fresh interpreter, and the pool forks no more."""
    monkeypatch.setattr(isolation, "FORK_ANSWER_TIMEOUT_S", 0.01)
    with WorkerPool() as pool:
        assert pool.run("mlp-s-train", "eager", timeout_s=120).status == "pass"
        assert pool._server is None and pool._no_server
        assert pool.run("mlp-s-infer", "tests.planted_crash_backends:SegfaultBackend", timeout_s=120).status == "crash"
        assert pool.run("mlp-s-train", "eager", timeout_s=120).status == "pass"
        # the forked attempt, then a fresh interpreter for the first pair and another after the crash
        assert (pool.spawn_count, pool.fork_count) == (3, 1) and pool._server is None


@pytest.mark.skipif(not reaper.supported(), reason="the fork server needs a subreaper (Linux)")
def test_a_runs_fork_server_is_forked_from_the_command_as_a_fresh_server_would_be(tmp_path: Path) -> None:
    """``conformance run`` imports torch once: it forks its fork server from itself after that import and
    before anything else, not from a new interpreter.  The worker forked from there is the one a fresh
    server would fork: default signal handlers (not the command's Ctrl-C handler), none of the command's
    descriptors (a caller's pipe left open there would keep the caller waiting), none of the CLI's
    modules, and the working directory on its import path."""
    import json
    import subprocess
    import sys

    from tests.planted_crash_backends import WORKER_FACTS_ENV

    facts_path = tmp_path / "facts.json"
    read_end, write_end = os.pipe()  # a descriptor the command inherits and its workers must not
    marker = f"pipe:[{os.fstat(write_end).st_ino}]"
    env = {**os.environ, WORKER_FACTS_ENV: str(facts_path)}
    env.pop(FORK_SERVER_ENV, None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "conformance", "run", "--case", "mlp-s-infer",
             "--backend", "tests.planted_crash_backends:WorkerFactsBackend", "--out", str(tmp_path / "out")],
            cwd=Path(__file__).parent.parent, env=env, pass_fds=(write_end,), capture_output=True, text=True,
            timeout=300)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.returncode == 0, done.stdout + done.stderr
    facts = json.loads(facts_path.read_text(encoding="utf-8"))
    assert facts["cmdline"][1:4] == ["-m", "conformance", "run"], facts["cmdline"]  # forked from the command
    assert facts["sigint_is_keyboard_interrupt"] and facts["sigterm_is_default"]
    assert marker not in facts["fd_targets"], facts["fd_targets"]
    assert "conformance.cli.main" not in facts["modules"], facts["modules"]  # forked before the CLI loaded
    assert facts["cwd_on_path"]
