"""The run history store: trends, what changed since the previous run, and atomic inserts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.api.result import MemoryFigures, Result
from conformance.output import history


def res(case: str, backend: str, status: str, peak: int | None = 1000, family: str = "mlp") -> Result:
    memory = None if peak is None else MemoryFigures(
        model_peak_bytes=1000, measured_peak_bytes=peak, model_residual_bytes=0, measured_residual_bytes=0)
    return Result(case, backend, status, family=family, memory=memory)


RUN1 = [res("a", "eager", "pass"), res("b", "eager", "pass"), res("a", "ind", "pass"),
        res("b", "ind", "fail-peak", 1200), res("c", "ind", "skip", None)]
RUN2 = [res("a", "eager", "pass"), res("b", "eager", "pass"), res("a", "ind", "fail-parity"),
        res("b", "ind", "pass", 1000), res("c", "ind", "skip", None)]
RUN3 = [res("a", "eager", "pass", 1060), res("b", "eager", "pass", 1049), res("a", "ind", "pass"),
        res("b", "ind", "pass", 1000), res("c", "ind", "skip", None), res("d", "ind", "fail-residual")]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "h.sqlite"
    for i, run in enumerate((RUN1, RUN2, RUN3), 1):
        history.record_run(path, run, label=f"night {i}", started_at=f"2026-01-0{i}T00:00:00+00:00")
    return path


def test_three_runs_trends(db: Path) -> None:
    assert [r.label for r in history.runs(db)] == ["night 1", "night 2", "night 3"]
    ids = [r.id for r in history.runs(db)]
    trends = history.backend_trends(db)
    # skips do not count; pass rate over judged verdicts
    assert trends["eager"] == [(ids[0], 1.0), (ids[1], 1.0), (ids[2], 1.0)]
    assert trends["ind"] == [(ids[0], 0.5), (ids[1], 0.5), (ids[2], 2 / 3)]
    peaks = history.case_trends(db)
    assert peaks[("a", "eager")] == [(ids[0], 1000), (ids[1], 1000), (ids[2], 1060)]
    assert peaks[("b", "ind")] == [(ids[0], 1200), (ids[1], 1000), (ids[2], 1000)]
    assert ("c", "ind") not in peaks  # skipped: no measured peak


def test_changed_since_previous_run(db: Path) -> None:
    ids = [r.id for r in history.runs(db)]
    second = history.changes(db, ids[1])
    assert second.previous is not None and second.previous.id == ids[0]
    assert [(c.case, c.backend, c.before, c.after) for c in second.new_failures] == [
        ("a", "ind", "pass", "fail-parity")
    ]
    assert [(c.case, c.backend, c.before, c.after) for c in second.fixes] == [("b", "ind", "fail-peak", "pass")]
    assert second.memory_regressions == []  # b@ind shrank 1200 -> 1000

    last = history.changes(db)  # defaults to the latest run
    assert last.run is not None and last.run.id == ids[2]
    assert [(c.case, c.after) for c in last.new_failures] == [("d", "fail-residual")]  # new case, failing
    assert [(c.case, c.backend) for c in last.fixes] == [("a", "ind")]
    # +6% is a regression, +4.9% is not (threshold 5%)
    assert [(c.case, c.backend, c.peak_before, c.peak_after) for c in last.memory_regressions] == [
        ("a", "eager", 1000, 1060)
    ]
    assert history.changes(db, ids[0]).previous is None
    assert history.changes(db, ids[0]).empty


def test_changes_name_new_and_vanished_backends(db: Path) -> None:
    """A backend this run has and the previous had not (installed since), and the reverse, each named; the
    same backends in both runs name none."""
    assert (history.changes(db).new_backends, history.changes(db).vanished_backends) == ([], [])
    history.record_run(db, [res("a", "eager", "pass"), res("a", "vendor", "pass"), res("b", "vendor", "fail-peak")],
                       label="night 4", started_at="2026-01-04T00:00:00+00:00")
    fourth = history.changes(db)
    assert fourth.new_backends == ["vendor"] and fourth.vanished_backends == ["ind"]
    assert not fourth.empty
    assert [(c.case, c.backend, c.before) for c in fourth.new_failures] == [("b", "vendor", "absent")]


def test_changes_name_a_new_backend_and_a_vanished_one(tmp_path: Path) -> None:
    """A plugin installed between runs adds a backend (``vendor``), an uninstalled one drops another (``ind``):
    the comparison names both, and is not empty for it though no pair both runs had changed."""
    path = tmp_path / "h.sqlite"
    history.record_run(path, [res("a", "eager", "pass"), res("a", "ind", "pass")],
                       started_at="2026-01-01T00:00:00+00:00")
    history.record_run(path, [res("a", "eager", "pass"), res("a", "vendor", "pass")],
                       started_at="2026-01-02T00:00:00+00:00")
    changed = history.changes(path)
    assert (changed.new_backends, changed.vanished_backends) == (["vendor"], ["ind"])
    assert not changed.new_failures and not changed.fixes and not changed.empty
    same = tmp_path / "same.sqlite"
    for day in (1, 2):
        history.record_run(same, [res("a", "eager", "pass")], started_at=f"2026-01-0{day}T00:00:00+00:00")
    assert history.changes(same).new_backends == history.changes(same).vanished_backends == []


def test_recording_the_same_results_twice_is_one_run(db: Path) -> None:
    again = history.record_run(db, RUN3)
    assert again.id == history.runs(db)[-1].id
    assert len(history.runs(db)) == 3


def test_exception_mid_insert_leaves_database_intact(db: Path) -> None:
    class Boom(MemoryFigures):
        def __getattribute__(self, name: str) -> object:
            if name == "measured_peak_bytes":
                raise RuntimeError("interrupted mid-insert")
            return super().__getattribute__(name)

    before = (history.runs(db), history.backend_trends(db), history.case_trends(db))
    bad = Result("z", "ind", "pass", memory=Boom(measured_peak_bytes=5))
    with pytest.raises(RuntimeError, match="mid-insert"):
        history.record_run(db, [res("a", "eager", "fail-peak"), res("b", "ind", "pass"), bad, res("q", "x", "pass")])
    assert (history.runs(db), history.backend_trends(db), history.case_trends(db)) == before
    assert history.changes(db).run == before[0][-1]


def test_process_killed_mid_insert_leaves_database_intact(db: Path) -> None:
    """A hard kill (no exception handling, no rollback in Python) halfway through the rows."""
    before = (history.runs(db), history.backend_trends(db), history.case_trends(db))
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from conformance.output import history
        from conformance.api.result import MemoryFigures, Result

        class Die(MemoryFigures):
            def __getattribute__(self, name):
                if name == "measured_peak_bytes":
                    os._exit(9)  # the process dies with the transaction open
                return super().__getattribute__(name)

        rows = [Result(f"k{{i}}", "eager", "fail-peak", memory=MemoryFigures(measured_peak_bytes=i)) for i in range(5)]
        rows.append(Result("k9", "eager", "pass", memory=Die()))
        history.record_run(Path({str(db)!r}), rows)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    assert (history.runs(db), history.backend_trends(db), history.case_trends(db)) == before
    # and the database still takes new runs
    history.record_run(db, [res("a", "eager", "pass", 2000)])
    assert len(history.runs(db)) == 4
    assert [(c.case, c.peak_after) for c in history.changes(db).memory_regressions] == [("a", 2000)]


def test_runs_are_ordered_by_when_they_ran_not_when_recorded(tmp_path: Path) -> None:
    """A report rebuilt for an older results directory must not become the latest run."""
    path = tmp_path / "h.sqlite"
    late = history.record_run(path, RUN2, label="late", started_at="2026-01-03T00:00:00+00:00")
    early = history.record_run(path, RUN1, label="early", started_at="2026-01-01T00:00:00+00:00")
    # another time zone, same instant order: 2026-01-02T23:00 UTC lies between the two
    middle = history.record_run(path, RUN3, label="middle", started_at="2026-01-03T01:00:00+02:00")
    assert early.id > late.id  # recorded later ...
    assert [r.label for r in history.runs(path)] == ["early", "middle", "late"]  # ... but ran first
    latest = history.changes(path)
    assert latest.run is not None and latest.run.label == "late"
    assert latest.previous is not None and latest.previous.label == "middle"
    assert history.changes(path, early.id).previous is None
    assert [run_id for run_id, _ in history.backend_trends(path)["ind"]] == [early.id, middle.id, late.id]
    assert [peak for _, peak in history.case_trends(path)[("b", "ind")]] == [1200, 1000, 1000]


def test_a_file_that_is_not_a_history_is_named(tmp_path: Path) -> None:
    (tmp_path / "other.sqlite").write_text("not a database")
    with pytest.raises(history.HistoryError, match=r"other\.sqlite: not a run history database"):
        history.check(tmp_path / "other.sqlite")
    with pytest.raises(history.HistoryError, match=r"other\.sqlite: not a run history database"):
        history.runs(tmp_path / "other.sqlite")
    history.check(tmp_path / "new" / "h.sqlite")  # not there yet: fine, and not created by the check
    assert not (tmp_path / "new").exists()


def test_pass_rate_is_the_verdict_modules(tmp_path: Path) -> None:
    """History's trend and the report's rate are :func:`conformance.api.verdict.rates`, for every status."""
    from collections import Counter

    from conformance.api.verdict import Status, rates

    run = [res(f"c{i}", "b", s) for i, s in enumerate(Status)] + [res("x", "b", "pass"), res("y", "b", "xfail")]
    path = tmp_path / "h.sqlite"
    history.record_run(path, run, started_at="2026-01-01T00:00:00+00:00")
    want = rates(Counter(str(r.status) for r in run))
    assert want.judged == len(run) - 1  # the skip says nothing of the backend
    assert (want.passed, want.xfailed) == (2, 2)
    assert want.as_expected == sum(1 for r in run if r.status.as_expected and r.status.is_judged)
    [(_, rate)] = history.backend_trends(path)["b"]
    assert rate == want.pass_rate == 2 / want.judged
    # a run of skips only has no rate (rather than a 0 % one)
    history.record_run(path, [res("c", "only-skips", "skip", None)], started_at="2026-01-02T00:00:00+00:00")
    assert "only-skips" not in history.backend_trends(path)
