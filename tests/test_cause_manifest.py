"""Manifest entries that match causes: a known cause on any case is expected within its bound; a new
cause, or a known one beyond its bound, is a failure; triage puts the new one on top.

The failures are the real program check's verdicts on wrappers written as inductor writes its
``while_loop`` host code (tests/test_cause.py), so the parts are the ones a real run gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.api.result import Result
from conformance.api.verdict import Status
from conformance.checks.cause import fill_cause
from conformance.checks.manifest import ManifestError, apply, dump, load_manifest, update
from conformance.output import history as hist
from conformance.output.triage import render_text, triage
from tests.test_cause import loop_source, program_check, result_of

PLANTED = "buf9 = empty_strided_cpu((64,), (1,), torch.float32)\n    del buf9"


def loop_result(case: str, buffers: tuple[int, int, int], width: int, trips: int, extra: str = "pass") -> Result:
    return result_of(program_check(loop_source(buffers, width, extra), width, trips), case, peak=4 * width * width * 4)


@pytest.fixture(scope="module")
def known_parts() -> list[str]:
    r = loop_result("gen-loop-1", (0, 1, 2), 4, 3)
    fill_cause(r)
    return r.cause_parts


def manifest_text(parts: list[str], bound: str = "max_excess_pct = 400", status: str = "fail-peak") -> str:
    return "".join(
        f'\n[[expect]]\ncause = "{p}"\nstatus = "{status}"\nreason = "known while_loop host code"\n'
        f'issue = "https://example.org/loop"\n{bound}\n' for p in parts)


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "inductor.toml"
    path.write_text(text)
    return load_manifest("inductor", path)


def test_a_known_cause_on_any_case_is_expected(tmp_path: Path, known_parts: list[str]) -> None:
    m = load(tmp_path, manifest_text(known_parts))
    for case, buffers, width, trips in [("gen-loop-663", (0, 1, 2), 4, 3), ("gen-loop-9450", (7, 12, 19), 8, 5),
                                        ("loop-rnn-t6", (3, 4, 8), 6, 6)]:
        r = apply(loop_result(case, buffers, width, trips), m)
        assert r.status == Status.XFAIL, r.reason
        assert r.raw_status == "fail-peak" and r.expected == "fail-peak" and r.new_cause_parts == []
        assert r.reason.startswith("expected cause: known while_loop host code (https://example.org/loop)")
    assert m.stale(["mlp-s-infer"]) == []  # a cause entry expects a cause, not a case


def test_a_planted_new_cause_is_flagged_inside_a_group_of_known_ones(tmp_path: Path, known_parts: list[str]) -> None:
    m = load(tmp_path, manifest_text(known_parts))
    results = [apply(loop_result(f"gen-loop-{i}", (i, i + 1, i + 2), 4 + i, 3), m) for i in range(4)]
    planted = apply(loop_result("gen-loop-77", (0, 1, 2), 4, 3, extra=PLANTED), m)
    assert planted.status == Status.FAIL_PEAK and not planted.ok
    assert planted.new_cause_parts == ["program: buffer allocated and never used"]
    assert planted.reason.startswith(f"new cause beside {len(known_parts)} known: program: buffer allocated")
    t = triage([*results, planted])
    top, known = t.groups
    assert top.results == [planted] and top.new_parts == ("program: buffer allocated and never used",)
    assert known.count == 4 and known.expected == 4 and known.unexpected == 0 and not known.new_parts
    text = "\n".join(render_text(t))
    assert text.index("gen-loop-77") < text.index("gen-loop-0")
    assert "program: buffer allocated and never used   <- new" in text


def test_a_known_cause_beyond_its_bound_is_a_failure(tmp_path: Path, known_parts: list[str]) -> None:
    assert known_parts == ["program: while-loop-host-code"]  # every finding of the host loop: one mechanism
    r = loop_result("loop-rnn-t6", (0, 1, 2), 16, 6)
    fill_cause(r)
    out = apply(r, load(tmp_path, manifest_text(known_parts, "max_excess = 64")))
    assert out.status == Status.FAIL_PEAK
    assert out.reason.startswith("known cause beyond its bound:") and known_parts[0] in out.reason
    assert "> 64 B" in out.reason
    assert out.new_cause_parts == []


def test_a_bound_that_scales_with_the_case(tmp_path: Path, known_parts: list[str]) -> None:
    """``max_excess_pct`` of the pair's model peak: the same cause on a wider program may hold more."""
    m = load(tmp_path, manifest_text(known_parts, "max_excess = 400\nmax_excess_pct = 150"))  # fixed + scaled
    small, wide = loop_result("gen-loop-1", (0, 1, 2), 4, 3), loop_result("gen-loop-2", (0, 1, 2), 32, 3)
    assert wide.excess_bytes is not None and small.excess_bytes is not None and wide.excess_bytes > small.excess_bytes
    assert apply(small, m).status == Status.XFAIL
    assert apply(wide, m).status == Status.XFAIL
    grown = loop_result("gen-loop-3", (0, 1, 2), 32, 3)
    assert grown.memory is not None
    grown.memory.model_peak_bytes = 64  # the same excess on a case whose model is far smaller
    assert apply(grown, m).status == Status.FAIL_PEAK


def test_a_case_entry_comes_before_cause_entries(tmp_path: Path, known_parts: list[str]) -> None:
    by_id = '\n[[expect]]\ncase = "gen-loop-5"\nstatus = "fail-peak"\nreason = "by id"\nexcess = 1\n'
    text = manifest_text(known_parts) + by_id
    r = apply(loop_result("gen-loop-5", (0, 1, 2), 4, 3), load(tmp_path, text))
    assert r.status == Status.FAIL_PEAK and "manifest expects 1 B" in r.reason


def test_a_cause_entry_may_be_narrowed_to_cases_and_versions(tmp_path: Path, known_parts: list[str]) -> None:
    narrowed = manifest_text(known_parts).replace('status = "fail-peak"', 'case = "loop-rnn-*"\nstatus = "fail-peak"')
    assert apply(loop_result("gen-loop-1", (0, 1, 2), 4, 3), load(tmp_path, narrowed)).status == Status.FAIL_PEAK
    assert apply(loop_result("loop-rnn-t3", (0, 1, 2), 4, 3), load(tmp_path, narrowed)).status == Status.XFAIL
    other_torch = manifest_text(known_parts).replace("max_excess_pct", 'when = "torch<2.0"\nmax_excess_pct')
    assert apply(loop_result("gen-loop-1", (0, 1, 2), 4, 3), load(tmp_path, other_torch)).status == Status.FAIL_PEAK


@pytest.mark.parametrize(("entry", "message"), [
    ('cause = "program: x"\nstatus = "fail-peak"\nreason = "r"', "needs its bound per instance"),
    ('cause = "program: x"\nstatus = "fail-peak"\nreason = "r"\nexcess = 3', "no exact 'excess'"),
    ('cause = ""\nstatus = "fail-peak"\nreason = "r"\nmax_excess = 3', "'cause' must be a cause part"),
    ('case = "a"\nstatus = "fail-peak"\nreason = "r"\nmax_excess_pct = 3', "'max_excess_pct' is for cause entries"),
    ('cause = "program: x"\nstatus = "fail-peak"\nreason = "r"\nmax_excess_pct = "big"', "must be a percentage"),
    ('cause = "program: x"\nmechanism = "layout-copy"\nstatus = "fail-peak"\nreason = "r"\nmax_excess = 4',
     "'cause' or 'mechanism', not both"),
    ('mechanism = "conv-magic"\nstatus = "fail-peak"\nreason = "r"\nmax_excess = 4', "not a known mechanism"),
    ('mechanism = "early-gradient"\nstatus = "fail-peak"\nreason = "r"', "needs its bound per instance"),
])
def test_bad_cause_entries_are_one_line_errors(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load(tmp_path, f"[[expect]]\n{entry}\n")


def test_cause_entries_survive_an_update(tmp_path: Path, known_parts: list[str]) -> None:
    m = load(tmp_path, manifest_text(known_parts))
    expected = apply(loop_result("gen-loop-1", (0, 1, 2), 4, 3), m)
    new = apply(loop_result("gen-loop-2", (0, 1, 2), 4, 3, extra=PLANTED), m)
    updated, _ = update(m, [expected, new])
    assert [e.cause for e in updated.entries if e.cause] == [e.cause for e in m.entries]
    assert [e.case for e in updated.entries if not e.cause] == ["gen-loop-2"]  # the new one needs a reason
    again = load(tmp_path, dump(updated))
    pairs = [(e.cause, e.max_excess_pct) for e in updated.entries]
    assert [(e.cause, e.max_excess_pct) for e in again.entries] == pairs


def test_first_seen_comes_from_the_history(tmp_path: Path, known_parts: list[str]) -> None:
    m = load(tmp_path, manifest_text(known_parts))
    db = tmp_path / "history.sqlite"
    night1 = [apply(loop_result("gen-loop-1", (0, 1, 2), 4, 3), m)]
    first = hist.record_run(db, night1, started_at="2026-01-01T00:00:00+00:00")
    night2 = [apply(loop_result("gen-loop-2", (5, 6, 7), 8, 4), m),
              apply(loop_result("gen-loop-3", (0, 1, 2), 4, 3, extra=PLANTED), m)]
    second = hist.record_run(db, night2, started_at="2026-01-02T00:00:00+00:00")
    t = triage(night2, db)
    assert t.run == second
    new, old = t.groups
    assert new.new_this_run and new.first_seen == second and new.results[0].case == "gen-loop-3"
    assert not old.new_this_run and old.first_seen == first
