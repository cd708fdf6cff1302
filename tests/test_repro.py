"""A planted lifetime fault in a generated case shrinks to a few ops, and the repro shows it on its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conformance.cases.generated import program_of

from conformance.case import resolve
from conformance.engine import run_case
from conformance.repro import main_repro, shrink, write_repro
from tests.planted import LeakyEagerBackend

#: A generated case with a ``tanh`` among eight ops (the planted backend leaks ``tanh`` results).
CASE = "gen-dag-26"


def test_planted_leak_shrinks_to_a_standalone_repro(tmp_path: Path) -> None:
    case = resolve(CASE)
    assert case is not None and len(program_of(case).ops) == 8
    backend = LeakyEagerBackend()
    shrunk = shrink(case, backend, tmp_path / ".hypothesis", max_runs=60)
    assert shrunk.original.status in ("fail-peak", "fail-residual")
    assert shrunk.result.status == shrunk.original.status
    ops = program_of(shrunk.case).ops
    assert shrunk.shrunk and len(ops) <= 3 and any(op.kind == "tanh" for op in ops), ops

    repro = write_repro(shrunk.case, backend, shrunk.result, tmp_path / "repro.py")
    text = repro.read_text()
    assert "conformance.engine" not in text and "conformance.lifetime" not in text
    proc = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the repro shows the fault the harness judged: a leak is judged on its residual first
    fault = "FAULT: residual" if shrunk.result.status == "fail-residual" else "FAULT: peak"
    assert fault in proc.stdout, proc.stdout


def test_repro_of_a_clean_backend_shows_no_fault(tmp_path: Path) -> None:
    """The same script against plain eager exits 0: the repro tests the fault, not the script."""
    from conformance.backends.eager import EagerBackend

    case = resolve(CASE)
    assert case is not None
    backend = EagerBackend()
    result = run_case(case, backend)
    assert result.status == "pass", result.reason
    repro = write_repro(case, backend, result, tmp_path / "clean.py")
    proc = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no fault" in proc.stdout


def test_main_repro_writes_nothing_for_a_passing_case(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from conformance.backends.eager import EagerBackend

    assert main_repro(CASE, EagerBackend(), tmp_path / "r.py", db_dir=tmp_path / "db") == 0
    assert not (tmp_path / "r.py").exists()
    assert "nothing to reproduce" in capsys.readouterr().out
