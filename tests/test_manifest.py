"""Manifests: strict expectations, clear errors for bad files, stale entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.api.result import Result
from conformance.checks.manifest import ManifestError, apply, load_manifest


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


LOOSE = """
[[expect]]
case = "op-unpool-*"
status = "fail-parity"
reason = "loses a value only where the drawn indices fall in two windows' overlap"
strict = false
"""


def test_a_non_strict_entry_steps_aside_where_its_values_do_not_show_the_fault(tmp_path: Path) -> None:
    m = load_manifest("b", _write(tmp_path, LOOSE + GOOD))
    shown = apply(Result("op-unpool-1", "b", "fail-parity", reason="off"), m)
    assert shown.status == "xfail" and shown.ok and "two windows" in shown.reason
    passed = apply(Result("op-unpool-4", "b", "pass"), m)
    assert passed.status == "pass" and passed.ok and any("strict = false" in n for n in passed.notes)
    other = apply(Result("op-unpool-5", "b", "crash", reason="SIGSEGV"), m)  # no entry covers it: a failure
    assert other.status == "crash" and not other.ok and "manifest expects" not in other.reason
    strict = load_manifest("b", _write(tmp_path, LOOSE.replace("strict = false\n", "")))
    assert apply(Result("op-unpool-4", "b", "pass"), strict).status == "xpass"


@pytest.mark.parametrize("bad, message", [
    ('strict = "no"', "'strict' must be true or false"),
    ('strict = false\n[[expect]]\ncase = "y"\nstatus = "fail-peak"\nreason = "r"\nexcess = 1\nstrict = false',
     "is for a case entry expecting fail-parity"),
])
def test_strict_false_is_for_a_wrong_value_only(tmp_path: Path, bad: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_manifest("b", _write(tmp_path, LOOSE.replace("strict = false", bad)))


def test_update_keeps_a_non_strict_entry_whose_values_passed(tmp_path: Path) -> None:
    from conformance.checks.manifest import dump, update

    m = load_manifest("b", _write(tmp_path, LOOSE))
    updated, notes = update(m, [Result("op-unpool-1", "b", "xfail", raw_status="fail-parity"),
                                Result("op-unpool-4", "b", "pass", raw_status="pass")])
    assert [(e.case, e.strict) for e in updated.entries] == [("op-unpool-*", False)] and not notes
    assert "strict = false" in dump(updated)


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
    from conformance.checks.manifest import UNEXPLAINED, write_updated

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


CONDITIONED = """
[[expect]]
case = "loop-rnn-*"
status = "fail-peak"
reason = "held the carry before the fix"
when = "torch<2.9"
excess = 64

[[expect]]
case = "mlp-s-train"
status = "fail-run"
reason = "aborts on this compiler release"
when = ["torch>=2.9", "iree-turbine<3.10"]
"""


def test_version_conditioned_entry_applies_on_one_torch_and_not_another(tmp_path: Path) -> None:
    path = _write(tmp_path, CONDITIONED)
    old = load_manifest("b", path, versions={"torch": "2.8.0+cu128"})
    new = load_manifest("b", path, versions={"torch": "2.13.0+cpu", "iree_turbine": "3.9.0"})
    on_old = apply(Result("loop-rnn-t3", "b", "fail-peak", excess_bytes=64), old)
    assert on_old.status == "xfail" and on_old.reason.endswith("[when torch<2.9]")
    on_new = apply(Result("loop-rnn-t3", "b", "fail-peak", reason="x", excess_bytes=64), new)
    assert on_new.status == "fail-peak" and on_new.expected is None  # not expected on 2.13: a real failure
    assert apply(Result("loop-rnn-t3", "b", "pass"), new).status == "pass"  # and no xpass either
    assert apply(Result("loop-rnn-t3", "b", "pass"), old).status == "xpass"
    # the iree-turbine condition: both parts must hold
    assert apply(Result("mlp-s-train", "b", "fail-run"), new).status == "xfail"
    later_iree = load_manifest("b", path, versions={"torch": "2.13.0", "iree-turbine": "3.10.0"})
    assert apply(Result("mlp-s-train", "b", "fail-run"), later_iree).status == "fail-run"
    no_iree = load_manifest("b", path, versions={"torch": "2.13.0"})  # not installed: no condition holds
    assert no_iree.lookup("mlp-s-train") is None
    # an entry for another version is inactive here, not stale
    assert [e.case for e in new.stale(["mlp-s-train"])] == []
    assert [e.case for e in old.stale(["mlp-s-train"])] == ["loop-rnn-*"]


def test_unsized_entries_are_those_this_run_judges(tmp_path: Path) -> None:
    path = _write(tmp_path, """
[[expect]]
case = "loop-*"
status = "fail-peak"
reason = "no size on any torch"

[[expect]]
case = "mlp-*"
status = "fail-peak"
reason = "no size, old torch only"
when = "torch<2.9"

[[expect]]
case = "reg-*"
status = "fail-compile"
reason = "not a memory failure: no size needed"
""")
    new = load_manifest("b", path, versions={"torch": "2.13.0"})
    old = load_manifest("b", path, versions={"torch": "2.8.0"})
    assert [e.case for e in new.unsized(["loop-rnn-t3", "mlp-s-train", "reg-x"])] == ["loop-*"]
    assert [e.case for e in new.unsized(["mlp-s-train"])] == []  # the loop entry judges no selected case
    assert [e.case for e in old.unsized(["loop-rnn-t3", "mlp-s-train"])] == ["loop-*", "mlp-*"]


def test_conditions_are_judged_against_the_installed_torch(tmp_path: Path) -> None:
    """The same planted manifest, read where torch is installed (tox -e torch28 runs this on 2.8)."""
    import torch
    from packaging.version import Version

    path = _write(tmp_path, CONDITIONED.replace("torch<2.9", f"torch<{Version(torch.__version__).base_version}"))
    here = load_manifest("b", path)
    assert here.lookup("loop-rnn-t3") is None  # torch<THIS version: not here
    below = f"torch<={Version(torch.__version__).base_version}"
    here = load_manifest("b", _write(tmp_path, CONDITIONED.replace("torch<2.9", below)))
    assert here.lookup("loop-rnn-t3") is not None
    old_torch = Version(torch.__version__) < Version("2.9")
    assert (load_manifest("b", _write(tmp_path, CONDITIONED)).lookup("loop-rnn-t3") is not None) == old_torch


@pytest.mark.parametrize("when, message", [
    ("'torch<<2'", "not NAME SPECIFIER"),
    ("3", "'when' must be"),
    ("[]", "'when' must be"),
    ("'torch[extra]<2.9'", "may only name"),
])
def test_malformed_condition_names_the_entry(tmp_path: Path, when: str, message: str) -> None:
    path = _write(tmp_path, f"[[expect]]\ncase = 'x'\nstatus = 'fail-peak'\nreason = 'r'\nwhen = {when}\n")
    with pytest.raises(ManifestError) as err:
        load_manifest("b", path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_update_keeps_conditions_and_leaves_inactive_entries_alone(tmp_path: Path) -> None:
    from conformance.checks.manifest import write_updated

    path = _write(tmp_path, CONDITIONED)
    m = load_manifest("b", path, versions={"torch": "2.13.0"})
    # on 2.13 loop-rnn-t3 passes: the torch<2.9 entry is not this run's business and stays
    target, _ = write_updated(m, [Result("loop-rnn-t3", "b", "pass", raw_status="pass")])
    again = load_manifest("b", target, versions={"torch": "2.8.0"})
    assert (again.entries[0].case, again.entries[0].when) == ("loop-rnn-*", ("torch<2.9",))
    assert again.entries[1].when == ("torch>=2.9", "iree-turbine<3.10")


def test_a_condition_that_holds_comes_before_the_general_entry(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD + CONDITIONED.replace('"fail-peak"', '"fail-run"', 1))
    old = load_manifest("b", path, versions={"torch": "2.8.0"})
    new = load_manifest("b", path, versions={"torch": "2.13.0"})
    assert old.lookup("loop-rnn-t3").status == "fail-run"  # the torch<2.9 entry, though listed second
    assert new.lookup("loop-rnn-t3").status == "fail-peak"  # the general one


@pytest.mark.parametrize("as_declared", [str, Path])
def test_update_manifest_takes_the_adapters_manifest_path_as_str_or_path(tmp_path: Path, as_declared: type) -> None:
    """``manifest_path`` is a ``str`` in the vendor guide: ``--update-manifest`` writes there as it does for a Path."""
    from conformance.checks.manifest import write_updated

    declared = tmp_path / "vendor" / "manifest.toml"
    m = load_manifest("b", as_declared(declared))
    target, _ = write_updated(m, [Result("mlp-m-train", "b", "fail-parity", raw_status="fail-parity")],
                              as_declared(declared))
    assert target == declared and declared.exists()
    assert [e.case for e in load_manifest("b", str(declared)).entries] == ["mlp-m-train"]
