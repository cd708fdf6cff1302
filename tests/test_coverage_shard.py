"""`conformance coverage` on a shard's results: a step the run did not run is told apart from a step the sweep
does not have, and the table says how many of the sweep's ops (and modules) the run covered."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.api.case import select_cases
from conformance.api.result import Result, append_result
from conformance.api.verdict import Status
from conformance.cases import ops as op_sweep
from conformance.output.coverage import LEGEND, NO_SUCH, NOT_RUN, op_coverage, op_markdown

REPO = Path(__file__).resolve().parent.parent


def _coverage(results: list[Result], tmp_path: Path) -> str:
    out = tmp_path / "shard-1"
    out.mkdir()
    for r in results:
        append_result(out / "results.jsonl", r)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "coverage", str(out)], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_shards_op_table_tells_not_run_from_no_such_step(tmp_path: Path) -> None:
    screened = {s.key: s for s in op_sweep.whole_sweep()}
    trains, no_train = screened["abs"], screened["arange"]
    assert trains.trains and not no_train.trains and no_train.cases  # what the marks below rest on
    text = _coverage([Result("op-abs-0-infer", "eager", Status.PASS, family="ops"),
                      Result("op-arange-0-infer", "eager", Status.PASS, family="ops")], tmp_path)
    assert f"| `abs` | eager | pass | {NOT_RUN} |" in text, text
    assert f"| `arange` | eager | pass | {NO_SUCH} |" in text, text
    assert LEGEND in text
    whole = sum(1 for s in screened.values() if s.cases)
    assert f"2 of the {whole} ops of the float32 sweep run." in text, text


def test_a_shards_module_table_tells_not_run_from_no_such_step(tmp_path: Path) -> None:
    ids = {c.id for c in select_cases(["mod-*"])}
    lacking = sorted(i[4:-6] for i in ids if i.endswith("-infer") and i[:-6] + "-train" not in ids)
    assert lacking and "mod-ReLU-train" in ids, lacking
    text = _coverage([Result("mod-ReLU-infer", "eager", Status.PASS, family="modules"),
                      Result(f"mod-{lacking[0]}-infer", "eager", Status.PASS, family="modules")], tmp_path)
    assert f"| `ReLU` | pass / {NOT_RUN} |" in text, text
    assert f"| `{lacking[0]}` | pass / {NO_SUCH} |" in text, text
    modules = {re.sub(r"-(infer|train)$", "", i[4:]) for i in ids}
    assert f"2 of the sweep's {len(modules)} modules run." in text, text


def test_without_the_sweep_known_a_missing_step_keeps_the_plain_mark() -> None:
    table = op_coverage([Result("op-abs-0-infer", "eager", Status.PASS, family="ops")])
    assert table is not None
    text = op_markdown(table)
    assert f"| `abs` | eager | pass | {NO_SUCH} |" in text and NOT_RUN not in text and "1 ops run." in text


def test_screening_many_ops_says_so_on_stderr(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A run that names `op-*` first screens torch's op database (minutes, once per torch release): it says so,
    and how far it got; a few ops screened say nothing."""
    monkeypatch.setattr(op_sweep, "_SCREENED_HERE", set())
    keys = list(op_sweep._by_key())[: op_sweep._SAY_FROM + 10]
    op_sweep.sweep(keys[:5])
    assert "screening" not in capsys.readouterr().err
    op_sweep.sweep(keys)
    err = capsys.readouterr().err
    assert f"1 of {len(keys)} ops" in err and f"{len(keys)} of {len(keys)} ops" in err, err
    assert err.startswith("conformance: screening torch's op database for the op sweep (float32;"), err
