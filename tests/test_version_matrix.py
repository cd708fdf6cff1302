"""The report shows verdicts side by side per torch version when runs on several releases are given."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.api.result import Result, append_result
from conformance.output.report import build_report
from conformance.output.version_matrix import Column, version_matrix


def _result(case: str, backend: str, status: str, torch: str) -> Result:
    return Result(case, backend, status, reason=f"{status} on {torch}", family="mlp", versions={"torch": torch})


def _results_dir(root: Path, name: str, results: list[Result]) -> Path:
    d = root / name
    d.mkdir()
    for r in results:
        append_result(d / "results.jsonl", r)
    return d


def test_one_column_per_backend_and_torch_version() -> None:
    results = [
        _result("mlp-s-infer", "eager", "pass", "2.8.0+cu128"), _result("mlp-s-infer", "eager", "pass", "2.13.0+cpu"),
        _result("loop-rnn-t3", "inductor", "xfail", "2.13.0+cpu"), _result("loop-rnn-t3", "inductor", "pass", "2.9.0"),
        _result("loop-rnn-t3", "eager", "pass", "2.13.0+cpu"),
    ]
    vm = version_matrix(results)
    assert vm is not None
    assert vm.columns == [Column("eager", "2.8.0+cu128"), Column("eager", "2.13.0+cpu"),
                          Column("inductor", "2.9.0"), Column("inductor", "2.13.0+cpu")]  # versions in release order
    assert vm.differing == {"loop-rnn-t3"}
    row = dict(vm.rows)["loop-rnn-t3"]
    assert row[Column("inductor", "2.9.0")].status == "pass" and Column("eager", "2.8.0+cu128") not in row


def test_no_view_for_a_single_torch_version() -> None:
    assert version_matrix([_result("a", "eager", "pass", "2.13.0"), _result("a", "inductor", "pass", "2.13.0")]) is None


def test_report_puts_two_releases_side_by_side(tmp_path: Path) -> None:
    old = _results_dir(tmp_path, "torch28", [_result("gen-dag-1", "inductor", "xpass", "2.8.0"),
                                             _result("mlp-s-infer", "inductor", "pass", "2.8.0")])
    new = _results_dir(tmp_path, "pinned", [_result("gen-dag-1", "inductor", "xfail", "2.13.0+cpu"),
                                            _result("mlp-s-infer", "inductor", "pass", "2.13.0+cpu")])
    page = build_report([old, new], tmp_path / "site").read_text()
    section = page.split('id="by-version"', 1)[1].split("</section>", 1)[0]
    assert "1 of 2 cases change verdict" in section
    cells = re.findall(r'<td class="cell st-(\S+)" data-backend="inductor" data-torch="([^"]+)"', section)
    assert cells == [("xpass", "2.8.0"), ("xfail", "2.13.0+cpu"), ("pass", "2.8.0"), ("pass", "2.13.0+cpu")]
    single = build_report([new], tmp_path / "single").read_text()
    assert 'id="by-version"' not in single
