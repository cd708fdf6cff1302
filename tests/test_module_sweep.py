"""The module sweep: every ``torch.nn`` module is swept or left out with a reason, eager is exact on the
kernels with workspace of their own, and the coverage table reads the sweep's results."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch.nn as nn

from conformance.api.case import select_cases
from conformance.api.result import Result
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend
from conformance.cases.modules import LEFT_OUT, swept_classes
from conformance.output.coverage import coverage, markdown
from conformance.run.engine import run_case
from tests.planted import LeakyEagerBackend


def _module_classes() -> set[str]:
    return {name for name, obj in vars(nn).items()
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and not name.startswith("Lazy")}


def test_every_module_class_is_swept_or_left_out_with_a_reason() -> None:
    """A torch release that adds a module fails here until the sweep covers it (or says why not)."""
    unaccounted = _module_classes() - swept_classes() - set(LEFT_OUT)
    assert not unaccounted, f"torch.nn modules neither swept nor in LEFT_OUT: {sorted(unaccounted)}"
    assert not swept_classes() & set(LEFT_OUT), "a module is both swept and left out"
    assert all(reason.strip() for reason in LEFT_OUT.values())


def test_the_sweep_is_selected_by_id_not_by_default() -> None:
    assert not any(c.id.startswith("mod-") for c in select_cases([]))
    sweep = select_cases(["mod-*"])
    assert len(sweep) > 200 and all(c.family == "modules" for c in sweep)
    assert {c.kind for c in sweep} == {"inference", "train_step"}


#: kernels with workspace of their own (the transient table's sweep entries), one case each
WORKSPACE_CASES = ["mod-LSTM-train", "mod-EmbeddingBag-train", "mod-EmbeddingBag-infer", "mod-ConvTranspose2d-train",
                   "mod-MSELoss-train", "mod-BCEWithLogitsLoss-infer", "mod-Upsample-bicubic-infer",
                   "mod-Upsample-nearest-train", "mod-Fold-infer", "mod-Unfold-train", "mod-MultiLabelMarginLoss-train",
                   "mod-RReLU-infer"]


@pytest.mark.parametrize("case_id", WORKSPACE_CASES)
def test_eager_is_exact_on_kernels_with_their_own_workspace(case_id: str) -> None:
    (case,) = select_cases([case_id])
    result = run_case(case, EagerBackend())
    assert result.status == Status.PASS, f"{case_id}: {result.status}: {result.reason}"
    memory = result.memory
    assert memory is not None and memory.measured_peak_bytes == memory.model_peak_bytes


def test_a_late_release_in_a_swept_module_is_caught() -> None:
    """The sweep's verdicts can fail: eager keeping one value past its last use fails the LSTM step."""
    (case,) = select_cases(["mod-LSTM-train"])
    result = run_case(case, LeakyEagerBackend())
    assert result.status.is_failure, result.reason


def _result(case: str, backend: str, status: Status) -> Result:
    return Result(case, backend, status, family="modules", kind="inference")


def test_the_coverage_table_has_one_row_per_module_and_counts_what_is_as_expected() -> None:
    table = coverage([_result("mod-LSTM-infer", "eager", Status.PASS), _result("mod-LSTM-train", "eager", Status.PASS),
                      _result("mod-GRU-2layer-infer", "eager", Status.FAIL_PEAK),
                      _result("mod-LSTM-infer", "inductor", Status.PASS), _result("mlp-s-infer", "eager", Status.PASS)])
    assert table is not None
    assert [r.module for r in table.rows] == ["GRU-2layer", "LSTM"]
    assert table.summary("eager") == (1, 2) and table.summary("inductor") == (1, 1)
    text = markdown(table)
    assert "| `GRU-2layer` | fail-peak / - | - / - |" in text
    assert "| `LSTM` | pass / pass | pass / - |" in text
    assert coverage([_result("mlp-s-infer", "eager", Status.PASS)]) is None


def test_conformance_coverage_prints_the_table_and_names_bad_input(tmp_path: Path) -> None:
    lines = [_result("mod-ReLU-infer", "eager", Status.PASS).to_json(), _result("mod-ReLU-train", "eager",
                                                                                  Status.FAIL_PEAK).to_json()]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    cmd = [sys.executable, "-m", "conformance.cli", "coverage"]
    done = subprocess.run([*cmd, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| `ReLU` | pass / fail-peak |" in done.stdout and "0 of 1 modules" in done.stdout
    assert "warning" in done.stderr and "results.jsonl:3: not JSON" in done.stderr
    missing = subprocess.run([*cmd, str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "not found" in missing.stderr


def test_the_report_shows_the_coverage_table_only_for_a_sweep(tmp_path: Path) -> None:
    from conformance.output.report import build_page, render

    sweep = render(build_page([_result("mod-ReLU-infer", "eager", Status.FAIL_PEAK)], [str(tmp_path)], None))
    assert 'id="coverage-table"' in sweep and 'data-module="ReLU"' in sweep and "0 of 1 modules" in sweep
    plain = render(build_page([Result("mlp-s-infer", "eager", Status.PASS, family="mlp")], [str(tmp_path)], None))
    assert 'id="coverage-table"' not in plain
