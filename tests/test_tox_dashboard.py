"""A tox matrix ends in one dashboard: every env writes its results under one root, and the
``report`` env makes one report of all of them, recorded once per nightly in one run history.

tox itself is not run here (each env installs torch); its ini is read as tox reads it and the
report env's command is run as written, on two results directories of real verdicts (made in this process).
"""

from __future__ import annotations

import configparser
import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

from conformance.api.case import select_cases
from conformance.api.result import append_result
from conformance.backends.eager import EagerBackend
from conformance.run.engine import run_case

REPO = Path(__file__).resolve().parent.parent


def _tox() -> configparser.ConfigParser:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    return ini


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=env)


def test_every_matrix_env_writes_under_the_shared_root() -> None:
    ini = _tox()
    runs = [(section, line) for section in ini.sections() if section.startswith("testenv")
            for line in ini[section].get("commands", "").splitlines() if "conformance run" in line]
    assert len(runs) >= 8, runs
    for section, line in runs:
        assert "--out {[conformance]results}/{envname} --overwrite" in line, (section, line)
    report = ini["testenv:report"]["commands"]
    assert "conformance report {[conformance]results}" in report and "--history {[conformance]history}" in report
    assert "report" in ini["tox"]["envlist"]


def test_the_report_env_command_makes_one_dashboard_of_the_matrix(tmp_path: Path) -> None:
    root = tmp_path / "conformance"
    for env, case_id in (("eager", "mlp-s-infer"), ("torch215", "customop-early-late-s")):
        (case,) = select_cases([case_id])  # each env's verdict, made here: the subject is the report env
        (root / env).mkdir(parents=True)
        append_result(root / env / "results.jsonl", run_case(case, EagerBackend()))
    command = _tox()["testenv:report"]["commands"].strip()
    command = (command.replace("{[conformance]results}", str(root))
               .replace("{[conformance]report}", str(tmp_path / "site"))
               .replace("{[conformance]history}", str(tmp_path / "history.sqlite")))
    argv = shlex.split(command)
    assert argv[:2] == ["conformance", "report"]
    for _night in (1, 2):  # the same results reported twice are one run in the history
        proc = _cli(*argv[1:], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "site" / "index.html").read_text()
    assert "mlp-s-infer" in page and "customop-early-late-s" in page
    with sqlite3.connect(tmp_path / "history.sqlite") as db:
        tables = {name for (name,) in db.execute("select name from sqlite_master where type='table'")}
        assert "runs" in tables, tables
        assert db.execute("select count(*) from runs").fetchone() == (1,)


def test_a_root_with_no_results_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    proc = _cli("report", str(tmp_path / "empty"), "-o", str(tmp_path / "site"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "empty/results.jsonl: not found (nor in a directory one level down)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
