"""Repros: a planted fault shrinks to a few ops, and the written script checks the check that failed.

Every script is run with plain ``python`` in a subprocess: exit 1 while the planted fault
is on, 0 once it is removed (``CONFORMANCE_TEST_FAULT_OFF``), so the script tests the fault.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.api.adapter import discover
from conformance.api.case import resolve
from conformance.api.result import Result
from conformance.run.engine import run_case
from conformance.run.isolation import shutdown as isolation_shutdown
from conformance.run.repro import (
    CANDIDATE_MIN_TIMEOUT_S,
    CANDIDATE_TIMEOUT_FACTOR,
    EXIT_NOTHING_TO_REPRODUCE,
    MAX_CANDIDATE_CRASHES,
    auto_repro,
    candidate_timeout_s,
    failing_check,
    isolated,
    main_repro,
    shrink,
    write_repro,
)
from conformance.util.text import plural
from tests.planted import LeakyEagerBackend
from tests.planted_repro_backends import FAULT_OFF, HeldBackwardInputsBackend, ToggleLeakBackend

#: A generated case with a ``tanh`` among eight ops (the planted backend leaks ``tanh`` results).
CASE = "gen-dag-26"
#: A small generated training case (4 ops).
TRAIN_CASE = "gen-dag-4969-train"
REPO = Path(__file__).resolve().parent.parent


def _script(path: Path, cwd: Path, fault_off: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(FAULT_OFF, None)
    if fault_off:
        env[FAULT_OFF] = "1"
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env)


@pytest.mark.full(ci="tests/test_cli.py::test_failing_generated_case_in_a_run_gets_a_standalone_repro")
def test_planted_leak_shrinks_to_a_standalone_repro(tmp_path: Path) -> None:
    case = resolve(CASE)
    assert case is not None and len(case.program.ops) == 8
    backend = LeakyEagerBackend()
    lines: list[str] = []
    shrunk = shrink(case, backend, tmp_path / ".hypothesis", max_runs=60, progress=lines.append)
    assert shrunk.original.status in ("fail-peak", "fail-residual")
    assert shrunk.result.status == shrunk.original.status
    assert failing_check(shrunk.result) == failing_check(shrunk.original)
    ops = shrunk.case.program.ops
    assert shrunk.shrunk and len(ops) <= 3 and any(op.kind == "tanh" for op in ops), ops
    # progress: a line per smaller failing program, naming the case, the backend, the runs and the ops left
    assert any(line.endswith("(smaller program still fails)") for line in lines), lines
    assert all(line.startswith(f"shrinking {CASE} on eager-leaky: run ") and "/60, " in line for line in lines)
    assert plural(len(shrunk.case.program.ops) + len(shrunk.case.program.body), "op") + " left" in lines[-1] or any(
        re.search(r"ops? left \(smaller", line) for line in lines)

    repro = write_repro(shrunk.case, backend, shrunk.result, tmp_path / "repro.py")
    text = repro.read_text()
    assert "conformance.run.engine" not in text and "conformance.models.lifetime" not in text
    assert f"FAILED_CHECK = {failing_check(shrunk.result)!r}" in text
    proc = _script(repro, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the repro shows the fault the harness judged: a leak is judged on its residual first
    assert f"FAULT ({failing_check(shrunk.result)})" in proc.stdout, proc.stdout


def test_standalone_repro_exits_0_once_the_fault_is_removed(tmp_path: Path) -> None:
    case = resolve(CASE)
    assert case is not None
    result = run_case(case, ToggleLeakBackend())
    assert result.status == "fail-residual", result.reason
    repro = write_repro(case, ToggleLeakBackend(), result, tmp_path / "r.py")
    assert "FAILED_CHECK = 'residual'" in repro.read_text() and "Standalone" in repro.read_text()
    with_fault, without = _script(repro, tmp_path), _script(repro, tmp_path, fault_off=True)
    assert with_fault.returncode == 1 and "FAULT (residual)" in with_fault.stdout, with_fault.stdout
    assert without.returncode == 0, without.stdout + without.stderr
    assert "no fault: the residual check passes" in without.stdout


def test_repro_of_a_clean_backend_shows_no_fault(tmp_path: Path) -> None:
    """The same script against plain eager exits 0: the repro tests the fault, not the script."""
    from conformance.backends.eager import EagerBackend

    case = resolve(CASE)
    assert case is not None
    backend = EagerBackend()
    result = run_case(case, backend)
    assert result.status == "pass", result.reason
    repro = write_repro(case, backend, result, tmp_path / "clean.py")
    proc = _script(repro, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no fault" in proc.stdout


def test_backward_inputs_repro_of_a_registered_case_checks_backward_inputs(tmp_path: Path) -> None:
    """mlp-s-train is not generated: not shrunk, harness-based, and it checks backward-inputs, not peak."""
    case = resolve("mlp-s-train")
    assert case is not None
    result = run_case(case, HeldBackwardInputsBackend())
    assert result.status == "fail-peak" and failing_check(result) == "backward-inputs", result.reason
    assert result.check("peak") is not None and not result.check("peak").failed  # type: ignore[union-attr]
    repro = write_repro(case, HeldBackwardInputsBackend(), result, tmp_path / "r.py")
    text = repro.read_text()
    assert "FAILED_CHECK = 'backward-inputs'" in text
    assert "Harness-based" in text and "not generated" in text
    assert ("Rerun in the harness: conformance run --case mlp-s-train "
            "--backend tests.planted_repro_backends:HeldBackwardInputsBackend") in text
    with_fault, without = _script(repro, tmp_path), _script(repro, tmp_path, fault_off=True)
    assert with_fault.returncode == 1, with_fault.stdout + with_fault.stderr
    assert "FAULT: check backward-inputs still fails" in with_fault.stdout
    assert without.returncode == 0, without.stdout + without.stderr


@pytest.mark.full(ci="tests/test_repro.py::test_backward_inputs_repro_of_a_registered_case_checks_backward_inputs")
def test_backward_inputs_failure_of_a_generated_case_shrinks_to_a_harness_repro(tmp_path: Path) -> None:
    """A torch-only script cannot watch a backward's inputs: the script says so and runs the harness
    on the shrunk program it embeds."""
    case = resolve(TRAIN_CASE)
    assert case is not None
    backend = HeldBackwardInputsBackend()
    shrunk = shrink(case, backend, tmp_path / ".hypothesis", max_runs=12)
    assert failing_check(shrunk.result) == "backward-inputs", shrunk.result.reason
    repro = write_repro(shrunk.case, backend, shrunk.result, tmp_path / "r.py", original_id=case.id)
    text = repro.read_text()
    assert "the 'backward-inputs' check needs the harness: a torch-only script cannot observe it" in text
    assert f"CASE_ID = {shrunk.case.id!r}" in text and "PROGRAM = json.loads(" in text
    assert f"conformance run --case {TRAIN_CASE} " in text
    with_fault, without = _script(repro, tmp_path), _script(repro, tmp_path, fault_off=True)
    assert with_fault.returncode == 1, with_fault.stdout + with_fault.stderr
    assert without.returncode == 0, without.stdout + without.stderr


def test_main_repro_writes_nothing_for_a_passing_case(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from conformance.backends.eager import EagerBackend

    code = main_repro(CASE, EagerBackend(), tmp_path / "r.py", db_dir=tmp_path / "db")
    assert code == EXIT_NOTHING_TO_REPRODUCE == 3
    assert not (tmp_path / "r.py").exists()
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"{CASE} on eager: pass: no failing check on this backend, nothing to reproduce "
                   "(exit 3, nothing written)"]


def test_main_repro_writes_a_registered_case_unshrunk(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = main_repro("mlp-s-train", HeldBackwardInputsBackend(), tmp_path / "r.py", db_dir=tmp_path / "db")
    assert code == 0 and (tmp_path / "r.py").exists()
    out = capsys.readouterr().out
    assert "(check backward-inputs)" in out and "not shrunk: the case is not generated" in out
    assert not (tmp_path / "db").exists()  # nothing to shrink, no Hypothesis database


def test_a_candidate_is_limited_by_what_the_original_took() -> None:
    """Ten times the original pair's time, at least a cold compile's minute, never beyond the run's limit."""
    def took(seconds: float | None) -> Result:
        return Result(CASE, "eager", "fail-peak", timing={} if seconds is None else {"isolated_wall_s": seconds})

    assert candidate_timeout_s(took(1.5), 600) == CANDIDATE_MIN_TIMEOUT_S == 60
    assert candidate_timeout_s(took(20), 600) == 20 * CANDIDATE_TIMEOUT_FACTOR == 200
    assert candidate_timeout_s(took(100), 600) == 600
    assert candidate_timeout_s(took(None), 450) == 450
    in_process = Result(CASE, "eager", "fail-peak", timing={"pair_s": 8.0})  # a --no-isolate run's own time
    assert candidate_timeout_s(in_process, 600) == 80


def test_candidates_that_crash_cost_the_candidates_not_the_shrink(tmp_path: Path) -> None:
    """Each candidate runs in the isolation worker: a backend aborting on shrunk candidates gives them
    ``crash`` verdicts, the shrink stops after a few, and the repro of the unshrunk case is written."""
    spec = "tests.planted_repro_backends:CrashOnShrinkBackend"
    case = resolve(CASE)
    assert case is not None
    try:
        run = isolated(spec, 300)
        original = run(case)
        assert original.status in ("fail-residual", "fail-peak"), original.reason
        path, note = auto_repro(case, discover().get(spec), original, tmp_path / "out", spec=spec, run=run)
        assert path == tmp_path / "out" / "repros" / f"{CASE}@planted-crash-on-shrink.py" and path.exists()
        assert note is not None and note.startswith(f"shrink: {MAX_CANDIDATE_CRASHES} smaller candidates "
                                                     "crashed or hung the backend (worker killed by signal SIGABRT")
        assert note.endswith("the repro is of the unshrunk case"), note
        assert f"CASE_ID = {CASE!r}" in path.read_text() or f"{CASE} on backend" in path.read_text()
        # the pool goes on: the next case gets its verdict from a fresh worker
        again = run(resolve("mlp-s-train"))  # type: ignore[arg-type]
        assert again.status == "fail-residual", again.reason  # leaks its tanh results, like the generated case
    finally:
        isolation_shutdown(kill=True)


def test_a_run_survives_a_crash_while_shrinking(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "run", "--backend",
         "tests.planted_repro_backends:CrashOnShrinkBackend", "--case", CASE, "--case", "mlp-s-infer",
         "--out", str(out), "--no-report", "--no-history"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    records = {r["case"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(records) == {CASE, "mlp-s-infer"}
    failed = records[CASE]
    assert failed["status"] in ("fail-residual", "fail-peak")
    assert Path(failed["repro_file"]) == out / "repros" / f"{CASE}@planted-crash-on-shrink.py"
    assert any(n.startswith("shrink: ") and "crashed or hung the backend" in n for n in failed["notes"])
    # the run went on: the next pair got its verdict (it leaks too), and its repro (not generated: not
    # shrunk, nothing to crash on) was written
    other = records["mlp-s-infer"]
    assert other["status"] == "fail-residual", other["reason"]
    assert Path(other["repro_file"]) == out / "repros" / "mlp-s-infer@planted-crash-on-shrink.py"
    assert "FAILED_CHECK = 'residual'" in Path(other["repro_file"]).read_text()


def test_cli_repro_shrinks_a_crash_and_its_script_exits_1_while_it_crashes(tmp_path: Path) -> None:
    """A backend that aborts: ``conformance repro`` runs every candidate isolated, shrinks the crash to
    fewer ops (the tanh kept), and writes a harness-based script that runs the program isolated too."""
    case = "gen-dag-25"  # five ops, the first a tanh
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", case, "--backend",
                           "tests.planted_repro_backends:CrashOnTanhBackend", "-o", str(tmp_path / "r.py"),
                           "--max-runs", "30", "--hypothesis-db", str(tmp_path / "db")],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{case} on planted-crash-on-tanh: crash: worker killed by signal SIGABRT" in proc.stdout
    shrunk = re.search(r"shrunk in \d+ runs to (\d+) ops?: crash", proc.stdout)
    assert shrunk is not None and int(shrunk.group(1)) < 5, proc.stdout + proc.stderr
    text = (tmp_path / "r.py").read_text()
    assert "FAILED_STATUS = 'crash'" in text and "FAILED_CHECK = None" in text and "Harness-based" in text
    program = json.loads(re.search(r"^Program: (.+)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert any(op["kind"] == "tanh" for op in program["ops"]) and len(program["ops"]) < 5, program
    with_fault, without = _script(tmp_path / "r.py", tmp_path), _script(tmp_path / "r.py", tmp_path, fault_off=True)
    assert with_fault.returncode == 1 and "FAULT: verdict crash still fails" in with_fault.stdout, (
        with_fault.stdout + with_fault.stderr)
    assert without.returncode == 0, without.stdout + without.stderr


@pytest.mark.full(ci="tests/test_repro.py::test_cli_repro_shrinks_a_crash_and_its_script_exits_1_while_it_crashes")
def test_cli_repro_shows_shrink_progress_and_exits_3_when_nothing_fails(tmp_path: Path) -> None:
    def repro(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "conformance.cli", "repro", *args,
                               "--hypothesis-db", str(tmp_path / "db")],
                              cwd=REPO, capture_output=True, text=True, timeout=600)

    proc = repro(CASE, "--backend", "tests.planted_repro_backends:ToggleLeakBackend", "-o",
                 str(tmp_path / "r.py"), "--max-runs", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    progress = [line for line in proc.stderr.splitlines() if line.startswith("shrinking ")]
    assert f"shrinking {CASE} on planted-toggle-leak: run 5/10, " in proc.stderr, proc.stderr
    assert progress and all(re.search(r" \d+ ops? left", line) for line in progress)
    assert f"wrote {tmp_path / 'r.py'} (exit 1 while residual fails)" in proc.stdout
    assert _script(tmp_path / "r.py", tmp_path).returncode == 1

    clean = repro("mlp-s-infer", "--backend", "eager", "-o", str(tmp_path / "clean.py"))
    assert clean.returncode == 3, clean.stdout + clean.stderr
    assert clean.stdout.splitlines() == ["mlp-s-infer on eager: pass: no failing check on this backend, "
                                         "nothing to reproduce (exit 3, nothing written)"]
    assert not (tmp_path / "clean.py").exists()
    help_text = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", "--help"], cwd=REPO,
                               capture_output=True, text=True, timeout=120).stdout
    assert "3 the case does not fail on this backend" in " ".join(help_text.split())


def test_the_script_runners_are_modules_copied_from_their_marker() -> None:
    """The runners are real modules (ruff and mypy check them); a script gets their text from the
    marker on, without the stand-ins above it, and with the backend's compile step in place."""
    from conformance.run import repro

    standalone, harness = repro._runner("repro_standalone"), repro._runner("repro_harness")
    assert "def check_step():" in standalone and "def verdict(case, backend):" in harness
    assert "NotImplementedError" not in standalone and 'CASE_ID = ""' not in harness  # the stand-ins stay behind
    body = repro._COMPILE_BODY.sub(lambda _: "    return model\n", standalone)
    assert "<compile body>" not in body and "    return model\n" in body
