"""The report's layout in a real headless Chromium: the answer first, the pair panel, the charts, the history.

These tests are about layout and wording, so their records are small synthetic ``Result``s shaped like the
harness's own (a program check that decided a fail-peak with its contract and blamed buffers, an IREE
compile error in the notes, a passing parity with a large RMSE ratio); ``test_report.py`` holds the tests
on real runs.  One browser for the module.  Screenshots go to ``$CONFORMANCE_REPORT_SHOTS`` when it is set
(else the test's temporary directory); they are compared by structure (section order, bounding boxes),
never by pixels.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.api.result import MemoryFigures, Result, append_result
from conformance.api.verdict import Check, CheckName, Contract, Status
from conformance.output.report import build_report, error_excerpt, parity_why

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]

COMPILE_ERROR = (
    "CompileError: IREE compile of the forward graph failed: RuntimeError: JIT compilation failed. "
    "[source.mlir:19:12: error: failed to legalize operation 'torch.operator' that was explicitly marked illegal]")


def _notes_with_traceback() -> list[str]:
    frames = "".join(f'  File "/site-packages/torch/_dynamo/f{i}.py", line {i}, in f{i}\n    call_{i}()\n    ^^^^\n'
                     for i in range(30))
    return ["route: torch.compile (iree-turbine)", "…" + frames + "torch._dynamo.exc.BackendCompilerFailed: "
            "backend='compiler_fn' raised:\n" + COMPILE_ERROR + "\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal "
            "stack trace (please do this especially if you're reporting a bug to PyTorch)."]


BLAMED = [
    {"producer": f"fw:while_loop_body_graph_0_buf{i}", "op": "extern_kernels.addmm", "shape": [4, 32],
     "dtype": "float32", "bytes": 512, "finding": "late",
     "model_death": f"before fw:while_loop_body_graph_0#{i}:140 while_loop_body_graph_0_buf2 = empty_strided_cpu(())",
     "measured_death": f"after fw:line 183 [trip {i}] (buf1[0], buf1[1]) = while_loop_body_graph_0(while_loop_…",
     "held_by": "buf1", "explains_bytes": 1024}
    for i in range(3)
]

PARITY_OK_BIG_RATIO = {
    "ok": True, "max_abs_err": 0.0017, "max_rel_err": 0.0013, "rmse_ratio": 74503.68, "compared": ["output[0]"],
    "worst": "grad[p0]", "failures": [],
    "closest": {"name": "grad[p0]", "max_abs_err": 0.0017, "allowed": 0.0069, "noise_floor": 0.0069, "rmse": 1e-4,
                "eager_rmse": 1e-9, "scale": 1.3, "rel_err": 0.0013, "note": "", "margin": 0.25},
}


def program_fail(case: str, backend: str, status: str = "fail-peak", expected: str | None = None,
                 peak: int = 1049, residual: int = 0, mechanism: str = "while-loop-host-code") -> Result:
    """A fail-peak the generated-program check decided while the measured peak is under the model's."""
    contract = Contract("generated program's excess", 2186, 0, 0,
                        "generated program frees every storage at its last use: excess 2186 B, 0 B allowed", 4)
    checks = [Check(CheckName.PARITY, Status.PASS), Check(CheckName.RESIDUAL, Status.PASS),
              Check(CheckName.PROGRAM, Status.FAIL_PEAK, "generated program: excess 2186 B over 0 B allowed",
                    {"timeline": "follows"}, BLAMED, 2186, contract),
              Check(CheckName.PEAK, Status.PASS)]
    memory = MemoryFigures(
        domain="torch-cpu", check="program", contract=contract, call=4, model_source="generated program",
        model_peak_bytes=1560, measured_peak_bytes=peak, model_residual_bytes=0, measured_residual_bytes=residual,
        residual_per_step=[residual] * 3, user_model_peak_bytes=1560,
        timeline=[(0.0, 0), (10.0, 600), (20.0, peak), (30.0, 300), (40.0, residual)],
        model_timeline=[("a", 0), ("b", 800), ("c", 1560), ("d", 400)], blamed=BLAMED)
    return Result(case, backend, Status.parse(status), reason="expected cause (while-loop-host-code)" if expected
                  else "generated program: excess 2186 B over 0 B allowed", family="loop", raw_status="fail-peak",
                  expected=expected, parity=PARITY_OK_BIG_RATIO, memory=memory, checks=checks, excess_bytes=2186,
                  repro=f"conformance run --case {case} --backend {backend}", versions={"torch": "2.13.0"},
                  cause=f"program: {mechanism}", cause_parts=[f"program: {mechanism}"])


def compile_fail(case: str, status: str = "xfail", backend: str = "iree") -> Result:
    return Result(case, backend, Status.parse(status), reason="expected: IREE cannot legalize an opaque torch.operator",
                  family="gen-dag", raw_status="fail-compile", expected="fail-compile", notes=_notes_with_traceback(),
                  repro=f"conformance run --case {case} --backend {backend}", versions={"torch": "2.13.0"},
                  cause="fail-compile: opaque-custom-op", cause_parts=["fail-compile: opaque-custom-op"])


def passing(case: str, backend: str, peak: int = 1000, residual: int = 0) -> Result:
    memory = MemoryFigures(domain="torch-cpu", check="peak", model_source="received graphs", model_peak_bytes=peak,
                           measured_peak_bytes=peak, model_residual_bytes=residual, measured_residual_bytes=residual,
                           timeline=[(0.0, 0), (5.0, peak), (9.0, residual)], model_timeline=[("a", peak)])
    return Result(case, backend, Status.PASS, family="mlp", raw_status="pass", parity={"ok": True, "rmse_ratio": 1.0},
                  memory=memory, repro=f"conformance run --case {case} --backend {backend}",
                  versions={"torch": "2.13.0"})


def write_run(path: Path, results: list[Result], mtime: float | None = None) -> Path:
    path.mkdir(parents=True)
    for r in results:
        append_result(path / "results.jsonl", r)
    if mtime is not None:  # the history orders runs by when their results were written
        os.utime(path / "results.jsonl", (mtime, mtime))
    return path


def expected_run() -> list[Result]:
    """Every non-pass a manifest expects: xfails only."""
    return [passing("mlp-s-infer", "eager"), passing("mlp-s-infer", "inductor"),
            passing("loop-rnn-t3", "eager"), program_fail("loop-rnn-t3", "inductor", "xfail", "fail-peak"),
            passing("gen-dag-6311", "eager"), compile_fail("gen-dag-6311")]


def run_with_a_planted_failure() -> list[Result]:
    """The expected run, and one pair a manifest does not expect failing: what the top must name."""
    return [*expected_run(), program_fail("reg-loop-carried-t2", "inductor", mechanism="layout-copy")]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    exe = next((shutil.which(n) for n in ("/usr/bin/chromium", "chromium", "chromium-browser") if shutil.which(n)),
               None)
    if exe is None:
        pytest.skip("no chromium binary (apt-get install chromium): the report's browser tests need one")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    """Opens a report at a viewport; records page errors and refuses any request that is not a file."""
    contexts: list[Any] = []

    def go(index: Path, width: int = 1400, height: int = 1000, fragment: str = "") -> Any:
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
                   else (page.errors.append(route.request.url), route.abort()))
        page.goto(index.as_uri() + fragment)
        return page

    yield go
    for c in contexts:
        c.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("CONFORMANCE_REPORT_SHOTS") or tmp_path / "shots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def boxes(page: Any, *selectors: str) -> dict[str, dict[str, float]]:
    return page.evaluate("""sels => Object.fromEntries(sels.map(s => { const e = document.querySelector(s);
        if (!e) return [s, null]; const r = e.getBoundingClientRect();
        return [s, {top: r.top + scrollY, bottom: r.bottom + scrollY, left: r.left, right: r.right,
                    width: r.width, height: r.height}]; }))""", list(selectors))


# ------------------------------------------------------------------------------------------------ the top


def test_a_planted_unexpected_failure_is_named_at_the_top(open_page: Any, tmp_path: Path, shots: Path) -> None:
    index = build_report([write_run(tmp_path / "run", run_with_a_planted_failure())], tmp_path / "site", history=None)
    page = open_page(index)
    answer = page.locator("#answer")
    assert answer.get_attribute("data-as-expected") == "false"
    assert page.inner_text("#verdict-line").startswith("✘ Not as expected: 1 of 7 verdicts unexpected")
    listed = page.locator("#unexpected-list li.unexpected")
    assert [(li.get_attribute("data-case"), li.get_attribute("data-backend")) for li in listed.all()] == [
        ("reg-loop-carried-t2", "inductor")]
    assert listed.first.get_attribute("data-new") == "true"  # no manifest and no history knew it
    # the manifest's xfails are grouped apart, never "new"; the unexpected cause is
    assert page.locator("#cause-groups tr.cause-group").count() == 1
    assert page.get_attribute("#cause-groups tr.cause-group", "data-new-this-run") == "true"
    expected = page.locator("#expected-cause-groups tr.cause-group")
    assert expected.count() == 2
    assert {g.get_attribute("data-new-this-run") for g in expected.all()} == {"false"}
    # the structure: the answer, then the matrix within the first screen, then the rest
    b = boxes(page, "header", "#answer", "#matrix", "#history", "#triage")
    assert b["header"]["bottom"] <= b["#answer"]["top"] < b["#answer"]["bottom"] <= b["#matrix"]["top"]
    assert b["#matrix"]["top"] < 700, b
    assert b["#matrix"]["bottom"] <= b["#history"]["top"] < b["#triage"]["top"]
    page.screenshot(path=str(shots / "top.png"))
    page.locator("#matrix-wrap").screenshot(path=str(shots / "matrix.png"))
    # a click on the listed pair opens its panel
    listed.first.locator("a").click()
    page.locator('#detail[data-case="reg-loop-carried-t2"][data-backend="inductor"]').wait_for()
    assert page.errors == []


def test_an_all_expected_run_says_so(open_page: Any, tmp_path: Path) -> None:
    index = build_report([write_run(tmp_path / "run", expected_run())], tmp_path / "site", history=None)
    page = open_page(index)
    assert page.get_attribute("#answer", "data-as-expected") == "true"
    line = page.inner_text("#verdict-line")
    assert line.startswith("✔ As expected: all 6 verdicts match their expectation"), line
    assert "2 expected failure(s) (manifest xfail)" in line
    assert page.locator("#unexpected-list").count() == 0
    assert page.locator(".tag-new").count() == 0  # a manifest-expected xfail is never "new"
    assert page.locator("#no-unexpected-causes").count() == 1
    assert page.locator("#expected-cause-groups tr.cause-group").count() == 2
    assert page.errors == []


def test_an_interrupted_run_is_not_called_as_expected(open_page: Any, tmp_path: Path) -> None:
    index = build_report([write_run(tmp_path / "run", expected_run())], tmp_path / "site", history=None,
                         note="interrupted after 6 of 40 pairs")
    page = open_page(index)
    assert page.get_attribute("#answer", "data-as-expected") == "false"
    assert page.inner_text("#verdict-line").startswith("⚠ Incomplete: the 6 verdicts so far match their expectation")
    assert page.errors == []


def test_new_means_unknown_to_the_history_too(open_page: Any, tmp_path: Path) -> None:
    """The same unexpected failure on the next night is still unexpected, but no longer new."""
    db = tmp_path / "h.sqlite"
    build_report([write_run(tmp_path / "n1", run_with_a_planted_failure(), 1_700_000_000)], tmp_path / "s1",
                 history=db)
    night2 = [*run_with_a_planted_failure(), program_fail("reg-loop-carried-t8", "iree-boxed", mechanism="x-y")]
    page = open_page(build_report([write_run(tmp_path / "n2", night2, 1_700_086_400)], tmp_path / "s2", history=db))
    li = {(e.get_attribute("data-case"), e.get_attribute("data-backend")): e.get_attribute("data-new")
          for e in page.locator("#unexpected-list li").all()}
    assert li == {("reg-loop-carried-t2", "inductor"): "false", ("reg-loop-carried-t8", "iree-boxed"): "true"}
    assert page.errors == []


# ------------------------------------------------------------------------------------------------ the panel


@pytest.fixture
def failing_site(tmp_path: Path) -> Path:
    return build_report([write_run(tmp_path / "run", run_with_a_planted_failure())], tmp_path / "site", history=None)


def test_the_panel_starts_with_the_deciding_check(open_page: Any, failing_site: Path, shots: Path) -> None:
    page = open_page(failing_site, width=1280, fragment="#reg-loop-carried-t2@inductor")
    page.locator('#detail[data-case="reg-loop-carried-t2"]').wait_for()
    assert page.get_attribute("#decision", "data-check") == "program"
    assert page.inner_text("#decision-title").startswith("Deciding check: program")
    fig = {r.get_attribute("data-field"): r for r in page.locator("#decision-figures tr").all()}
    assert fig["excess"].get_attribute("data-value") == "2186"
    assert fig["measured"].get_attribute("data-value") == "2186"
    assert "1049 B (1.02 KiB) vs 1560 B (1.52 KiB)" in fig["peaks"].inner_text()  # measured under the model: said
    assert page.locator("#decision #blamed .blame").count() == 3
    assert page.inner_text("#decision #repro") == "conformance run --case reg-loop-carried-t2 --backend inductor"
    # order: the deciding check (with blame and repro), then the timeline, the tables, the checks
    order = page.evaluate("""() => ['#decision', '#blamed', '#repro', '#timeline-chart', '#memory-table',
        '#parity-table', '#checks', '#versions'].map(s => document.querySelector('#detail ' + s)
        .getBoundingClientRect().top)""")
    assert order == sorted(order), order
    assert page.locator('#checks [data-check="program"]').inner_text().endswith("(deciding)") or \
        "(deciding)" in page.locator('#checks [data-check="program"]').inner_text()
    page.screenshot(path=str(shots / "failing-panel.png"))
    assert page.errors == []


@pytest.mark.parametrize("width", [1280, 1920])
def test_panel_text_reads_at_the_panels_width(open_page: Any, failing_site: Path, width: int) -> None:
    """No cell of the panel is squeezed to a letter or two per line: each one with text is at least ~5
    characters wide, measured in its own font."""
    page = open_page(failing_site, width=width, fragment="#reg-loop-carried-t2@inductor")
    page.locator('#detail[data-case="reg-loop-carried-t2"]').wait_for()
    narrow = page.evaluate("""() => {
        const c = document.createElement('canvas').getContext('2d');
        const out = [];
        document.querySelectorAll('#detail td, #detail th, #detail dd, #detail dt, #detail .check-why').forEach(e => {
            if (!e.textContent.trim() || !e.getClientRects().length) return;
            const s = getComputedStyle(e);
            c.font = s.fontWeight + ' ' + s.fontSize + ' ' + s.fontFamily;
            const ch = c.measureText('0').width;
            const w = e.getBoundingClientRect().width - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
            if (w < 5 * ch) out.push([e.tagName, e.textContent.slice(0, 30), Math.round(w), Math.round(ch)]);
        });
        return out;
    }""")
    assert narrow == []
    d = page.evaluate("() => { const d = document.querySelector('#detail'); return [d.scrollWidth, d.clientWidth]; }")
    assert d[0] <= d[1], d  # nothing sticks out of the panel


def test_full_width_detail_view(open_page: Any, failing_site: Path) -> None:
    page = open_page(failing_site, width=1280, fragment="#reg-loop-carried-t2@inductor")
    narrow = boxes(page, "#detail")["#detail"]["width"]
    page.click('#detail [data-action="widen"]')
    page.locator('#detail[data-case="reg-loop-carried-t2"] #timeline-chart canvas').wait_for()
    b = boxes(page, "#detail", "#answer", "#matrix", "#detail #timeline-chart canvas")
    assert b["#detail"]["width"] > 0.9 * b["#answer"]["width"] > narrow
    assert b["#answer"]["bottom"] <= b["#detail"]["top"] < b["#matrix"]["top"]  # right under the answer
    assert b["#detail #timeline-chart canvas"]["width"] > 0.9 * b["#detail"]["width"] - 40  # redrawn at its width
    assert page.errors == []


def test_a_compile_failure_shows_the_compilers_error(open_page: Any, failing_site: Path) -> None:
    page = open_page(failing_site, fragment="#gen-dag-6311@iree")
    page.locator('#detail[data-case="gen-dag-6311"]').wait_for()
    error = page.locator("#detail #compile-error")
    assert error.is_visible()
    assert "failed to legalize operation 'torch.operator'" in error.inner_text()
    assert "Set TORCHDYNAMO_VERBOSE" not in error.inner_text() and 'File "' not in error.inner_text()
    b = boxes(page, "#detail #compile-error", "#detail #detail-reason")
    assert b["#detail #compile-error"]["top"] < b["#detail #detail-reason"]["top"]  # above the manifest's reason
    assert page.errors == []


def test_error_excerpt_is_the_tail_after_the_last_frame() -> None:
    text = error_excerpt(_notes_with_traceback())
    assert text.splitlines()[-1] == COMPILE_ERROR
    assert text.splitlines()[0].startswith("torch._dynamo.exc.BackendCompilerFailed")
    assert error_excerpt(["no traceback", "last words"]) == "no traceback\nlast words"


def test_the_decision_of_other_verdicts() -> None:
    """A parity failure decides by its worst tensor; a crash with no notes has no error to show but its
    status; a fail-run shows the traceback's last line; a pass is every check within its contract."""
    from conformance.output.report import decision

    worst = {"name": "grad[w]", "max_abs_err": 0.5, "allowed": 0.001}
    parity = Result("c", "b", Status.FAIL_PARITY, "grad[w] off", raw_status="fail-parity",
                    parity={"ok": False, "failures": [worst]},
                    checks=[Check(CheckName.PARITY, Status.FAIL_PARITY, "grad[w]: relative error 0.4")])
    d = decision(parity)
    assert (d.check, d.status, d.passed) == ("parity", "fail-parity", False)
    assert ("parity_worst", "worst tensor grad[w]", "max abs error 0.5, allowed 0.001", "") in d.figures
    crash = decision(Result("c", "b", Status.CRASH, "worker killed by signal SIGSEGV", raw_status="crash"))
    assert (crash.check, crash.status, crash.error, crash.passed) == ("", "crash", "", False)
    run = decision(Result("c", "b", Status.FAIL_RUN, "x", raw_status="fail-run", notes=[
        'Traceback (most recent call last):\n  File "a.py", line 1, in f\n    g()\n'
        "AttributeError: 'int' object has no attribute 'data'"]))
    assert run.error == "AttributeError: 'int' object has no attribute 'data'"
    ok = decision(passing("c", "b"))
    assert ok.passed and ok.check == "" and not ok.error


def test_parity_within_contract_with_a_large_rmse_ratio_says_why(open_page: Any, failing_site: Path) -> None:
    page = open_page(failing_site, width=1920, fragment="#reg-loop-carried-t2@inductor")
    why = page.locator("#detail #parity-why")
    assert why.is_visible()
    text = why.inner_text()
    assert "7.45e+04" in text and "noise floor 0.0069" in text and "24.6% of the 0.0069 allowed" in text
    assert parity_why({"ok": True, "rmse_ratio": 1.2}) == ""  # nothing to explain
    assert parity_why({"ok": False, "rmse_ratio": 1e5}) == ""  # a failure is explained by its check


# ------------------------------------------------------------------------------------------------ charts


def test_the_timeline_is_large_with_labelled_axes(open_page: Any, failing_site: Path) -> None:
    page = open_page(failing_site, width=1280, fragment="#reg-loop-carried-t2@inductor")
    page.locator("#detail #timeline-chart canvas").wait_for()
    b = boxes(page, "#detail", "#detail #timeline-chart canvas")
    canvas, panel = b["#detail #timeline-chart canvas"], b["#detail"]
    assert canvas["width"] >= panel["width"] - 40 and canvas["height"] >= 290, b  # the panel's width, ~300 px tall
    axes = page.evaluate("""() => window.conformanceCharts.timeline.axes.map(a =>
        ({label: a.label, tick: a.font[2], labelSize: a.labelFont[2]}))""")
    assert [a["label"] for a in axes] == ["step progress (0 = step start, 1 = step end)", "live bytes"]
    assert all(a["tick"] >= 11 and a["labelSize"] >= 11 for a in axes), axes
    assert page.errors == []


# ------------------------------------------------------------------------------------------------ history


def three_nights(tmp_path: Path) -> tuple[Path, Path]:
    """Night 1 all as expected; night 2 a regression (mlp-s-infer@inductor fails, its peak up); night 3 fixed,
    on a newer torch."""
    db = tmp_path / "h.sqlite"
    base = 1_700_000_000
    nights = [
        [*expected_run()],
        [passing("mlp-s-infer", "eager"), program_fail("mlp-s-infer", "inductor", peak=1400),
         *expected_run()[2:]],
        [dataclasses.replace(r, versions={"torch": "2.14.0"}) for r in
         [passing("mlp-s-infer", "eager"), passing("mlp-s-infer", "inductor", peak=1100), *expected_run()[2:]]],
    ]
    index = tmp_path
    for i, night in enumerate(nights):
        index = build_report([write_run(tmp_path / f"night{i}", night, base + i * 86400)], tmp_path / f"site{i}",
                             history=db)
    return index, db


def test_history_plots_after_three_runs(open_page: Any, tmp_path: Path, shots: Path) -> None:
    index, _ = three_nights(tmp_path)
    page = open_page(index, width=1400)
    for plot in ("#plot-pass-rate", "#plot-flips", "#plot-memory"):
        assert page.locator(f"{plot} canvas").count() == 1, plot
    charts = page.evaluate("""() => { const c = window.conformanceCharts;
        return {rateSeries: c.passRate.series.slice(1).map(s => s.label), runs: c.passRate.data[0].length,
                fixes: c.flips.data[2], regressions: c.flips.data[1], memorySeries: c.memory.series.length - 1,
                ticks: c.passRate.axes.map(a => a.font[2])}; }""")
    backends = [r.get_attribute("data-backend") for r in page.locator("#counts tr[data-backend]").all()]
    assert sorted(charts["rateSeries"]) == sorted(backends) == ["eager", "inductor", "iree"]
    assert charts["runs"] == 3
    assert charts["regressions"] == [0, 1, 0] and charts["fixes"] == [0, 0, 1]
    assert charts["memorySeries"] == 2  # mlp-s-infer@inductor's peak and residual: the only pair that moved
    assert min(charts["ticks"]) >= 11
    labels = page.evaluate("() => JSON.parse(document.getElementById('history-data').dataset.values).runs")
    assert "torch 2.13.0" in labels[0] and "torch" not in labels[1] and "torch 2.14.0" in labels[2]
    flips = {li.get_attribute("data-kind") for li in page.locator("#flip-list li").all()}
    assert flips == {"regression", "fix"}
    b = boxes(page, "#matrix", "#history")
    page.locator("#history").scroll_into_view_if_needed()
    page.locator("#history").screenshot(path=str(shots / "history-three-runs.png"))
    assert b["#matrix"]["bottom"] <= b["#history"]["top"]
    # the pair's own trend in its panel: three runs, the regression and the fix marked
    page.click('td.cell[data-case="mlp-s-infer"][data-backend="inductor"]')
    page.locator("#detail #pair-trend canvas").wait_for()
    assert page.evaluate("() => window.conformanceCharts.pairTrend.data[1]") == [1000, 1400, 1100]
    assert page.locator("#detail .trend-status.flip-regression").count() == 1
    assert page.locator("#detail .trend-status.flip-fix").count() == 1
    assert page.errors == []


def test_a_report_rebuilt_for_an_older_run_plots_up_to_that_run(open_page: Any, tmp_path: Path) -> None:
    _, db = three_nights(tmp_path)
    index = build_report([tmp_path / "night1"], tmp_path / "again", history=db)  # the regression night, again
    page = open_page(index)
    runs = page.evaluate("() => JSON.parse(document.getElementById('history-data').dataset.values).runs")
    assert len(runs) == 2 and runs[-1].startswith("#2 ")
    assert page.evaluate("() => window.conformanceCharts.flips.data[1]") == [0, 1]  # regressions; the fix came later
    assert page.errors == []


def test_one_run_so_far(open_page: Any, tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    index = build_report([write_run(tmp_path / "n1", expected_run())], tmp_path / "site", history=db)
    page = open_page(index, fragment="#mlp-s-infer@eager")
    assert page.locator("#one-run").is_visible()
    assert "One run so far" in page.inner_text("#one-run")
    assert page.locator("#history canvas").count() == 0  # no lone dot
    assert page.locator("#detail #pair-one-run").is_visible()
    assert page.errors == []


# ------------------------------------------------------------------------------------------------ five backends

FIVE = ["eager", "inductor", "iree", "iree-boxed", "example-vendor"]
#: a user case file loaded with --cases: its absolute path lengthens the repro command, as a real one does
USER_CASES = "/home/someone/projects/my-model-zoo/conformance_cases/my_cases_for_the_nightly.py"


#: an expected-cause note as the manifest writes one (:func:`conformance.checks.manifest._apply_cause`): long
EXPECTED_CAUSE = ("expected cause (while-loop-host-code: the loop body's outputs are assigned in host code after the "
                  "body returns, so each trip's buffers live until the next trip's assignment): inductor's "
                  "while_loop lowering runs the body as a host-side Python function whose carried tensors are "
                  "rebound only after the call returns (pytorch/pytorch#140000) [when torch>=2.12]")


def long_repro(case: str, backend: str) -> str:
    return f"conformance run --cases {USER_CASES} --case {case} --backend {backend} --steps 5"


def manifest_mismatch(case: str, backend: str) -> Result:
    """A program failure whose manifest entry expects another status: the record's reason, as the manifest
    writes it, restates the check's own sentence (:func:`conformance.checks.manifest.apply`)."""
    from conformance.checks.manifest import Expectation, Manifest, apply

    failed = program_fail(case, backend, mechanism="layout-copy")
    raw = dataclasses.replace(failed, status=Status.FAIL_PEAK, raw_status="", expected=None,
                              reason=failed.checks[2].reason, cause="", cause_parts=[])
    entry = Expectation(case, "fail-residual", "the adapter keeps its cache alive")
    return apply(raw, Manifest(backend, None, [entry]))


def five_backend_night(regression: bool = False, fixed: bool = False,
                       backends: list[str] | None = None) -> list[Result]:
    """Eight cases (two in the ``changing-shapes`` family, the longest id of the module sweep) on five
    backends: passes, expected compile and program failures, one unexpected program failure, one manifest
    mismatch; ``regression``: the night ``mlp-s-infer@inductor`` fails; ``fixed``: the night
    ``reg-loop-carried-t2@inductor`` passes."""
    cases = [("mlp-s-infer", "mlp"), ("adam-compiled-mlp-s-train", "mlp"),
             ("shape-batch-infer-dynamic", "changing-shapes"),
             ("shape-loop-batch", "changing-shapes"), ("loop-rnn-t3", "loop"), ("gen-dag-6311", "gen-dag"),
             ("reg-loop-carried-t2", "reg-loop-carried"), ("mod-Conv2d-GroupNorm-block-train", "modules")]
    out: list[Result] = []
    for case, family in cases:
        for backend in backends or FIVE:
            if case == "gen-dag-6311" and backend.startswith("iree"):
                r = compile_fail(case, backend=backend)
            elif case == "loop-rnn-t3" and backend in ("inductor", "iree-boxed"):
                r = dataclasses.replace(program_fail(case, backend, "xfail", "fail-peak"), reason=EXPECTED_CAUSE)
            elif case == "reg-loop-carried-t2" and backend == "inductor" and not fixed:
                r = program_fail(case, backend, mechanism="layout-copy")
            elif case == "shape-loop-batch" and backend == "example-vendor":
                r = manifest_mismatch(case, backend)
            elif case == "mlp-s-infer" and backend == "inductor" and regression:
                r = program_fail(case, backend, peak=1400)
            else:
                r = passing(case, backend)
            out.append(dataclasses.replace(r, family=family, repro=long_repro(case, backend)))
    return out


def five_backend_site(tmp_path: Path) -> Path:
    """Three nights in one history (the second a regression, the third its fix and one more): the report of
    the third, with its history plots."""
    db = tmp_path / "h5.sqlite"
    base = 1_700_000_000
    nights = [five_backend_night(), five_backend_night(regression=True), five_backend_night(fixed=True)]
    index = tmp_path
    for i, night in enumerate(nights):
        index = build_report([write_run(tmp_path / f"five{i}", night, base + i * 86400)], tmp_path / f"five-site{i}",
                             history=db)
    return index


@pytest.fixture(scope="module")
def five_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return five_backend_site(tmp_path_factory.mktemp("five"))


#: lines(el): how many lines el's text takes (its text boxes' vertical bands: boxes on one line overlap);
#: split(el): the words of el's text (a run of non-spaces, up to 40 characters) laid over two lines or more:
#: "changing-/shapes" broken at its hyphen is one; splitProse(el): the same, but a break right after a
#: hyphen in running text ("host-/side") or between CamelCase words ("Group/Norm") is how prose and ids wrap,
#: and only a break inside a word counts
MEASURE = """
window.__textRects = el => { const rects = []; const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) { const r = document.createRange(); r.selectNodeContents(n);
        rects.push(...Array.from(r.getClientRects()).filter(b => b.width > 0)); }
    return rects; };
window.__bands = rects => { const sorted = rects.slice().sort((a, b) => a.top - b.top); let bands = 0, bottom = -1e9;
    for (const b of sorted) {
        if (b.top >= bottom - 2) { bands += 1; bottom = b.bottom; } else bottom = Math.max(bottom, b.bottom); }
    return bands; };
window.__lines = el => window.__bands(window.__textRects(el));
window.__cuts = (el, prose) => { const out = []; const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        for (const m of n.textContent.matchAll(/\\S+/g)) {
            if (m[0].length > 40) continue;
            const top = i => { const r = document.createRange();
                r.setStart(n, m.index + i); r.setEnd(n, m.index + i + 1);
                const b = r.getClientRects()[0]; return b ? Math.round(b.top) : null; };
            for (let i = 1; i < m[0].length; i++) {
                const between = m[0][i - 1] === '-' || (/[a-z0-9]/.test(m[0][i - 1]) && /[A-Z]/.test(m[0][i]));
                if (top(i) !== top(i - 1) && !(prose && between)) { out.push(m[0]); break; }
            }
        } }
    return out; };
window.__split = el => window.__cuts(el, false);
window.__splitProse = el => window.__cuts(el, true);
true;  // an evaluated expression whose value is a function would be called
"""


def measure(page: Any, selector: str, what: str) -> list[Any]:
    """``what`` (lines or split) of every element ``selector`` matches, with its text."""
    page.evaluate(MEASURE)
    return page.evaluate(f"""s => Array.from(document.querySelectorAll(s))
        .filter(e => e.getClientRects().length && e.textContent.trim())
        .map(e => [e.textContent.trim().slice(0, 60), window.__{what}(e)])""", selector)


def test_a_changed_fragment_opens_its_pair(open_page: Any, five_site: Path) -> None:
    """#CASE@BACKEND typed or pasted on the open page (a hashchange, no reload) opens that pair."""
    page = open_page(five_site, width=1280)
    assert page.locator("#detail .placeholder").count() == 1
    for case, backend in (("shape-loop-batch", "example-vendor"), ("loop-rnn-t3", "iree-boxed")):
        page.evaluate("h => { location.hash = h; }", f"#{case}@{backend}")
        page.locator(f'#detail[data-case="{case}"][data-backend="{backend}"]').wait_for(timeout=5000)
        assert page.get_attribute(f'td.cell.selected[data-backend="{backend}"]', "data-case") == case
    page.go_back()  # the previous fragment: its pair again
    page.locator('#detail[data-case="shape-loop-batch"][data-backend="example-vendor"]').wait_for(timeout=5000)
    assert page.errors == []


@pytest.mark.parametrize("width", [1280, 1920])
def test_five_backends_panel_shows_whole_sentences(open_page: Any, five_site: Path, width: int) -> None:
    """The repro command is all in view, the check's sentence is said once, and an expected cause's note is
    all there, wrapped between words, not in a box of its own that scrolls."""
    page = open_page(five_site, width=width, fragment="#shape-loop-batch@example-vendor")
    page.locator('#detail[data-case="shape-loop-batch"] #repro').wait_for()
    repro = page.evaluate("""() => { const e = document.querySelector('#detail #repro');
        return {scroll: e.scrollWidth, client: e.clientWidth, text: e.innerText}; }""")
    assert repro["scroll"] <= repro["client"], repro
    assert repro["text"] == long_repro("shape-loop-batch", "example-vendor")
    sentence = program_fail("x", "y").checks[2].reason
    assert page.inner_text("#detail #decision").count(sentence) == 1
    assert page.inner_text("#detail #detail-reason").startswith("manifest expects fail-residual, got fail-peak")

    page.evaluate("() => { location.hash = '#loop-rnn-t3@iree-boxed'; }")
    note = page.locator('#detail[data-case="loop-rnn-t3"] #detail-reason')
    note.wait_for()
    box = note.evaluate("""e => ({scroll: e.scrollHeight, client: e.clientHeight,
                                 overflow: getComputedStyle(e).overflowY, text: e.innerText})""")
    assert box["scroll"] <= box["client"] and box["overflow"] == "visible", box
    assert box["text"] == EXPECTED_CAUSE
    assert measure(page, "#detail #detail-reason", "splitProse") == [[EXPECTED_CAUSE[:60], []]]
    # an xfail's panel says the check's sentence (its own) once beside the manifest's note
    assert page.inner_text("#detail #decision").count(sentence) == 1
    assert page.errors == []


@pytest.mark.parametrize("width", [1280, 1920])
def test_five_backends_tables_keep_words_whole(open_page: Any, five_site: Path, shots: Path, width: int) -> None:
    """Backend and family names on one line each, the matrix unscrolled; "Failures by cause" spans the page,
    its backends and dates on one line, its repro commands in at most two; no word of the changes broken."""
    page = open_page(five_site, width=width)
    page.click("#expected-causes summary")  # the expected causes' table too
    for selector in ("#matrix thead th", "#matrix td.family", "#counts th", "#triage th", "#triage td.backend",
                     "#triage td.first-seen", "#triage td.count"):
        lines = measure(page, selector, "lines")
        assert lines and all(n == 1 for _, n in lines), (selector, [x for x in lines if x[1] != 1])
    for selector in ("#changes li", "#triage tr.cause-group td", "#history h3", "#history .u-legend"):
        split = [x for x in measure(page, selector, "split") if x[1]]
        assert split == [], (selector, split)
    # a long case id may give way between its words ("mod-Conv2d-Group/Norm-block-/train"), never inside one
    assert [x for x in measure(page, "#matrix td.case", "splitProse") if x[1]] == []
    repro = measure(page, "#triage td.smallest code.repro-command", "lines")
    assert repro and all(n <= 2 for _, n in repro), repro
    wrap = page.evaluate("() => { const e = document.querySelector('#matrix-wrap'); "
                         "return [e.scrollWidth, e.clientWidth]; }")
    assert wrap[0] <= wrap[1], wrap
    b = boxes(page, "#answer", "#triage", "#matrix-wrap", "#detail")
    assert b["#triage"]["width"] >= 0.98 * b["#answer"]["width"], b  # the page's width, not the left column's
    assert b["#triage"]["top"] >= max(b["#matrix-wrap"]["bottom"], b["#detail"]["bottom"]), b
    page.screenshot(path=str(shots / f"report-five-{width}.png"), full_page=True)
    # an open panel sticks beside the matrix, and never over the full-width sections when they are read
    page.click('td.cell[data-case="loop-rnn-t3"][data-backend="iree-boxed"]')
    for section in ("#changes", "#triage"):
        page.locator(section).scroll_into_view_if_needed()
        seen = page.evaluate("""s => [s, '#detail'].map(q => {
            const r = document.querySelector(q).getBoundingClientRect();
            return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; })""", section)
        over = seen[0]["top"] < seen[1]["bottom"] and seen[1]["top"] < seen[0]["bottom"] and \
            seen[0]["left"] < seen[1]["right"] and seen[1]["left"] < seen[0]["right"]
        assert not over, (section, seen)
    assert page.errors == []


@pytest.mark.parametrize("run", ["failing", "as-expected"])
def test_expected_causes_are_folded(open_page: Any, tmp_path: Path, run: str) -> None:
    """Folded means folded: the expected causes' table is closed until opened, whatever else the run holds."""
    records = run_with_a_planted_failure() if run == "failing" else expected_run()
    page = open_page(build_report([write_run(tmp_path / "run", records)], tmp_path / "site", history=None))
    assert page.evaluate("() => document.querySelector('#expected-causes').open") is False
    assert not page.locator("#expected-cause-groups").is_visible()
    assert page.locator("#expected-cause-groups tr.cause-group").count() == 2
    page.click("#expected-causes summary")
    assert page.locator("#expected-cause-groups").is_visible()
    assert page.errors == []


@pytest.mark.parametrize("width", [1280, 1920])
def test_history_axes_count_and_legends_show_values(open_page: Any, five_site: Path, width: int) -> None:
    """The regressions-and-fixes plot counts up from 0 in whole pairs (no "1, 0, 1"); every legend shows the
    latest run's values before the cursor comes, and the run under the cursor after."""
    page = open_page(five_site, width=width)
    page.locator("#plot-flips canvas").wait_for()
    flips = page.evaluate("""() => { const u = window.conformanceCharts.flips;
        return {ticks: u.axes[1]._values, splits: u.axes[1]._splits, regressions: u.data[1], fixes: u.data[2]}; }""")
    assert flips["regressions"] == [0, 1, 0] and flips["fixes"] == [0, 0, 2]
    ticks = [int(t) for t in flips["ticks"]]  # every tick a whole number
    assert ticks == sorted(set(ticks)) and ticks[0] == 0 and ticks[-1] >= 2, flips
    legends = page.evaluate("""() => Array.from(document.querySelectorAll('#history .u-legend .u-series'))
        .map(s => [s.querySelector('.u-label').textContent, s.querySelector('.u-value').textContent])""")
    assert len(legends) == 3 + 6 + 5, legends  # run + 5 backends; run + 2; run + 2 pairs' peak and residual
    assert all(value.strip() not in ("", "--") for _, value in legends), legends
    values = dict(legends)
    assert values["fixes (unexpected → as expected)"] == "2 pairs"
    assert values["regressions (as expected → unexpected)"] == "0 pairs"
    # the cursor over the second run: its values; away again: the latest run's
    canvas = page.locator("#plot-flips .u-over")
    canvas.scroll_into_view_if_needed()
    bb = canvas.bounding_box()
    page.mouse.move(bb["x"] + bb["width"] / 2, bb["y"] + bb["height"] / 2)
    assert page.inner_text("#plot-flips .u-legend .u-series:nth-child(2) .u-value") == "1 pair"
    page.mouse.move(0, 0)
    assert page.inner_text("#plot-flips .u-legend .u-series:nth-child(2) .u-value") == "0 pairs"
    assert page.errors == []


def test_changes_name_new_and_vanished_backends(open_page: Any, tmp_path: Path) -> None:
    """A backend that earlier runs did not have, and one they had that this run has not, named in "Changed since
    the previous run" (from the history's runs, not from the counts)."""
    db = tmp_path / "h.sqlite"
    four = ["eager", "inductor", "iree", "old-npu"]
    build_report([write_run(tmp_path / "n1", five_backend_night(backends=four), 1_700_000_000)], tmp_path / "s1",
                 history=db)
    page = open_page(build_report([write_run(tmp_path / "n2", five_backend_night(), 1_700_086_400)], tmp_path / "s2",
                                  history=db), width=1280)
    new = [e.get_attribute("data-backend") for e in page.locator("#new-backends .backend-name").all()]
    gone = [e.get_attribute("data-backend") for e in page.locator("#vanished-backends .backend-name").all()]
    assert new == ["example-vendor", "iree-boxed"] and gone == ["old-npu"]
    assert page.locator("#new-backends").is_visible() and page.locator("#vanished-backends").is_visible()
    assert [x for x in measure(page, "#backend-changes li", "split") if x[1]] == []
    assert page.errors == []


def test_a_matrix_too_wide_stands_its_headers_upright(open_page: Any, tmp_path: Path) -> None:
    """Seven backends at 1280 px do not fit side by side with their names flat: the names stand upright, each
    on one line, and no column is scrolled out of the card; at 1920 px they lie flat again."""
    seven = [*FIVE, "inductor-cuda", "vendor-npu-graph"]
    index = build_report([write_run(tmp_path / "run", five_backend_night(backends=seven))], tmp_path / "site",
                         history=None)
    for width, upright in ((1280, True), (1920, False)):
        page = open_page(index, width=width)
        assert page.evaluate("() => document.querySelector('#matrix').classList.contains('tight')") is upright
        wrap = page.evaluate("() => { const e = document.querySelector('#matrix-wrap'); "
                             "return [e.scrollWidth, e.clientWidth]; }")
        assert wrap[0] <= wrap[1], (width, wrap)
        lines = measure(page, "#matrix thead th", "lines") + measure(page, "#matrix td.family", "lines")
        assert all(n == 1 for _, n in lines), (width, [x for x in lines if x[1] != 1])
        assert [x for x in measure(page, "#matrix td.case", "splitProse") if x[1]] == []
        assert page.errors == []
