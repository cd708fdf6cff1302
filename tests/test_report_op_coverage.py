"""The op sweep's coverage table in the HTML report, in a real headless Chromium (``test_report_layout``'s browser).

The table's results come from really running a few op cases on ``eager`` (and ``op-tanh-0-infer`` on the
planted-leak ``eager-leaky``, a real non-pass), plus records of the statuses a small eager run does not give
(an IREE ``fail-compile`` and an ``xfail``) written through the typed ``Result``.  The page must show what
``conformance coverage DIR`` prints, and its filters must narrow the rows as a vendor asks: by op name and
by verdict.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("expecttest", reason="the op sweep needs expecttest (pip install 'torch-conformance[ops]')")

from conformance.api.case import select_cases
from conformance.api.result import Result, append_result
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend
from conformance.output.coverage import op_coverage, op_markdown
from conformance.output.records import read_results
from conformance.output.report import build_page, build_report, op_left_out
from conformance.run.engine import run_case
from tests import test_report_layout as layout
from tests.planted import LeakyEagerBackend
from tests.test_report_layout import passing, write_run

browser, open_page = layout.browser, layout.open_page  # its fixtures: one Chromium for the module, a page opener

#: real op pairs on eager; new_empty's sample 0 is left out by the sweep (two eager runs differ), so the
#: table lists it with its reason
EAGER = ["op-abs-0-infer", "op-abs-0-train", "op-new_empty-1-infer", "op-tanh-0-infer"]
COMPILE_ERROR = "IREE compile failed: failed to legalize operation 'torch.aten.tanh' " + "x" * 200


def _synthetic() -> list[Result]:
    """Statuses a small eager run does not give, shaped as an IREE run's records."""
    torch_version = {"torch": torch.__version__}
    return [Result("op-abs-0-infer", "iree", Status.PASS, family="ops", raw_status="pass", versions=torch_version),
            Result("op-abs-0-train", "iree", Status.XFAIL, "expected: backward of abs not lowered", family="ops",
                   raw_status="fail-compile", expected="fail-compile", versions=torch_version),
            Result("op-tanh-0-infer", "iree", Status.FAIL_COMPILE, COMPILE_ERROR, family="ops",
                   raw_status="fail-compile", versions=torch_version)]


@pytest.fixture(scope="module")
def op_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("op-run")
    for case in select_cases(EAGER):
        append_result(out / "results.jsonl", run_case(case, EagerBackend()))
    (tanh,) = select_cases(["op-tanh-0-infer"])
    append_result(out / "results.jsonl", run_case(tanh, LeakyEagerBackend()))
    for r in _synthetic():
        append_result(out / "results.jsonl", r)
    return out


@pytest.fixture(scope="module")
def op_site(op_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_report([op_run], tmp_path_factory.mktemp("site") / "site", history=None)


def _rows(page: Any) -> list[str]:
    """The visible rows as ``op@backend``."""
    return [f"{r.get_attribute('data-op')}@{r.get_attribute('data-backend')}"
            for r in page.locator("#op-coverage-table tbody tr:visible").all()]


def test_the_real_run_gives_the_verdicts_the_table_is_tested_on(op_run: Path) -> None:
    results = {(r.case, r.backend): r for r in read_results(op_run / "results.jsonl")}
    assert all(results[(c, "eager")].status == Status.PASS for c in EAGER), {k: v.status for k, v in results.items()}
    assert results[("op-tanh-0-infer", "eager-leaky")].status.is_failure  # the planted leak is caught


def test_the_report_shows_what_conformance_coverage_prints(open_page: Any, op_run: Path, op_site: Path) -> None:
    """Each op x backend line, each step's verdict and short reason, as the Markdown table has them."""
    page = open_page(op_site)
    assert page.locator("#op-coverage h2").inner_text() == "Op coverage"
    results = read_results(op_run / "results.jsonl")
    table = op_coverage(results)
    assert table is not None
    markdown: dict[str, list[str]] = {}
    for line in op_markdown(table).splitlines():
        m = re.fullmatch(r"\| `(.+?)` \| (.+?) \| (.+?) \| (.+?) \|", line)
        if m:
            markdown[f"{m[1]}@{m[2]}"] = [m[3], m[4]]
    shown: dict[str, list[str]] = {}
    for row in page.locator("#op-coverage-table tbody tr").all():
        cells = []
        for td in row.locator("td.op-step").all():
            verdict, reason = td.get_attribute("data-verdict"), td.locator(".op-reason")
            cells.append("-" if verdict is None else f"{verdict}: {reason.inner_text()}" if reason.count()
                         else verdict)
        shown[f"{row.get_attribute('data-op')}@{row.get_attribute('data-backend')}"] = cells
    assert shown == markdown
    assert list(shown) == ["abs@eager", "abs@iree", "new_empty@eager", "tanh@eager", "tanh@iree", "tanh@eager-leaky"]
    assert shown["abs@iree"] == ["pass", "xfail: expected: backward of abs not lowered"]
    assert shown["tanh@iree"][0].startswith("fail-compile: IREE compile failed") and shown["tanh@iree"][0].endswith("…")
    assert shown["new_empty@eager"][1] == "-"  # an inference-only op
    assert page.inner_text("#op-visible-count") == "6 of 6 rows shown"
    left_out = page.locator("#op-left-out")  # what the sweep leaves out of these ops, with the reason
    left_out.locator("summary").click()
    assert "two eager runs" in left_out.locator('tr[data-label="op-new_empty-0"]').inner_text()
    assert page.errors == []


def test_the_filter_narrows_rows_by_name_and_verdict(open_page: Any, op_site: Path) -> None:
    page = open_page(op_site)
    name, verdict, count = page.locator("#op-filter-name"), page.locator("#op-filter-verdict"), "#op-visible-count"
    assert page.locator('label[for="op-filter-name"]').count() == 1  # labelled controls
    assert page.locator('label[for="op-filter-verdict"]').count() == 1
    name.fill("TA")  # a substring, any case
    assert _rows(page) == ["tanh@eager", "tanh@iree", "tanh@eager-leaky"]
    assert page.inner_text(count) == "3 of 6 rows shown"
    name.fill("abs")
    assert _rows(page) == ["abs@eager", "abs@iree"]
    name.fill("")
    verdict.select_option("not-pass")
    assert _rows(page) == ["abs@iree", "tanh@iree", "tanh@eager-leaky"]
    for row in page.locator("#op-coverage-table tbody tr:visible").all():
        assert row.get_attribute("data-pass") == "false"
        assert any(s != "pass" for s in (row.get_attribute("data-statuses") or "").split())
    assert page.inner_text(count) == "3 of 6 rows shown"
    verdict.select_option("fail-compile")
    assert _rows(page) == ["tanh@iree"]
    verdict.select_option("pass")  # a line with a passing sample, whatever its others
    assert _rows(page) == ["abs@eager", "abs@iree", "new_empty@eager", "tanh@eager"]
    name.fill("tanh")
    verdict.select_option("xfail")
    assert _rows(page) == [] and page.inner_text(count) == "0 of 6 rows shown"
    assert page.locator("#op-none-shown").is_visible()
    verdict.select_option("")
    page.select_option("#op-filter-backend", "iree")
    assert _rows(page) == ["tanh@iree"]
    assert page.errors == []


def test_a_verdict_opens_its_pairs_panel(open_page: Any, op_site: Path) -> None:
    page = open_page(op_site)
    page.locator('#op-coverage-table tr[data-backend="iree"][data-op="tanh"] a[data-case="op-tanh-0-infer"]').click()
    assert page.get_attribute("#detail", "data-case") == "op-tanh-0-infer"
    assert page.get_attribute("#detail", "data-backend") == "iree"
    assert "failed to legalize" in page.inner_text("#detail-reason")
    assert page.errors == []


def test_a_report_without_op_pairs_has_no_op_table(open_page: Any, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [passing("mlp-s-infer", "eager")])
    page = open_page(build_report([run], tmp_path / "site", history=None))
    assert page.locator("#matrix td.cell").count() == 1
    assert page.locator("#op-coverage").count() == 0 and page.locator("#op-filter-name").count() == 0
    assert page.errors == []  # the page's script runs without the table


def test_left_out_is_not_listed_from_another_torch_release() -> None:
    """The sweep's left-out lines are this torch release's: results of another are not given them."""
    other = Result("op-abs-0-infer", "eager", Status.PASS, family="ops", versions={"torch": "1.0.0"})
    table = op_coverage([other])
    assert table is not None
    assert "from torch 1.0.0" in op_left_out(table) and table.left_out == []
    page = build_page([other], ["x"], None)
    assert page.ops is not None and "from torch 1.0.0" in page.op_left_out_why
