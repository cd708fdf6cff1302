"""The HTML report, opened in a real headless Chromium from a file:// URL.

The results behind it come from really running the harness: ``mlp-s-infer`` and
``customop-early-late-s`` on ``eager``, and ``mlp-s-infer`` on a planted-fault eager
backend whose node hook keeps the step's output alive after the step (a leak the
harness must report as ``fail-residual``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conformance import cases as _builtin_cases  # noqa: F401  (registers the built-in cases)
from conformance.api.adapter import Capabilities
from conformance.api.case import select_cases
from conformance.api.result import MemoryFigures, ModelPoint, Result, TimelinePoint, append_result
from conformance.backends.eager import EagerBackend
from conformance.output import history
from conformance.output.records import read_results
from conformance.output.report import build_report, measured_points, model_points, timeline_data
from conformance.run.engine import run_case

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync",
]


def find_chromium() -> str | None:
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


_KEPT: dict[str, Any] = {}


def keep_output(label: str, value: Any) -> None:
    """Planted fault: hold the last layer's output past the end of every step."""
    if label == "addmm_2":
        _KEPT["value"] = value


class LeakyEager(EagerBackend):
    name = "leaky-eager"
    node_hook = staticmethod(keep_output)
    capabilities = Capabilities(exact_memory=True, custom_ops=False)  # so the custom-op case is a skip


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("results")
    runs = [(c, EagerBackend()) for c in select_cases(["mlp-s-infer", "customop-early-late-s"])]
    runs.extend((c, LeakyEager()) for c in select_cases(["mlp-s-infer", "customop-early-late-s"]))
    for case, backend in runs:
        append_result(out / "results.jsonl", run_case(case, backend))
    _KEPT.clear()
    return out


@pytest.fixture(scope="module")
def results(results_dir: Path) -> dict[tuple[str, str], Result]:
    return {(r.case, r.backend): r for r in read_results(results_dir / "results.jsonl")}


def test_records_round_trip_byte_for_byte_through_the_typed_result(results_dir: Path) -> None:
    """What ``results.jsonl`` holds reads back typed (memory figures included) and writes back unchanged."""
    lines = (results_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == 4
    for line in lines:
        result = Result.from_json(json.loads(line))
        assert result.status == "skip" or isinstance(result.memory, MemoryFigures), line[:200]
        assert json.dumps(result.to_json()) == line
        if result.memory is not None:  # timeline entries read back as typed points, written back as pairs
            memory = result.memory
            assert memory.timeline and all(isinstance(p, TimelinePoint) for p in memory.timeline)
            assert all(isinstance(p, ModelPoint) and isinstance(p.event, str) for p in memory.model_timeline)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    exe = find_chromium()
    if exe is None:
        pytest.skip("no chromium binary (apt-get install chromium): the report's browser tests need one")
    from playwright.sync_api import sync_playwright  # a test dependency: fails loudly when missing

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page that refuses any non-file request, and records console errors."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = context.new_page()
    pg.requested = []
    pg.errors = []

    def guard(route: Any) -> None:
        pg.requested.append(route.request.url)
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            route.abort()

    pg.route("**/*", guard)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    yield pg
    context.close()


def test_the_network_guard_sees_requests(page: Any) -> None:
    """The no-network assertions below can fail: a page that fetches is caught."""
    page.set_content('<img src="http://198.51.100.7/x.png">')
    page.wait_for_timeout(200)
    assert any(u.startswith("http://198.51.100.7") for u in page.requested)


def test_the_planted_leak_is_what_the_report_shows(results: dict[tuple[str, str], Result]) -> None:
    """The data is real: the clean backend passes, the leaky one fails on residual."""
    assert results[("mlp-s-infer", "eager")].status == "pass"
    assert results[("customop-early-late-s", "eager")].status == "pass"
    leaky = results[("mlp-s-infer", "leaky-eager")]
    assert leaky.status == "fail-residual", leaky.reason
    assert leaky.memory.measured_residual_bytes > leaky.memory.model_residual_bytes
    assert results[("customop-early-late-s", "leaky-eager")].status == "skip"


def test_failing_cell_opens_its_details(
    page: Any, results_dir: Path, results: dict[tuple[str, str], Result], tmp_path: Path
) -> None:
    index = build_report([results_dir], tmp_path / "site", history=None)
    page.goto(index.as_uri())
    # counts per backend at the top
    assert page.inner_text('#counts tr[data-backend="eager"] td[data-status="pass"]') == "2"
    assert page.inner_text('#counts tr[data-backend="leaky-eager"] td[data-status="fail-residual"]') == "1"
    assert page.get_attribute('#counts tr[data-backend="leaky-eager"] td.rate', "data-rate") == "0.0000"

    # the top names the real leak as the one unexpected verdict
    assert page.get_attribute("#answer", "data-as-expected") == "false"
    listed = page.locator("#unexpected-list li")
    assert [(li.get_attribute("data-case"), li.get_attribute("data-backend")) for li in listed.all()] == [
        ("mlp-s-infer", "leaky-eager")]
    leaky = results[("mlp-s-infer", "leaky-eager")]
    mem = leaky.memory
    assert mem is not None
    cell = page.locator('td[data-case="mlp-s-infer"][data-backend="leaky-eager"]')
    assert cell.get_attribute("data-status") == "fail-residual"
    cell.click()
    detail = page.locator('#detail[data-case="mlp-s-infer"][data-backend="leaky-eager"]')
    detail.wait_for()
    assert page.inner_text("#detail-status") == "fail-residual"
    assert page.inner_text("#detail-reason") == leaky.reason
    # the panel opens on the check that decided: the residual, its excess the bytes the leak keeps
    assert page.get_attribute("#decision", "data-check") == "residual"
    excess = leaky.check("residual").excess_bytes
    assert excess and page.get_attribute('#decision-figures [data-field="excess"]', "data-value") == str(excess)

    # the chart (uPlot): both series drawn at the panel's width, the verdict's numbers beside it
    measured = page.locator('#detail .timeline-figures [data-series="measured"]')
    model = page.locator('#detail .timeline-figures [data-series="model"]')
    assert int(measured.get_attribute("data-peak")) == mem.measured_peak_bytes
    assert int(measured.get_attribute("data-residual")) == mem.measured_residual_bytes
    assert int(model.get_attribute("data-peak")) == mem.model_peak_bytes
    assert int(model.get_attribute("data-residual")) == mem.model_residual_bytes
    assert int(measured.get_attribute("data-points")) == len(mem.timeline)
    chart = page.evaluate("""() => {
        const u = window.conformanceCharts.timeline;
        const col = label => u.data[u.series.findIndex(s => s.label.startsWith(label))];
        const m = col('measured'), mo = col('model');
        const x = u.data[0];
        return {labels: u.series.map(s => s.label), measuredMax: Math.max(...m), measuredEnd: m[m.length - 1],
                modelMax: Math.max(...mo), modelEnd: mo[mo.length - 1], x0: x[0], x1: x[x.length - 1]};
    }""")
    # the drawn columns agree with the verdict's figures: the measured line reaches the peak and ends at the
    # residual, the model's ends lower (its residual is smaller: the leak)
    assert chart["measuredMax"] == mem.measured_peak_bytes and chart["modelMax"] == mem.model_peak_bytes, chart
    assert chart["measuredEnd"] == mem.measured_residual_bytes and chart["modelEnd"] == mem.model_residual_bytes
    assert chart["measuredEnd"] > chart["modelEnd"]
    assert (chart["x0"], chart["x1"]) == (0, 1)

    for field in ("model_peak_bytes", "measured_peak_bytes", "model_residual_bytes", "measured_residual_bytes"):
        assert int(page.get_attribute(f'#detail [data-field="{field}"]', "data-value")) == getattr(mem, field)
    assert float(page.get_attribute('#detail [data-field="max_abs_err"]', "data-value")) == pytest.approx(
        leaky.parity["max_abs_err"], rel=1e-12)

    blamed = page.locator("#detail #blamed [data-producer]")
    assert blamed.count() == len(mem.blamed) >= 1
    assert blamed.first.get_attribute("data-producer") == mem.blamed[0]["producer"] == "addmm_2"
    assert int(blamed.first.get_attribute("data-bytes")) == mem.measured_residual_bytes
    assert page.inner_text("#detail #repro") == leaky.repro
    assert leaky.repro == "conformance run --case mlp-s-infer --backend leaky-eager"
    assert torch.__version__ in page.inner_text("#detail #versions")

    assert all(u.startswith("file://") for u in page.requested), page.requested
    assert page.errors == []


def test_a_skipped_cell_has_no_chart_but_its_reason(
    page: Any, results_dir: Path, results: dict[tuple[str, str], Result], tmp_path: Path
) -> None:
    page.goto(build_report([results_dir], tmp_path / "site", history=None).as_uri())
    assert page.inner_text('#counts tr[data-backend="leaky-eager"] td[data-status="skip"]') == "1"
    page.click('td[data-case="customop-early-late-s"][data-backend="leaky-eager"]')
    page.locator('#detail[data-case="customop-early-late-s"][data-status="skip"]').wait_for()
    assert page.locator("#detail #timeline-chart").count() == 0
    assert page.locator("#detail #no-timeline").count() == 1
    assert page.inner_text("#detail-reason") == results[("customop-early-late-s", "leaky-eager")].reason
    assert "custom_ops" in page.inner_text("#detail-reason")
    page.click('#detail [data-action="close"]')
    assert page.get_attribute("#detail", "data-case") is None
    assert page.errors == []


def test_filters(page: Any, results_dir: Path, tmp_path: Path) -> None:
    page.goto(build_report([results_dir], tmp_path / "site", history=None).as_uri())
    rows = page.locator("#matrix tbody tr:visible")
    assert rows.count() == 2
    page.select_option("#filter-status", "fail-residual")
    assert [r.get_attribute("data-case") for r in rows.all()] == ["mlp-s-infer"]
    page.select_option("#filter-status", "skip")
    assert [r.get_attribute("data-case") for r in rows.all()] == ["customop-early-late-s"]
    page.select_option("#filter-status", "failing")
    assert rows.count() == 1
    page.select_option("#filter-status", "")
    page.select_option("#filter-family", "customop")
    assert [r.get_attribute("data-case") for r in rows.all()] == ["customop-early-late-s"]
    page.select_option("#filter-family", "")
    page.select_option("#filter-backend", "eager")
    assert page.locator('#matrix [data-backend="leaky-eager"]:visible').count() == 0
    assert page.locator('#matrix td[data-backend="eager"]:visible').count() == 2
    assert page.locator('#matrix td.cell:visible').count() == 2
    page.select_option("#filter-status", "fail-residual")  # no failing eager cell: nothing left
    assert rows.count() == 0
    assert page.inner_text("#visible-count") == "0 of 2 cases shown"


def test_history_trends_and_changes(page: Any, results_dir: Path, tmp_path: Path) -> None:
    """An earlier night where the leaky backend still passed with a smaller peak, then tonight's real run."""
    db = tmp_path / "h.sqlite"
    tonight = read_results(results_dir / "results.jsonl")
    earlier = []
    for r in tonight:
        r = dataclasses.replace(r, memory=dataclasses.replace(r.memory) if r.memory else None)
        if (r.case, r.backend) == ("mlp-s-infer", "leaky-eager"):
            r.status, r.reason = "pass", ""
            r.memory.measured_peak_bytes = int(r.memory.measured_peak_bytes / 1.5)
        earlier.append(r)
    history.record_run(db, earlier, started_at="2026-01-01T00:00:00+00:00")

    index = build_report([results_dir], tmp_path / "site", history=db)
    build_report([results_dir], tmp_path / "site", history=db)  # rebuilding does not add a run
    assert len(history.runs(db)) == 2
    page.goto(index.as_uri() + "#" + "mlp-s-infer%40leaky-eager")
    assert page.locator('#new-failures li[data-case="mlp-s-infer"][data-backend="leaky-eager"]').count() == 1
    assert page.locator("#fixes li[data-case]").count() == 0
    reg = page.locator('#memory-regressions li[data-case="mlp-s-infer"]')
    assert float(reg.get_attribute("data-growth")) == pytest.approx(0.5, abs=0.01)
    rates = page.evaluate("""() => { const u = window.conformanceCharts.passRate;
        return u.data[u.series.findIndex(s => s.label === 'leaky-eager')]; }""")
    assert rates == [1.0, 0.0]
    # the leaky pair's pass -> fail-residual is a regression of the second run
    assert page.evaluate("() => window.conformanceCharts.flips.data[1]") == [0, 1]  # regressions per run
    # opened from the URL fragment; its peak trend over both runs, the regression marked
    page.locator('#detail[data-backend="leaky-eager"]').wait_for()
    peaks = page.evaluate("() => window.conformanceCharts.pairTrend.data[1]")
    assert page.locator("#detail .trend-status.flip-regression").count() == 1
    mem = {(r.case, r.backend): r.memory for r in tonight}[("mlp-s-infer", "leaky-eager")]
    assert mem is not None and mem.measured_peak_bytes is not None
    assert peaks == [int(mem.measured_peak_bytes / 1.5), mem.measured_peak_bytes]
    assert page.errors == []


def test_failures_grouped_by_cause(page: Any, results_dir: Path, tmp_path: Path) -> None:
    """Tonight's leaky-eager failure, its cause first seen tonight; then a later night where a planted second
    cause is new and the first is not: the new one is on top, the known one says when it was first seen."""
    from conformance.checks.manifest import Manifest, apply

    tonight = [apply(r, Manifest(r.backend)) for r in read_results(results_dir / "results.jsonl")]
    failing = [r for r in tonight if r.cause]
    assert [(r.case, r.backend) for r in failing] == [("mlp-s-infer", "leaky-eager")]
    assert failing[0].cause.startswith("residual: still alive after the step: ")
    night1 = tmp_path / "night1"
    night1.mkdir()
    for r in tonight:
        append_result(night1 / "results.jsonl", r)
    db = tmp_path / "h.sqlite"
    build_report([night1], tmp_path / "site1", history=db)
    night2 = tmp_path / "night2"
    night2.mkdir()
    planted = dataclasses.replace(failing[0], case="mlp-m-infer", cause="residual: still alive after the step: mm",
                                  cause_parts=["residual: still alive after the step: mm"],
                                  new_cause_parts=["residual: still alive after the step: mm"], repro_file="")
    for r in [*tonight, planted]:
        append_result(night2 / "results.jsonl", r)
    index = build_report([night2], tmp_path / "site2", history=db)
    page.goto(index.as_uri())
    rows = page.locator("#triage tr.cause-group")
    assert rows.count() == 2
    top, known = rows.nth(0), rows.nth(1)
    assert top.get_attribute("data-signature") == "residual: still alive after the step: mm"
    assert top.get_attribute("data-new-this-run") == "true" and top.get_attribute("data-unknown") == "true"
    assert top.locator(".new-part").count() == 1
    assert known.get_attribute("data-signature") == failing[0].cause
    assert known.get_attribute("data-new-this-run") == "false"
    assert "run #1" in known.inner_text()
    repro = page.locator(f'#triage tr.cause-repro[data-signature="{failing[0].cause}"] td.smallest')  # its own line
    assert repro.get_attribute("data-case") == "mlp-s-infer"
    assert page.errors == [] and all(u.startswith("file://") for u in page.requested)


def test_step_progress_normalisation() -> None:
    assert model_points([["a", 0], ["b", 10], ["c", 4]], residual=0) == [(0.0, 0), (0.5, 10), (1.0, 4), (1.0, 0)]
    assert model_points([["a", 3]], residual=3) == [(0.0, 3)]
    assert measured_points([[100.0, 5], [150.0, 9], [300.0, 1]]) == [(0.0, 5), (0.25, 9), (1.0, 1)]
    assert measured_points([]) == []


def test_timeline_columns_hold_each_value_until_the_next_point() -> None:
    """uPlot draws one x axis: each series holds its value between its own points, and a value at the same x
    as the next (the model's last event, then its residual at progress 1) is kept, nudged left."""
    mem = MemoryFigures(model_timeline=[("a", 0), ("b", 10), ("c", 4)], model_residual_bytes=0,
                        timeline=[(100.0, 5), (150.0, 9), (300.0, 1)], model_peak_bytes=10, measured_peak_bytes=9,
                        measured_residual_bytes=1)
    data = timeline_data(mem)
    assert data is not None
    model, measured = data["series"]
    assert data["x"][0] == 0 and data["x"][-1] == 1
    assert dict(zip(data["x"], model["y"]))[0.25] == 0 and dict(zip(data["x"], measured["y"]))[0.25] == 9
    assert max(model["y"]) == 10 and model["y"][-1] == 0 and 4 in model["y"]  # the last event, then the residual
    assert (model["peak"], model["residual"], measured["peak"], measured["residual"]) == (10, 0, 9, 1)
    assert timeline_data(None) is None and timeline_data(MemoryFigures()) is None


def test_main_report_cli(results_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What ``conformance report RESULTS -o SITE --history PATH`` runs."""
    from conformance.output.report import main_report

    db = tmp_path / "h.sqlite"
    assert main_report([str(results_dir), "-o", str(tmp_path / "site"), "--history", str(db)]) == 0
    text = (tmp_path / "site" / "index.html").read_text()
    assert text.count('<td class="cell ') == 4
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the page must not load anything"
    assert len(history.runs(db)) == 1
    assert main_report([str(results_dir / "results.jsonl"), "-o", str(tmp_path / "s2"), "--no-history"]) == 0
    assert (tmp_path / "s2" / "index.html").exists()
    assert main_report([str(tmp_path / "nowhere"), "--out", str(tmp_path / "s3"), "--no-history"]) == 2
    assert "no results.jsonl" in capsys.readouterr().err
    (tmp_path / "bad.sqlite").write_text("not a database")
    assert main_report([str(results_dir), "-o", str(tmp_path / "s4"), "--history", str(tmp_path / "bad.sqlite")]) == 2
    assert "database" in capsys.readouterr().err


#: A nightly's matrix: every built-in backend and a vendor's, every built-in case.
WIDE_BACKENDS = ["eager", "inductor", "inductor-cuda", "cudagraph", "iree", "iree-boxed", "vendor-npu-graph"]


@pytest.fixture(scope="module")
def wide_results_dir(tmp_path_factory: pytest.TempPathFactory, results: dict[tuple[str, str], Result]) -> Path:
    """The real leaky verdict copied over a full case x backend matrix, each status present, long blame rows.

    The cases are the default set and the module sweep, named: ``all_cases()`` would also hold whatever
    other tests in this worker registered (the op sweep's 2,296 cases made this report eight times wider)."""
    from conformance.api.result import STATUSES

    out = tmp_path_factory.mktemp("wide")
    leaky = results[("mlp-s-infer", "leaky-eager")]
    blamed = [*leaky.memory.blamed, *({
        "producer": f"buf{i}_aten::_scaled_dot_product_flash_attention_backward.default",
        "op": "aten::_scaled_dot_product_flash_attention_backward", "shape": [8, 16, 2048, 128],
        "dtype": "torch.bfloat16", "bytes": 67108864,
        "model_death": "after aten::_scaled_dot_product_flash_attention_backward.default (event 4127)",
        "measured_death": "outlives the step (held by the compiled graph's output tuple)",
    } for i in range(3))]
    statuses = itertools.cycle(STATUSES)
    record = dataclasses.replace(leaky, memory=dataclasses.replace(leaky.memory, blamed=blamed)).to_json()
    lines = [json.dumps({**record, "case": case.id, "family": case.family, "backend": backend,
                         "status": next(statuses)}, default=str)  # one record made typed, its copies as JSON
             for case in sorted([*select_cases(), *select_cases(["mod-*"])], key=lambda c: (c.family, c.id))
             for backend in WIDE_BACKENDS]
    (out / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def wide_report(wide_results_dir: Path) -> str:
    """The wide matrix's report, built once for the widths that open it."""
    return build_report([wide_results_dir], wide_results_dir / "site", history=None).as_uri()


@pytest.mark.parametrize("width", [1280, pytest.param(1400, marks=pytest.mark.full(
    ci="tests/test_report.py::test_layout_holds_at_desktop_widths (1280 and 1920)")), 1920])
def test_layout_holds_at_desktop_widths(browser: Any, wide_report: str, tmp_path: Path, width: int) -> None:
    """No column of the matrix or of the open verdict's blame table is clipped or under the detail panel."""
    context = browser.new_context(viewport={"width": width, "height": 1000})
    try:
        page = context.new_page()
        page.goto(wide_report)
        last = WIDE_BACKENDS[-1]
        page.locator(f'#matrix tbody tr:first-child td.cell[data-backend="{last}"]').click()
        page.locator(f'#detail[data-backend="{last}"] #blamed').wait_for()
        page.screenshot(path=str(tmp_path / f"report-{width}.png"))  # the viewport: what a reader sees first
        boxes = page.evaluate("""() => {
            const box = el => { const r = el.getBoundingClientRect();
                                return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
            const inner = el => { const r = el.getBoundingClientRect(), s = getComputedStyle(el);
                return {left: r.left + parseFloat(s.borderLeftWidth), top: r.top,
                        right: r.right - parseFloat(s.borderRightWidth), bottom: r.bottom}; };
            const q = s => document.querySelector(s);
            const scrolls = el => ({scroll: el.scrollWidth, client: el.clientWidth});
            return {
                viewport: {width: innerWidth, scroll: document.documentElement.scrollWidth},
                matrixLast: box(q('#matrix thead th:last-child')), matrixCard: inner(q('#matrix-wrap')),
                matrixScroll: scrolls(q('#matrix-wrap')),
                countsLast: box(q('#counts tr:first-child th:last-child')), countsCard: inner(q('#answer')),
                blameLast: box(q('#detail #blamed .blame')), detail: inner(q('#detail')),
                detailScroll: scrolls(q('#detail')),
                wide: (() => { const d = q('#detail'); const R = d.getBoundingClientRect().right; const o = [];
                  d.querySelectorAll('*').forEach(e => { const r = e.getBoundingClientRect();
                    if (r.right > R && r.width) o.push([e.tagName, e.id, e.className, Math.round(r.right)]); });
                  return o.slice(0, 12); })(),
            };
        }""")
        detail = boxes["detail"]

        def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
            across = a["left"] < b["right"] and b["left"] < a["right"]
            return across and a["top"] < b["bottom"] and b["top"] < a["bottom"]

        assert boxes["viewport"]["scroll"] <= boxes["viewport"]["width"], boxes  # nothing off the page's right
        for table, card in (("matrixLast", "matrixCard"), ("countsLast", "countsCard")):
            cell = boxes[table]
            assert cell["right"] <= boxes[card]["right"] + 0.5, (table, boxes)  # inside its card
            assert cell["right"] <= width, (table, boxes)
            assert not overlaps(cell, detail), (table, boxes)  # not under the detail panel
        assert boxes["matrixScroll"]["scroll"] <= boxes["matrixScroll"]["client"], boxes  # not scrolled out of view
        assert detail["right"] <= width, boxes
        assert detail["left"] <= boxes["blameLast"]["left"] and boxes["blameLast"]["right"] <= detail["right"], boxes
        # no column scrolled away (the message names what sticks out)
        assert boxes["detailScroll"]["scroll"] <= boxes["detailScroll"]["client"], boxes["wide"]
    finally:
        context.close()


def test_pass_rate_is_the_verdict_modules(tmp_path: Path) -> None:
    """The report's rate cell shows conformance.api.verdict.rates: pass and xfail apart, skips not counted."""
    from collections import Counter

    from conformance.api.verdict import rates

    statuses = ["pass", "pass", "xfail", "skip", "fail-peak", "xpass"]
    for i, status in enumerate(statuses):
        append_result(tmp_path / "results.jsonl", Result(f"c{i}", "b", status, family="f"))  # type: ignore[arg-type]
    text = build_report([tmp_path], tmp_path / "site", history=None).read_text()
    want = rates(Counter(statuses))
    assert (want.judged, want.passed, want.xfailed) == (5, 2, 1)
    cell = re.search(r'<td class="rate" data-rate="([0-9.]+)" data-xfail-rate="([0-9.]+)">\s*([^<]*?)\s*</td>', text)
    assert cell is not None
    assert (float(cell[1]), float(cell[2])) == (round(want.pass_rate, 4), round(want.xfail_rate, 4)) == (0.4, 0.2)
    assert cell[3] == "40% pass · 20% xfail"
