"""The nightly CI recipe (``examples/ci/nightly.yml``) runs as written: its own steps, read from the YAML
(not a copy of them), run here in order on a tiny selection: two shards of one op on eager, then the
merge job (merge, report, coverage tables, the history kept).  The artifact actions are played by a
directory (upload copies in, download copies out, as GitHub lays them out); the steps that install
packages or ask GitHub's API are named below and skipped, and every other step must run, so an edit
that breaks the recipe fails here."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="reading the workflow needs PyYAML")
pytest.importorskip("expecttest", reason="the op sweep needs expecttest (pip install 'torch-conformance[ops]')")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "nightly.yml"
#: run steps this test does not run, by name, with why (each must still be in the workflow)
NOT_HERE = {
    "Install torch and the harness": "installs packages: the test runs in the interpreter it was started with",
    "Install the harness": "installs packages, as above",
    "Fetch the last nightly's history": "asks GitHub's API for an earlier run: the history starts here",
}
#: the tiny selection: env values the test puts in place of the workflow's
LOCAL_ENV = {"CASES": "op-abs-*", "SHARDS": "2", "WORKERS": "0"}
_EXPR = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def _pinned_torch() -> str:
    pins = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    m = re.search(r"^torch==(\S+)", pins, re.M)
    assert m is not None, "constraints.txt pins no torch"
    return m[1]


def _substitute(text: str, context: Mapping[str, Mapping[str, str]]) -> str:
    """``${{ matrix.X }}`` / ``${{ env.X }}`` from ``context``; any other expression is one the test
    cannot evaluate (a recipe step it runs must not depend on it)."""

    def value(m: re.Match[str]) -> str:
        scope, _, name = m[1].partition(".")
        assert scope in context and name in context[scope], f"{m[0]}: the local run has no value for it"
        return context[scope][name]

    return _EXPR.sub(value, str(text))


def _runs_here(step: Mapping[str, Any]) -> bool:
    condition = str(step.get("if", "")).replace(" ", "")
    assert condition in ("", "${{!cancelled()}}", "${{always()}}"), f"unknown condition {condition!r}"
    return True  # nothing is cancelled here


def _upload(store: Path, cwd: Path, name: str, paths: str) -> None:
    """actions/upload-artifact: one path keeps its contents at the artifact's root; several keep their
    paths (from the workspace, their common root here)."""
    lines = [p.strip() for p in paths.splitlines() if p.strip()]
    target = store / name
    assert not target.exists(), f"artifact {name} uploaded twice"
    if len(lines) == 1:
        source = cwd / lines[0]
        assert source.exists(), f"artifact {name}: nothing at {lines[0]}"
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.mkdir(parents=True)
            shutil.copy2(source, target / source.name)
        return
    for line in lines:
        assert (cwd / line).exists(), f"artifact {name}: nothing at {line}"
        shutil.copytree(cwd / line, target / line)


def _download(store: Path, cwd: Path, pattern: str, path: str) -> None:
    """actions/download-artifact with ``pattern``: each artifact into ``path/<name>``."""
    names = sorted(n.name for n in store.iterdir() if fnmatch.fnmatch(n.name, pattern))
    assert names, f"no artifact matches {pattern}"
    for name in names:
        shutil.copytree(store / name, cwd / path / name)


def _run_job(job: Mapping[str, Any], context: dict[str, dict[str, str]], cwd: Path, store: Path,
             ran: list[str]) -> None:
    env = dict(context["env"])
    env.update({k: _substitute(v, context) for k, v in (job.get("env") or {}).items()})
    context = {**context, "env": env}
    shell_env = {**os.environ, **env, "PYTHONPATH": str(ROOT),
                 "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for step in job["steps"]:
        if not _runs_here(step):
            continue
        uses = str(step.get("uses", ""))
        inputs = {k: _substitute(v, context) for k, v in (step.get("with") or {}).items()}
        if uses.startswith(("actions/checkout@", "actions/setup-python@")):
            continue  # this checkout, this interpreter
        if uses.startswith("actions/upload-artifact@"):
            _upload(store, cwd, inputs["name"], inputs["path"])
        elif uses.startswith("actions/download-artifact@"):
            _download(store, cwd, inputs["pattern"], inputs["path"])
        elif uses:
            pytest.fail(f"step uses {uses}, which this test cannot play: teach it, or use a run step")
        elif step.get("name") in NOT_HERE:
            continue
        else:
            script = _substitute(step["run"], context)
            step_env = {**shell_env, **{k: _substitute(v, context) for k, v in (step.get("env") or {}).items()}}
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                                  env=step_env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"step {step.get('name')!r} exit {done.returncode}:\n{script}\n" \
                                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            ran.append(step["name"])


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def played(workflow: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """The workflow's sweep job for shards 1 and 2 of 2 on eager, then its merge job, in one workspace."""
    cwd, store = tmp_path_factory.mktemp("workspace"), tmp_path_factory.mktemp("artifacts")
    env = {k: str(v) for k, v in workflow["env"].items()} | LOCAL_ENV
    ran: list[str] = []
    for shard in ("1", "2"):
        matrix = {"shard": shard, "backend": "eager", "torch": _pinned_torch()}
        _run_job(workflow["jobs"]["sweep"], {"env": env, "matrix": matrix}, cwd, store, ran)
    _run_job(workflow["jobs"]["merge"], {"env": env, "matrix": {}}, cwd, store, ran)
    return cwd, store, ran


def test_the_matrix_spans_shards_backends_and_torch_releases(workflow: dict[str, Any]) -> None:
    matrix = workflow["jobs"]["sweep"]["strategy"]["matrix"]
    assert [str(s) for s in matrix["shard"]] == [str(i) for i in range(1, int(workflow["env"]["SHARDS"]) + 1)]
    assert {"eager", "inductor"} <= set(matrix["backend"]) and any(b.startswith("iree") for b in matrix["backend"])
    assert len(matrix["torch"]) >= 2 and _pinned_torch() in matrix["torch"]
    assert workflow["env"]["CASES"] == "op-*"
    assert workflow["jobs"]["merge"]["needs"] == ["sweep", "runtimes"]
    names = {s.get("name") for job in workflow["jobs"].values() for s in job["steps"]}
    assert set(NOT_HERE) <= names, "a skipped step is no longer in the workflow: drop it from NOT_HERE"


def test_the_vendor_runtimes_run_the_default_matrix_into_the_merge(workflow: dict[str, Any]) -> None:
    """OpenVINO and ONNX Runtime run the default matrix (their manifests classify it; the op sweep has none for
    them), on the sweep's torch releases, and their artifacts match the merge step's per-release pattern."""
    job = workflow["jobs"]["runtimes"]
    matrix = job["strategy"]["matrix"]
    assert set(matrix["backend"]) == {"openvino", "onnxrt"}
    assert matrix["torch"] == workflow["jobs"]["sweep"]["strategy"]["matrix"]["torch"]
    run = next(s["run"] for s in job["steps"] if s.get("name") == "Run the default matrix")
    assert "--case" not in run and '--backend "$BACKEND"' in run
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["name"].startswith("results-torch${{ matrix.torch }}-")
    install = next(s["run"] for s in job["steps"] if s.get("name", "").startswith("Install"))
    assert '".[$BACKEND]"' in install


def test_two_shards_then_the_merge_report_and_history(played: tuple[Path, Path, list[str]]) -> None:
    cwd, store, ran = played
    assert ran == ["Run the shard", "Run the shard", "Merge each torch release's shards",
                   "Report, coverage tables and history"]
    torch = _pinned_torch()
    shards = [store / f"results-torch{torch}-eager-{i}" / "results.jsonl" for i in (1, 2)]
    per_shard = [{json.loads(line)["case"] for line in p.read_text().splitlines()} for p in shards]
    assert all(per_shard) and not per_shard[0] & per_shard[1]  # each shard ran a part, none the same pair

    merged = cwd / "merged" / f"torch-{torch}" / "results.jsonl"
    records = [json.loads(line) for line in merged.read_text().splitlines()]
    assert {r["case"] for r in records} == per_shard[0] | per_shard[1] == {"op-abs-0-infer", "op-abs-0-train"}
    assert all(r["status"] == "pass" and r["backend"] == "eager" for r in records)

    kept = store / "conformance-report"
    assert (kept / "site" / "index.html").is_file() and (kept / "merged" / f"torch-{torch}" / "results.jsonl").is_file()
    coverage = (kept / "site" / f"op-coverage-torch-{torch}.md").read_text(encoding="utf-8")
    assert "| `abs` | eager | pass | pass |" in coverage

    history = store / "conformance-history" / "history.sqlite"
    with sqlite3.connect(history) as db:
        runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        kept_pairs = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    assert runs == 1 and kept_pairs == len(records)
