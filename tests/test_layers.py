"""The package's layers and its acyclic imports, as import-linter's contracts in pyproject.toml state them.

The contracts run on the tree as it is, and on a copy with a planted upward import and a planted
cycle, to show each one catches what it is for.  The public paths vendors import re-export the API.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the test extra (import-linter)")
    env = {**os.environ, "PYTHONPATH": str(root)}  # a copy on the path is found before the installed package
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    shutil.copytree(ROOT / "conformance", dst / "conformance", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def test_the_tree_keeps_every_contract() -> None:
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "3 kept, 0 broken" in proc.stdout


def _planted(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """The contracts on a copy of the package with ``line`` added to ``module`` (a path under conformance/)."""
    tree = _copy(tmp_path)
    path = tree / "conformance" / module
    path.write_text(path.read_text() + f"\n{line}  # planted\n")
    return _lint(tree)


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    proc = _planted(tmp_path, "models/program.py", "from conformance.run import engine")
    assert proc.returncode == 1
    assert "Layers: each imports only the layers below it BROKEN" in proc.stdout
    assert "conformance.models.program -> conformance.run.engine" in proc.stdout


def test_a_cycle_inside_a_layer_is_caught(tmp_path: Path) -> None:
    proc = _planted(tmp_path, "models/lifetime/model.py", "from conformance.models.lifetime import steps")
    assert proc.returncode == 1
    assert "No import cycles, at any depth BROKEN" in proc.stdout
    assert "Layers: each imports only the layers below it KEPT" in proc.stdout


def test_a_module_outside_every_layer_is_refused(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    (tree / "conformance" / "misc").mkdir()
    (tree / "conformance" / "misc" / "__init__.py").write_text('"""placed nowhere"""\n')
    proc = _lint(tree)
    assert proc.returncode != 0
    assert "misc" in proc.stdout + proc.stderr


def test_public_paths_re_export_the_api() -> None:
    import conformance.adapter
    import conformance.api.adapter
    import conformance.api.case
    import conformance.api.verdict
    import conformance.case
    import conformance.verdict

    for public, real in [(conformance.adapter, conformance.api.adapter), (conformance.case, conformance.api.case),
                         (conformance.verdict, conformance.api.verdict)]:
        assert public.__all__, public.__name__
        for name in public.__all__:
            assert getattr(public, name) is getattr(real, name), f"{public.__name__}.{name}"
    from conformance.adapter import Backend, CompiledStep
    from conformance.case import Case, Workload, register  # the README's example
    from conformance.verdict import Check, Status

    assert Case and Workload and register and Backend and CompiledStep and Check and Status
