"""Hostile inputs, round three (issue 58): interrupts during a hang, a full disk, lines a release cannot read.

Each failure the issue lists is driven once as a user drives it: the real ``conformance`` command in a
subprocess, a real SIGINT to its process group, a real file-size limit (``RLIMIT_FSIZE``, set in the
child before it starts: a full disk as ``write`` reports it, without mounting a filesystem).  The
variations of each are checked in-process, where the command line is not what is being tested.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.api.result import Result, Status
from conformance.checks.manifest import ManifestError, load_manifest
from conformance.cli import main as cli
from conformance.output.records import read_records
from conformance.run.isolation import WORKER_NAME
from conformance.run.sharding import PairCost, Shard, select_shard
from tests.test_bad_inputs import _as_in_the_foreground, assert_one_line, child_env, conformance, tagged_processes

HANG_ALWAYS = "tests.hostile_backends:HangAlwaysBackend"


def _record_line(case: str = "mlp-s-infer", backend: str = "eager", **extra: object) -> bytes:
    return json.dumps({**Result(case, backend, Status.PASS).to_json(), **extra}).encode() + b"\n"


NEWER = _record_line(schema_version=2, host="ci-7")  # as a newer release would write it
OTHER_TOOL = b'{"tool": "flaky-tracker", "pair": "mlp-s-infer@eager", "retries": 3}\n'


# --------------------------------------------------------------------------- Ctrl-C while a pair hangs


def _start_hanging(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """``conformance run`` over an earlier results directory (``--overwrite``), its first pair hanging in its
    worker; returns when that worker exists and has had the pair for a moment."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(_record_line())
    tag = f"CONFORMANCE_TEST_TAG={uuid.uuid4().hex}"
    key, value = tag.split("=")
    log = tmp_path / "run.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "conformance", "run", "--backend", HANG_ALWAYS, "--backend", "eager",
             "--case", "mlp-s-infer", "--timeout", "300", "--out", "out", "--overwrite"],
            cwd=tmp_path, stdout=sink, stderr=sink, env=child_env(**{key: value}),
            start_new_session=True, preexec_fn=_as_in_the_foreground)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        if "starting the pairs" in log.read_text() and any(
                p.comm == WORKER_NAME or "isolation --worker" in p.cmdline for p in tagged_processes(tag)):
            time.sleep(1.5)  # the worker warms up, takes the pair, and its step never returns
            return process, tag, log
        time.sleep(0.2)
    raise AssertionError(f"the run never started its hanging pair:\n{log.read_text()}")


def _ended(process: subprocess.Popen[bytes], tag: str) -> float:
    """Seconds until the run exits after the signal just sent; its processes must be gone too."""
    sent = time.monotonic()
    try:
        process.wait(60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    took = time.monotonic() - sent
    deadline = time.monotonic() + 10
    while tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tagged_processes(tag) == [], "a process of the run outlived it"
    return took


def test_ctrl_c_while_the_first_pair_hangs_ends_the_run_in_seconds(tmp_path: Path) -> None:
    process, tag, log = _start_hanging(tmp_path)
    os.killpg(process.pid, signal.SIGINT)  # a terminal's Ctrl-C
    took = _ended(process, tag)
    err = log.read_text()
    assert process.returncode == 128 + signal.SIGINT, err
    assert took < 20, (took, err)  # a --timeout 300 pair does not hold the run
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if line.startswith("conformance: interrupted")]
    assert len(said) == 1 and "(during mlp-s-infer@hostile-hang-always)" in said[0], err  # the pair named
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl"]  # no lock, no staged file
    assert (out / "results.jsonl").read_bytes() == _record_line()  # the earlier verdicts, as they were


def test_a_second_ctrl_c_ends_the_run_at_once(tmp_path: Path) -> None:
    process, tag, log = _start_hanging(tmp_path)
    os.killpg(process.pid, signal.SIGINT)
    time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)  # the user presses it again during the cleanup
    took = _ended(process, tag)
    err = log.read_text()
    assert process.returncode == 128 + signal.SIGINT, err
    assert took < 10, (took, err)
    assert "Traceback" not in err and "ended at once" in err, err
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl"]  # the lock released, no staged file
    assert (out / "results.jsonl").read_bytes() == _record_line()


# --------------------------------------------------------------------------- a full disk


def _file_size_limit(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # a write beyond it fails: EFBIG, like ENOSPC


def test_a_full_disk_is_one_line_and_resume_deletes_no_line(tmp_path: Path) -> None:
    """``--resume`` over a results file holding a newer release's record and another tool's line, under a
    file-size limit that the first new verdict (10 KB) fits and the second (17 KB) does not: both lines are
    kept where they were, and said so; the run stops at the full disk in one error line, exit 2, the first
    record whole and published, no part of the second left anywhere."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(NEWER + OTHER_TOOL)
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--backend", "eager", "--case", "mlp-s-infer", "--case",
         "mlp-s-train", "--no-isolate", "--out", "out", "--resume"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=child_env(),
        preexec_fn=lambda: _file_size_limit(16 * 1024))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "INTERNALERROR" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("conformance: error: no room to write: out/results.jsonl.partial: ")
    assert "1 verdict before it kept in out/results.jsonl" in errors[0]
    kept = [line for line in proc.stderr.splitlines() if "line kept as it is in out/results.jsonl" in line]
    assert len(kept) == 2 and "out/results.jsonl:1: not a results record" in kept[0], proc.stderr
    text = (out / "results.jsonl").read_bytes()
    assert text.startswith(NEWER + OTHER_TOOL) and text.endswith(b"\n") and text.count(b"\n") == 3
    loaded = read_records(out / "results.jsonl")
    assert [r.case for r in loaded.results] == ["mlp-s-infer"] and [f.line for f in loaded.foreign] == [1, 2]
    assert all(not p.truncated for p in loaded.problems)
    left = sorted(p.name for p in out.iterdir())
    assert set(left) <= {"results.jsonl", "junit.xml"}, left  # no torn .partial, no lock, no report into it
    if "junit.xml" in left:
        ET.parse(out / "junit.xml")  # whole, or not there


def test_an_append_that_finds_no_room_is_cut_off_again(tmp_path: Path) -> None:
    """The writer itself, in a child with a file-size limit: what fitted of the line is truncated away."""
    target = tmp_path / "results.jsonl"
    target.write_bytes(_record_line())
    script = ("import signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "from pathlib import Path\nfrom conformance.util.writes import DiskFull, append_line\n"
              "try:\n    append_line(Path(sys.argv[1]), b'x' * 20000 + b'\\n')\n"
              "except DiskFull as exc:\n    print(exc.filename, exc.strerror)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True,
                          env=child_env(), preexec_fn=lambda: _file_size_limit(len(_record_line()) + 4096))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{target} a file-size limit (ulimit -f) stopped the write"
    assert target.read_bytes() == _record_line()


# --------------------------------------------------------------------------- lines this release cannot read
# (``--resume`` keeping them is driven by the full-disk run above)

def test_merge_keeps_lines_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for shard, case in (("a", "mlp-s-infer"), ("b", "mlp-s-train")):
        (tmp_path / shard).mkdir()
        (tmp_path / shard / "results.jsonl").write_bytes(_record_line(case) + (NEWER if shard == "a" else OTHER_TOOL))
    assert cli.main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "m")]) == 0
    lines = (tmp_path / "m" / "results.jsonl").read_bytes().splitlines(keepends=True)
    assert NEWER in lines and OTHER_TOOL in lines and len(lines) == 4
    assert f"line kept as it is in {tmp_path / 'm' / 'results.jsonl'}" in capsys.readouterr().err


# --------------------------------------------------------------------------- manifests

ENTRY = '[[expect]]\ncase = "mlp-*"\nstatus = "fail-peak"\nreason = "r"\n'
ADAPTER = """from conformance.backends.eager import EagerBackend


class WithManifest(EagerBackend):
    name = "with-manifest"
    manifest_path = {path!r}
"""


def test_a_manifest_value_of_the_wrong_type_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('[[expect]]\nmechanism = ["layout-copy"]\nstatus = "fail-peak"\nreason = "r"\n'
                                     "max_excess = 4096\n")
    (tmp_path / "vendor_adapter.py").write_text(ADAPTER.format(path=str(tmp_path / "m.toml")))
    env = child_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{child_env()['PYTHONPATH']}")
    proc = conformance("run", "--backend", "vendor_adapter:WithManifest", "--case", "mlp-s-infer", "--no-isolate",
                       "--out", "out", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr, f"{tmp_path / 'm.toml'}: entry 1: 'mechanism' must be a mechanism's name "
                                 "(a string), got ['layout-copy']")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("line", "says"), [
    ("max_excess = -4096", "entry 1 (mlp-*): 'max_excess' must be a whole number of bytes >= 0, got -4096"),
    ("excess = -1", "entry 1 (mlp-*): 'excess' must be a whole number of bytes >= 0, got -1"),
    ("excess = 1.5", "'excess' must be a whole number of bytes >= 0, got 1.5"),
    ("max_excess = true", "'max_excess' must be a whole number of bytes >= 0, got True"),
    ('issue = ["a"]', "'issue' must be a string, got ['a']"),
    ("status = 3", "'status' must be a failing status (a string), got 3"),
    ("when = 3", "'when' must be a condition like \"torch<2.9\" or a list of them, got 3"),
], ids=["negative-max-excess", "negative-excess", "fraction", "bool", "issue-list", "status-int",
        "when-int"])
def test_every_numeric_and_typed_value_is_held_to_one_rule(tmp_path: Path, line: str, says: str) -> None:
    key = line.split(" =")[0]
    text = "\n".join(ln for ln in ENTRY.splitlines() if not ln.startswith(f"{key} ")) + f"\n{line}\n"
    (tmp_path / "m.toml").write_text(text)
    with pytest.raises(ManifestError) as caught:
        load_manifest("b", tmp_path / "m.toml")
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_negative_percentage_on_a_mechanism_entry_is_refused_as_before(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('[[expect]]\nmechanism = "layout-copy"\nstatus = "fail-peak"\nreason = "r"\n'
                                     "max_excess_pct = -5\n")
    with pytest.raises(ManifestError, match="'max_excess_pct' must be a percentage"):
        load_manifest("b", tmp_path / "m.toml")


# --------------------------------------------------------------------------- records from other releases


def _foreign_ops(directory: Path) -> None:
    directory.mkdir()
    records = [Result("op-add-0-float99-infer", "other", Status.PASS, family="ops", kind="inference"),
               Result("op-no_such_op_here-0-infer", "other", Status.FAIL_PARITY, reason="off", family="ops",
                      kind="inference"),
               Result("op-not-an-op-id", "other", Status.PASS, family="ops", kind="inference")]
    (directory / "results.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))


def test_coverage_lists_what_it_cannot_place(tmp_path: Path) -> None:
    _foreign_ops(tmp_path / "r")
    proc = conformance("coverage", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Not placed (3)" in proc.stdout
    assert "| `add [float99]` | dtype 'float99' is none the op sweep runs here" in proc.stdout
    assert "| `no_such_op_here` | no op 'no_such_op_here' in this torch's op database" in proc.stdout
    assert "| `op-not-an-op-id@other` | its id is not op-<op>-<k>[-<dtype>]-<step> |" in proc.stdout


def test_report_diff_and_triage_take_records_they_cannot_place(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _foreign_ops(tmp_path / "r")
    _foreign_ops(tmp_path / "s")
    assert cli.main(["report", str(tmp_path / "r"), "-o", str(tmp_path / "site"), "--no-history"]) == 0
    page = (tmp_path / "site" / "index.html").read_text()
    assert 'id="op-unplaced"' in page and "no_such_op_here" in page
    assert cli.main(["diff", str(tmp_path / "r"), str(tmp_path / "s")]) == 0
    assert cli.main(["triage", str(tmp_path / "r"), "--no-history"]) == 0
    assert "Traceback" not in capsys.readouterr().err


# --------------------------------------------------------------------------- the op sweep's options


def test_a_huge_shard_count_runs_its_shard_and_a_family_name_selects_the_family(tmp_path: Path) -> None:
    """``--case gen-dag`` (a family's name) selects its cases; shard 8 of 10**12 holds one of its eight (the last
    placed: an inference step, the cheapest to run), chosen without a list per shard."""
    proc = conformance("run", "--backend", "eager", "--case", "gen-dag", "--shard", "8/1000000000000", "--no-isolate",
                       "--no-report", "--out", "out", cwd=tmp_path, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert "conformance: 1 pair (eager)" in proc.stderr
    records = read_records(tmp_path / "out" / "results.jsonl").results
    assert len(records) == 1 and records[0].family == "gen-dag" and records[0].kind == "inference", proc.stderr


def test_a_shard_range_check_costs_nothing_in_proportion_to_its_count() -> None:
    costs = [PairCost(f"c{i}@b", float(i % 7 + 1)) for i in range(500)]
    t0 = time.perf_counter()
    assert select_shard(costs, Shard(10**12, 10**12)) == set()
    assert len(select_shard(costs, Shard(3, 10**12))) == 1
    assert time.perf_counter() - t0 < 1.0
    with pytest.raises(ValueError, match="below 10\\*\\*18"):
        Shard.parse("1/" + "9" * 5000)
    small = [select_shard(costs, Shard(i, 7)) for i in range(1, 8)]  # the balanced split is unchanged
    assert set().union(*small) == {c.pair_id for c in costs} and sum(map(len, small)) == len(costs)


def test_a_bad_op_sample_count_is_one_line(tmp_path: Path) -> None:
    proc = conformance("list", "cases", cwd=tmp_path, env=child_env(CONFORMANCE_OP_SAMPLES="four"))
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr, "CONFORMANCE_OP_SAMPLES='four': must be a whole number of samples per op from 1 to "
                                 "200")


@pytest.mark.parametrize("value", ["1e3", "0", "-3", "201", "2.5", "٣"])
@pytest.mark.parametrize("argv", [["list", "cases", "--case", "op-add-*"],
                                  ["run", "--backend", "eager", "--case", "op-add-*", "--out", "never"]],
                         ids=["list", "run"])
def test_every_bad_op_sample_count_is_refused_before_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str], value: str,
                                                              argv: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONFORMANCE_OP_SAMPLES", value)
    assert cli.main(argv) == 2
    assert_one_line(capsys.readouterr().err, f"CONFORMANCE_OP_SAMPLES={value!r}: must be a whole number")
    assert not any(tmp_path.iterdir())


# ``list cases`` naming the op sweep without building it reads the one real ``conformance list cases`` that
# tests/test_cli_corrects.py runs (test_list_cases_names_the_op_sweep_without_building_it there).


def test_update_manifest_keeps_the_lines_of_the_entries_it_keeps(tmp_path: Path) -> None:
    """``--update-manifest``'s rewrite: an entry it keeps keeps its comments and its lines as written; only what
    changed is written anew (it used to rewrite every entry, dropping every comment but the header)."""
    from conformance.checks.manifest import write_updated

    path = tmp_path / "m.toml"
    kept = ('# a note on the loop entry, by hand\n[[expect]]\ncase = "loop-rnn-t3"  # observed on the nightly\n'
            'status = "fail-peak"\nreason = "keeps the carry"\nexcess = 1\n')
    path.write_text('# header\n\n' + kept + '\n[[expect]]\ncase = "mlp-s-train"\nstatus = "fail-residual"\n'
                    'reason = "leaks its grads"\nexcess = 8\n')
    m = load_manifest("b", path)
    write_updated(m, [Result("loop-rnn-t3", "b", Status.XFAIL, raw_status=Status.FAIL_PEAK, excess_bytes=1),
                      Result("mlp-s-train", "b", Status.XPASS, raw_status=Status.PASS)])
    text = path.read_text()
    assert text.startswith("# header\n") and kept in text and "mlp-s-train" not in text
    assert [e.case for e in load_manifest("b", path).entries] == ["loop-rnn-t3"]
