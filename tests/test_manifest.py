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
"""


def test_expected_failure_becomes_xfail(tmp_path: Path) -> None:
    m = load_manifest("b", _write(tmp_path, GOOD))
    r = apply(Result("loop-rnn-t3", "b", "fail-peak", reason="x"), m)
    assert r.status == "xfail" and r.raw_status == "fail-peak" and r.expected == "fail-peak"
    assert "keeps the carry" in r.reason and r.ok


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
