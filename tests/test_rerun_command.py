"""Every printed rerun command reruns the pair as printed: a case registered by ``--cases FILE``, failing on a
planted backend, is rerun from the terminal's ``rerun:`` line, the record's ``repro`` (the report's REPRODUCE
box) and the repro script's ``RERUN``, each run as printed in a fresh process elsewhere."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BACKEND = "tests.planted_backends:LossLogBackend"

CASES = """
from conformance.api.case import Case, register, resolve

base = resolve("mlp-s-train")  # the built-in MLP's builder, under a user's own id
register(Case("user-mlp-train", base.kind, "user", base.seed, base.builder))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "CONFORMANCE_CASES": ""}  # nothing inherited: the command must carry its sources itself


def _as_printed(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run as printed; its ``conformance`` is this checkout's CLI."""
    words = shlex.split(command)
    assert words[:2] == ["conformance", "run"], command
    return subprocess.run([sys.executable, "-m", "conformance.cli", *words[1:]], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=_env())


def test_the_rerun_of_a_cases_file_case_reruns_it(tmp_path: Path) -> None:
    cases = tmp_path / "user" / "my_cases.py"
    cases.parent.mkdir()
    cases.write_text(CASES, encoding="utf-8")
    run_dir = tmp_path / "first"
    run_dir.mkdir()
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--cases", "../user/my_cases.py",
                           "--case", "user-mlp-train", "--backend", BACKEND, "--no-isolate", "--out", "out"],
                          cwd=run_dir, capture_output=True, text=True, timeout=600, env=_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the planted leak fails the pair
    terminal = re.findall(r"^\s*rerun: (.+)$", proc.stderr, re.MULTILINE)
    record = json.loads((run_dir / "out" / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "fail-residual", record["reason"]
    script = (run_dir / record["repro_file"]).resolve()  # relative to where the run ran
    rerun = re.search(r"^RERUN = (.+)$", script.read_text(), re.MULTILINE)
    assert rerun is not None
    printed = {"terminal": terminal[0] if terminal else "", "record": record["repro"],
               "script": ast.literal_eval(rerun.group(1))}
    for where, command in printed.items():
        assert f"--cases {cases.resolve()}" in command, (where, command)
    assert len(set(printed.values())) == 1, printed  # one command, wherever it is printed
    elsewhere = tmp_path / "elsewhere"  # pasted in another directory: the sources travel as absolute paths
    elsewhere.mkdir()
    again = _as_printed(printed["record"], elsewhere)
    assert "unknown case" not in again.stderr, again.stderr
    assert again.returncode == 1, again.stdout + again.stderr
    rerun_records = [json.loads(x) for x in
                     (elsewhere / "conformance-results" / "results.jsonl").read_text().splitlines()]
    assert [(r["case"], r["backend"], r["status"]) for r in rerun_records] == [
        ("user-mlp-train", "planted-loss-log", "fail-residual")]
    # the script reruns the check in the harness, with the case's sources: exit 1 while the leak is there
    ran = subprocess.run([sys.executable, str(script)], cwd=elsewhere, capture_output=True, text=True, timeout=600,
                         env=_env())
    assert ran.returncode == 1 and "user-mlp-train on planted-loss-log: fail-residual" in ran.stdout, \
        ran.stdout + ran.stderr
