"""The repository's promised top level: the folders users extend (``backends/``, ``cases/``) sit at the
root, and install as ``conformance.backends`` and ``conformance.cases``, the import paths vendors use."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_root_holds_what_the_project_promised() -> None:
    for name in ("tox.ini", "pyproject.toml", "README.md"):
        assert (ROOT / name).is_file(), name
    for name in ("conformance", "backends", "cases"):
        assert (ROOT / name).is_dir() and not (ROOT / name).is_symlink(), name
    assert (ROOT / "backends" / "eager.py").is_file() and list((ROOT / "backends" / "manifests").glob("*.toml"))
    assert (ROOT / "cases" / "mlp.py").is_file()


def test_the_import_paths_read_the_root_folders() -> None:
    import conformance.backends.eager
    import conformance.cases.mlp

    assert Path(conformance.backends.eager.__file__).resolve() == ROOT / "backends" / "eager.py"
    assert Path(conformance.cases.mlp.__file__).resolve() == ROOT / "cases" / "mlp.py"


def test_a_wheel_installs_them_inside_the_package(tmp_path: Path) -> None:
    """Built from the tree (as a user's ``pip install .`` does), without relying on the clone's links."""
    setuptools = pytest.importorskip("setuptools", reason="building a wheel needs setuptools in this environment")
    if int(setuptools.__version__.split(".")[0]) < 69:
        pytest.skip(f"setuptools {setuptools.__version__} here; the project builds with >= 69")
    tree = tmp_path / "tree"  # a copy: building writes build/ and egg-info beside the sources
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    for name in ("conformance", "backends", "cases"):
        shutil.copytree(ROOT / name, tree / name, symlinks=True, ignore=ignore)
    for link in ("backends", "cases"):  # the mapping alone (a checkout without links, e.g. on Windows)
        (tree / "conformance" / link).unlink(missing_ok=True)
    env = {**os.environ, "PIP_NO_INDEX": "1"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(tree),
                    "-w", str(tmp_path / "dist")], check=True, env=env, cwd=tmp_path, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"conformance/backends/eager.py", "conformance/backends/iree.py",
                "conformance/backends/manifests/iree.toml", "conformance/output/templates/vendor/uPlot.iife.min.js",
                "conformance/cases/mlp.py", "conformance/cases/while_loops.py"}
    assert expected <= names, expected - names
    assert not [n for n in names if n.startswith(("backends/", "cases/"))]  # no top-level packages of those names


def test_every_subpackage_is_listed_for_the_build() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for home, prefix in ((ROOT / "conformance", "conformance"), (ROOT / "backends", "conformance.backends"),
                         (ROOT / "cases", "conformance.cases")):
        for init in home.rglob("__init__.py"):
            parts = init.parent.relative_to(home).parts
            found.add(".".join((prefix, *parts)))
    assert found == listed, f"pyproject.toml's [tool.setuptools] packages: add {found - listed}, drop {listed - found}"
