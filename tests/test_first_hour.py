"""A newcomer's first hour: the test command keeps to an environment of its own, CI runs exactly it, and a
resumed run that meets a backend its folder's earlier runs lacked says so (and the history names it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conformance.output import history

REPO = Path(__file__).resolve().parent.parent
CLEAN_SECOND_BACKEND = "tests.planted_backends:LeakIntermediateBackend"  # named planted-leak


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_the_test_command_is_ci_and_leaves_the_quick_start_environment_alone() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = _bash_blocks(readme)
    quick_start = next(b for b in blocks if b.endswith("conformance run -n 2"))
    tests = next(b for b in blocks if "pytest" in b and " tests" in b)
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert ci == [tests], "`.ci/run` must run exactly README's test command"
    venv = quick_start.split()[3]  # python3 -m venv DIR
    assert venv == ".venv" and f" {venv} " not in f" {tests} " and f"{venv}/" not in tests, tests
    assert "examples/vendor-backend" not in quick_start  # the vendor example installs for the tests only
    assert "examples/vendor-backend" in tests


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "conformance", "run", "--no-isolate", "--case", "mlp-s-infer",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def test_a_resumed_run_names_a_backend_its_folder_never_had(tmp_path: Path) -> None:
    first = _run(tmp_path, "--backend", "eager", "--out", "out")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "not in the earlier runs" not in first.stderr
    again = _run(tmp_path, "--backend", "eager", "--backend", CLEAN_SECOND_BACKEND, "--out", "out", "--resume")
    lines = [line for line in again.stderr.splitlines() if "not in the earlier runs" in line]
    assert lines == ["conformance: backend planted-leak not in the earlier runs kept in out (eager): 1 pair of it "
                     "run now (--backend NAME chooses the backends)"], again.stderr[-2000:]
    changed = history.changes(tmp_path / "out" / "history.sqlite")
    assert changed.previous is not None and changed.new_backends == ["planted-leak"], changed
    page = (tmp_path / "out" / "report" / "index.html").read_text()
    assert re.search(r'id="new-backends">New backend\(s\) this run, absent from run #1: <b[^>]*>planted-leak</b>',
                     page), "report lost it"
