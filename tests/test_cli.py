"""The `conformance` command as a user runs it: real subprocesses, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process that imports this checkout's code, wherever it runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=env)


def test_run_writes_results_and_junit(tmp_path: Path) -> None:
    proc = _run("run", "--backend", "eager", "--case", "mlp-s-*", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {(r["case"], r["backend"]) for r in records} == {("mlp-s-infer", "eager"), ("mlp-s-train", "eager")}
    for r in records:
        assert r["status"] == "pass"
        for key in ("reason", "seed", "parity", "memory", "timing", "versions"):
            assert key in r
        for key in ("model_peak_bytes", "measured_peak_bytes", "model_residual_bytes",
                    "measured_residual_bytes", "domain"):
            assert key in r["memory"]
        assert {"max_abs_err", "rmse_ratio", "compared"} <= set(r["parity"])
        assert {"compile_s", "run_s"} <= set(r["timing"])
    suite = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    assert sum(int(s.get("tests", 0)) for s in suite.iter("testsuite")) == 2
    assert "2 verdicts" in proc.stderr and "all as expected" in proc.stderr


def test_sharing_the_cores_leaves_a_users_choice_and_the_workers_alone() -> None:
    from types import SimpleNamespace

    from conformance.run.plugin import share_cores

    def controller(workers: object) -> Any:
        return SimpleNamespace(getoption=lambda name, default=None: workers)

    for workers, cores, expected in ((2, 2, "1"), (4, 16, "4"), (3, 8, "2"), (8, 2, "1")):
        environ: dict[str, str] = {}
        assert share_cores(controller(workers), environ, cores) == expected
        assert environ == {"OMP_NUM_THREADS": expected}
    for workers in (None, 0, 1, "auto"):  # no workers, or a count xdist has not resolved: nothing to share
        assert share_cores(controller(workers), environ := {}, 2) is None and environ == {}
    mine = {"OMP_NUM_THREADS": "3"}
    assert share_cores(controller(2), mine, 2) is None and mine == {"OMP_NUM_THREADS": "3"}
    worker = SimpleNamespace(getoption=lambda name, default=None: 2, workerinput={"workerid": "gw0"})
    assert share_cores(worker, environ := {}, 2) is None and environ == {}


def test_failing_backend_gives_nonzero_exit_and_keeps_results(tmp_path: Path) -> None:
    """Run from the repository (so ``tests.planted_backends`` imports), writing only under tmp_path."""
    out_dir = tmp_path / "out"
    proc = _run("run", "--backend", "tests.planted_backends:PerturbGradBackend", "--case", "mlp-s-train",
                "--out", str(out_dir), cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 1, proc.stderr
    (record,) = [json.loads(x) for x in (out_dir / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "fail-parity" and record["backend"] == "planted-grad"
    assert "fail-parity" in proc.stderr
    # the repro reruns exactly this ad hoc adapter, by its module:Class spec
    assert record["repro"] == ("conformance run --case mlp-s-train "
                               "--backend tests.planted_backends:PerturbGradBackend")
    assert f"rerun: {record['repro']}" in proc.stderr


def test_pytest_flags_pass_through(tmp_path: Path) -> None:
    proc = _run("run", "--backend", "eager", "--case", "mlp-s-*", "--no-isolate", "--out", "out", "-k", "infer",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(records) == 1 and "mlp-s-infer" in records[0]


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    """Through the console script once (its early worker started, then the refusal); every other refused
    input (an unknown case, an adapter that cannot load, ...) is ``tests/test_bad_inputs.py``'s, in-process."""
    proc = _run("run", "--backend", "no-such-backend", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "unknown backend 'no-such-backend'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_malformed_manifest_is_exit_2_and_earlier_results_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text('{"case": "earlier"}\n')
    bad = tmp_path / "badpkg"
    bad.mkdir()
    (bad / "__init__.py").write_text("")
    (bad / "b.py").write_text(
        "from pathlib import Path\nfrom conformance.backends.eager import EagerBackend\n"
        "class B(EagerBackend):\n    name = 'bad-manifest'\n"
        "    manifest_path = Path(__file__).with_name('m.toml')\n"
    )
    (bad / "m.toml").write_text("[[expect]]\ncase = 'x'\nstatus = 'fail-peak'\n")
    # --resume: the folder may be used (a run refusing it says so first, before any backend loads), so what
    # refuses the run is the manifest
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--backend", "badpkg.b:B", "--out", "out",
                           "--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert "m.toml" in proc.stderr and "reason" in proc.stderr and "Traceback" not in proc.stderr
    assert (out / "results.jsonl").read_text() == '{"case": "earlier"}\n'


def test_list_backends(tmp_path: Path) -> None:
    """(``list cases``, the same command with no option, is read in tests/test_cli_corrects.py: one run for
    every test of its listing.)"""
    proc = _run("list", "backends", cwd=tmp_path)
    assert proc.returncode == 0
    assert "eager" in proc.stdout and "inductor" in proc.stdout and "capabilities:" in proc.stdout


def test_plain_pytest_with_xdist_ships_results_from_workers(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "conformance.run.suite", "-p", "no:cacheprovider", "-q",
         "-n", "2", "--conformance-backend", "eager", "--conformance-case", "mlp-s-*",
         "--conformance-case", "mlp-m-infer", "--conformance-out", "out"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["case"] for r in records) == ["mlp-m-infer", "mlp-s-infer", "mlp-s-train"]
    assert all(r["status"] == "pass" for r in records)


def test_failing_generated_case_in_a_run_gets_a_standalone_repro(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "run", "--backend", "tests.planted:LeakyEagerBackend",
         "--case", "gen-dag-26", "--out", str(tmp_path / "out"), "--no-report"],
        cwd=repo, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 1, proc.stderr
    (record,) = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert record["status"] in ("fail-residual", "fail-peak")
    script = Path(record["repro_file"])
    assert script.exists() and script.parent == tmp_path / "out" / "repros"
    text = script.read_text()
    assert "import torch" in text and "conformance.run.engine" not in text


def test_reading_commands_and_refused_options_answer_without_loading_torch(tmp_path: Path) -> None:
    """``report``, ``merge``, ``diff``, ``triage`` and ``coverage`` read records, and a run refused for its
    options or its ``--out`` refuses before the cases load: none of them imports torch (seconds, every time
    a dashboard job or a typo calls the command)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text("")
    (tmp_path / "a-file").write_text("")
    probe = ("import sys\nfrom conformance.cli.main import main\ncode = main(sys.argv[1:])\n"
             "print('torch loaded' if 'torch' in sys.modules else 'torch not loaded', code)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for args in [("diff", "out", "out"), ("merge", "out", "-o", "merged"), ("triage", "out", "--no-history"),
                 ("coverage", "out"), ("report", "out", "-o", "report"),
                 ("run", "--backend", "eager", "--bogus-option"), ("run", "--backend", "eager", "--out", "a-file")]:
        proc = subprocess.run([sys.executable, "-c", probe, *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, env=env)
        assert proc.stdout.strip().splitlines()[-1].startswith("torch not loaded"), (args, proc.stdout, proc.stderr)
    # the check can fail: a command that selects cases loads torch
    proc = subprocess.run([sys.executable, "-c", probe, "list", "cases", "--case", "mlp-s-*"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.stdout.strip().splitlines()[-1] == "torch loaded 0", proc.stderr
