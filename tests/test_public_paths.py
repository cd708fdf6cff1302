"""Every import path the docs have shown vendors and case authors keeps working.

The current paths import silently; the paths an earlier guide showed (before the layered package)
import the same objects and warn once, naming where they moved, until they are removed.  The docs'
own examples are read from the files, so a guide that shows a path nobody keeps fails here.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: (old path, new path, names the old guides imported from it)
MOVED = [
    ("conformance.step", "conformance.api.step", ["StepOutput", "run_module_step"]),
    ("conformance.aot", "conformance.api.aot", ["AotRecorder", "AotStep"]),
    ("conformance.records", "conformance.output.records", ["read_records"]),
    ("conformance.transients", "conformance.models.transients", ["reference_kernels"]),
    ("conformance.lifetime", "conformance.models.lifetime",
     ["LifetimeModel", "Observation", "model_forward_backward", "GraphProgram", "ModelBuilder"]),
    ("conformance.program", "conformance.models.program", ["WrapperProgram"]),
]

_IMPORT = re.compile(r"^\s*from (conformance(?:\.\w+)*) import ([\w, ]+)$", re.M)


def _fresh_import(name: str) -> tuple[object, list[warnings.WarningMessage]]:
    """Import ``name`` anew (its import-time warning shows again), then put the module the process
    already had back, in ``sys.modules`` and on its package: code imported earlier holds that
    one's globals, and a later test that patches ``conformance.models.transients.TABLE`` must
    patch the table those functions read."""
    before = sys.modules.pop(name, None)
    package, _, leaf = name.rpartition(".")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(name)
    finally:
        if before is not None:
            sys.modules[name] = before
            if package in sys.modules:
                setattr(sys.modules[package], leaf, before)
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


def test_a_fresh_import_leaves_the_process_its_modules() -> None:
    """The documented-imports test once left a second ``conformance.models.transients`` behind:
    test_zoo's patched table was then one no code read (CI failed on the worker that ran both)."""
    from conformance.models import lifetime, transients

    fresh, _ = _fresh_import("conformance.models.transients")
    assert fresh is not transients
    assert sys.modules["conformance.models.transients"] is transients
    assert importlib.import_module("conformance.models").transients is transients  # type: ignore[attr-defined]
    assert lifetime.graph.kernel_transient_bytes.__globals__ is transients.__dict__


@pytest.mark.parametrize(("old", "new", "names"), MOVED, ids=[m[0] for m in MOVED])
def test_a_moved_path_imports_the_same_objects_and_warns(old: str, new: str, names: list[str]) -> None:
    module, caught = _fresh_import(old)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert old in message and new in message and "removed in" in message
    target = importlib.import_module(new)
    for name in names:
        assert getattr(module, name) is getattr(target, name), name
    with pytest.raises(AttributeError, match=f"moved to {new}"):
        _ = module.no_such_name  # type: ignore[attr-defined]


def test_the_warning_points_at_the_users_import_line(tmp_path: Path) -> None:
    """Run as a vendor runs it (a fresh interpreter, Python's default filters showing the warning in
    ``__main__``): the line shown is the adapter's own ``import``, not the import machinery."""
    adapter = tmp_path / "old_adapter.py"
    adapter.write_text("from conformance.step import StepOutput, run_module_step\nprint(StepOutput.__module__)\n")
    proc = subprocess.run([sys.executable, str(adapter)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "conformance.api.step"
    expected = f"{adapter}:1: DeprecationWarning: conformance.step moved to conformance.api.step"
    assert expected in proc.stderr, proc.stderr


def _documented_imports() -> list[tuple[str, str, str]]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "examples").rglob("*.py"))]
    found = []
    for path in files:
        for module, names in _IMPORT.findall(path.read_text()):
            found.append((path.relative_to(ROOT).as_posix(), module, names))
    return found


def test_the_docs_show_imports() -> None:
    """The scan below reads something: the guide's imports are there to be checked."""
    modules = {module for _, module, _ in _documented_imports()}
    assert {"conformance.adapter", "conformance.case"} <= modules, modules


@pytest.mark.parametrize(("where", "module", "names"), _documented_imports())
def test_every_documented_import_works_without_a_warning(where: str, module: str, names: str) -> None:
    imported, caught = _fresh_import(module)
    assert not caught, f"{where} shows a deprecated path: {caught[0].message}"
    for name in (n.strip() for n in names.split(",")):
        assert hasattr(imported, name), f"{where}: {module} has no {name}"


def test_the_moved_paths_have_one_home_and_it_lists_what_this_test_holds() -> None:
    """The package top shows only the paths that stay: the old ones are rows of one table."""
    from conformance.compat import MOVED_PATHS

    assert MOVED_PATHS == {old: new for old, new, _ in MOVED}
    top = {p.stem for p in (ROOT / "conformance").glob("*.py")}
    assert not top & {old.rpartition(".")[2] for old in MOVED_PATHS}, "a moved path is a file again"


def test_the_moved_paths_end_at_their_announced_release() -> None:
    """The guide says they go in REMOVED_IN: once the project's version reaches it, this fails until
    conformance/compat.py's table (and this file's MOVED) are emptied."""
    from importlib.metadata import version

    from packaging.version import Version

    from conformance.compat import MOVED_PATHS
    from conformance.util.deprecation import REMOVED_IN

    current = Version(version("torch-conformance"))
    assert current < Version(REMOVED_IN) or not MOVED_PATHS, (
        f"version {current} has reached {REMOVED_IN}: remove the moved paths {sorted(MOVED_PATHS)}")
