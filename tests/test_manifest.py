"""Manifests: strict expectations, clear errors for bad files, stale entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.manifest import ManifestError, apply, load_manifest
from conformance.result import Result


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "b.toml"
    p.write_text(text)
    return p


GOOD = """
[[expect]]
case = "loop-*"
status = "fail-peak"
reason = "keeps the carry"
issue = "https://example.org/1"
excess = 1
"""


def test_expected_failure_becomes_xfail(tmp_path: Path) -> None:
    m = load_manifest("b", _write(tmp_path, GOOD))
    r = apply(Result("loop-rnn-t3", "b", "fail-peak", reason="x", excess_bytes=1), m)
    assert r.status == "xfail" and r.raw_status == "fail-peak" and r.expected == "fail-peak"
    assert "keeps the carry" in r.reason and r.ok


def test_a_larger_excess_than_expected_is_a_new_failure(tmp_path: Path) -> None:
    """An entry for a 1-byte excess must not hide an 18 KB leak added on top."""
    m = load_manifest("b", _write(tmp_path, GOOD))
    r = apply(Result("loop-rnn-t3", "b", "fail-peak", reason="x", excess_bytes=1 + 18432), m)
    assert r.status == "fail-peak" and not r.ok
    assert r.reason.startswith("excess 18433 B, manifest expects 1 B")


def test_a_bound_accepts_what_is_under_it(tmp_path: Path) -> None:
    m = load_manifest("b", _write(tmp_path, GOOD.replace("excess = 1", "max_excess = 64")))
    assert apply(Result("loop-rnn-t3", "b", "fail-peak", excess_bytes=64), m).status == "xfail"
    over = apply(Result("loop-rnn-t3", "b", "fail-peak", excess_bytes=65), m)
    assert over.status == "fail-peak" and "at most 64 B" in over.reason


def test_an_expected_memory_failure_without_its_excess_does_not_pass(tmp_path: Path) -> None:
    m = load_manifest("b", _write(tmp_path, GOOD.replace("excess = 1\n", "")))
    assert m.entries[0].unsized
    r = apply(Result("loop-rnn-t3", "b", "fail-peak", excess_bytes=7), m)
    assert r.status == "fail-peak" and "records no expected excess (measured 7 B" in r.reason


@pytest.mark.parametrize("bad", ["excess = 1.5", "excess = \"1\"", "excess = true", "excess = 1\nmax_excess = 2"])
def test_bad_excess_is_a_manifest_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ManifestError, match="loop-"):
        load_manifest("b", _write(tmp_path, GOOD.replace("excess = 1", bad)))


def test_unexpected_pass_is_xpass_and_not_ok(tmp_path: Path) -> None:
    m = load_manifest("b", _write(tmp_path, GOOD))
    r = apply(Result("loop-rnn-t3", "b", "pass"), m)
    assert r.status == "xpass" and not r.ok


def test_different_failure_stays_a_failure(tmp_path: Path) -> None:
    m = load_manifest("b", _write(tmp_path, GOOD))
    r = apply(Result("loop-rnn-t3", "b", "fail-parity", reason="off"), m)
    assert r.status == "fail-parity" and not r.ok and "manifest expects fail-peak" in r.reason


def test_unmatched_case_untouched_and_stale_entries_found(tmp_path: Path) -> None:
    m = load_manifest("b", _write(tmp_path, GOOD))
    assert apply(Result("mlp-s-infer", "b", "pass"), m).status == "pass"
    assert [e.case for e in m.stale(["mlp-s-infer"])] == ["loop-*"]
    assert m.stale(["loop-rnn-t3"]) == []


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[expect]]\ncase = 'x'\nstatus = 'fail-peak'\n", "a 'reason' is required"),
        ("[[expect]]\ncase = 'x'\nstatus = 'broken'\nreason = 'r'\n", "status 'broken' is not one of"),
        ("[[expect]]\nstatus = 'fail-peak'\nreason = 'r'\n", "'case'"),
        ("[[expect]\n", "not valid TOML"),
        ("[[expect]]\ncase = 'x'\nstatus = 'fail-peak'\nreason = 'r'\ncolour = 1\n", "unknown key 'colour'"),
    ],
)
def test_malformed_manifest_names_file_and_problem(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ManifestError) as err:
        load_manifest("b", path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_shipped_manifests_load() -> None:
    m = load_manifest("inductor")
    assert m.entries and all(e.reason for e in m.entries)


def test_update_manifest_round_trip_keeps_reasons_and_marks_new_entries(tmp_path: Path) -> None:
    from conformance.manifest import UNEXPLAINED, write_updated

    path = _write(tmp_path, "# header kept\n" + GOOD + """
[[expect]]
case = "mlp-s-train"
status = "fail-residual"
reason = "leaks its grads"
""")
    m = load_manifest("b", path)
    results = [
        Result("loop-rnn-t3", "b", "fail-peak", raw_status="fail-peak", excess_bytes=3),  # grew: 1 B -> 3 B
        Result("loop-rnn-t6", "b", "xpass", raw_status="pass"),  # glob over-matches now
        Result("mlp-s-train", "b", "xpass", raw_status="pass"),  # fixed
        Result("mlp-m-train", "b", "fail-parity", raw_status="fail-parity"),  # new failure
        Result("mlp-l-train", "b", "skip", raw_status="skip"),
    ]
    target, notes = write_updated(m, results)
    text = target.read_text()
    assert text.startswith("# header kept")
    again = load_manifest("b", target)
    by_case = {e.case: e for e in again.entries}
    assert set(by_case) == {"loop-rnn-t3", "mlp-m-train"}
    assert by_case["loop-rnn-t3"].reason == "keeps the carry" and by_case["loop-rnn-t3"].issue
    assert by_case["loop-rnn-t3"].excess == 3 and "excess = 3" in text  # the observed size is recorded
    assert by_case["mlp-m-train"].reason.startswith(UNEXPLAINED) and by_case["mlp-m-train"].status == "fail-parity"
    assert "# TODO: explain" in text
    assert any("now passes" in n for n in notes) and any("needs a reason" in n for n in notes)
    # a second update from the same run changes nothing
    _, notes2 = write_updated(again, results)
    assert load_manifest("b", target).entries == again.entries
    assert not [n for n in notes2 if "now passes" in n or "needs a reason" in n]
