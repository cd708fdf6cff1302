"""Backends plug in through the `conformance.backends` entry-point group, broken ones are named."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.api.adapter import discover


def test_builtin_and_example_vendor_backends_are_discovered() -> None:
    registry = discover()
    assert {"eager", "inductor"} <= set(registry.backends)
    # installed from examples/vendor-backend by the README's test command
    assert "example-vendor" in registry.backends, registry.broken
    assert type(registry.backends["example-vendor"]).__module__ == "example_vendor"


def _fake_distribution(root: Path) -> None:
    """A real (if tiny) installed distribution whose entry points name broken plugins."""
    dist = root / "broken_vendor-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-vendor\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""\
        [conformance.backends]
        broken-import = broken_vendor.missing_module:Backend
        broken-methods = broken_vendor:NoCompile
        broken-capabilities = broken_vendor:BadCapabilities
        """))
    pkg = root / "broken_vendor"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""\
        from conformance.api.adapter import Backend

        class NoCompile:
            name = "broken-methods"
            capabilities = None

        class BadCapabilities(Backend):
            name = "broken-capabilities"
            capabilities = {"training": True}

            def compile(self, case, workload):
                raise NotImplementedError
        """))


def test_broken_plugins_are_named_and_the_rest_still_run(tmp_path: Path) -> None:
    _fake_distribution(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    listed = subprocess.run([sys.executable, "-m", "conformance.cli", "list", "backends"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    assert "broken-import" in out and "ModuleNotFoundError" in out
    assert "broken-methods" in out and "missing compile" in out
    assert "broken-capabilities" in out and "'capabilities' must be conformance.api.adapter.Capabilities" in out
    assert "eager" in out

    run = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--backend", "eager",
                          "--case", "mlp-s-infer", "--out", "out"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "plugin broken-import" in run.stderr  # reported, not fatal
    assert (tmp_path / "out" / "results.jsonl").read_text().count("\n") == 1

    chosen = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--backend", "broken-methods"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert chosen.returncode == 2 and "broken-methods" in chosen.stderr and "Traceback" not in chosen.stderr


def test_an_ad_hoc_adapter_is_found_in_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``module:Class`` imports like ``python -m``: the current directory goes on ``sys.path`` for a module
    found nowhere else, and a module failing on its own missing import is reported as that failure."""
    from conformance.api.adapter import BackendError, load_backend_class

    (tmp_path / "adhoc_adapter.py").write_text(
        "from conformance.backends.eager import EagerBackend\n\n\nclass B(EagerBackend):\n    name = 'adhoc'\n")
    (tmp_path / "needs_dep.py").write_text("import no_such_dependency_xyz  # noqa: F401\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load_backend_class("eager", "conformance.backends.eager:EagerBackend").name == "eager"
    assert str(tmp_path) not in sys.path  # an installed module: the current directory is left alone
    assert load_backend_class("adhoc", "adhoc_adapter:B").name == "adhoc"
    assert sys.path[0] == str(tmp_path)
    with pytest.raises(BackendError, match="no_such_dependency_xyz"):  # found: its own import failed
        load_backend_class("dep", "needs_dep:B")
    assert sys.path.count(str(tmp_path)) == 1
