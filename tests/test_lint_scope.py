"""`ruff check .` (and so `tox -e lint`) lints the project's own files, never what a user adds beside them.

A clone a user has worked in holds the "Add your model" file (`my_cases.py`, at the root; docs/usage.md)
and the results folders runs wrote there (`conformance-results/`, `my-results/`), repro scripts included: those are
the user's and the harness's output, and lint must pass with them present, while a fault in the project's
own folders still fails it.  Runs the real ruff on a copy of the project's ruff configuration.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: what ruff flagged in a user's clone: an unused import, a long line, an import after code, unsorted imports
UNTIDY = "x = 1\nimport sys\nimport os\n" + f"y = '{'a' * 130}'\n"


def _ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed here (the test and lint extras install it)")
    return found


def _readme_cases_file() -> str:
    section = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8").split("## Add your model", 1)[1]
    code = re.search(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    assert code, "docs/usage.md's 'Add your model' section lost its example"
    return code.group(1)


def _clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(ROOT / "pyproject.toml", clone / "pyproject.toml")
    for folder in ("conformance", "backends", "cases", "tests", "benchmarks", "tools", "examples"):
        (clone / folder).mkdir()
        (clone / folder / "tidy.py").write_text('"""A tidy module."""\n\nVALUE = 1\n')
    (clone / "my_cases.py").write_text(_readme_cases_file() + UNTIDY)
    for out in ("conformance-results", "my-results"):
        repros = clone / out / "repros"
        repros.mkdir(parents=True)
        (repros / "my-convnet-train@inductor.py").write_text(UNTIDY)
    return clone


def _check(clone: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_ruff(), "check", ".", "--no-cache", "--output-format", "concise"], cwd=clone,
                          capture_output=True, text=True, timeout=120)


def test_a_users_case_file_and_results_are_out_of_lint_scope(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    proc = _check(clone)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("folder", ["conformance", "backends", "cases", "tests", "benchmarks", "tools", "examples"])
def test_the_projects_own_files_are_still_linted(tmp_path: Path, folder: str) -> None:
    clone = _clone(tmp_path)
    (clone / folder / "untidy.py").write_text(UNTIDY)
    proc = _check(clone)
    assert proc.returncode == 1 and f"{folder}/untidy.py" in proc.stdout, proc.stdout + proc.stderr
    assert "my_cases.py" not in proc.stdout and "repros" not in proc.stdout, proc.stdout
