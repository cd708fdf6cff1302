"""Property-based fuzzing of every reader of outside input, with Hypothesis.

Readers: results.jsonl (``read_records``/``read_usable``), manifests (``load_manifest``), junit
(``name_junit_classes``, resume's merge), run history (``history``), baselines (``load_baseline``,
tolerances), triage (``triage_dir``: results and history), ``--cases`` modules (``load_source``) and
run options (the CLI's checks).

Property: a reader either returns (a bad line or entry skipped with a warning) or raises the
harness's own one-line error (RecordsError, ManifestError, HistoryError, BaselineError, CaseError,
OptionError, OutDirError, or the CLI's exit 2 with one line); never another exception or a write
outside its directory.  A hang shows as a test that does not finish (the CLI examples have a
120 s subprocess timeout; in-process examples have no per-example deadline).

Readers are called in-process (fast); the CLI runs as a subprocess for a few examples only.
Example counts are set per test (``EXAMPLES``); the whole file takes well under a minute on 2 cores.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.api.result import MemoryFigures, Result
from conformance.checks.baseline import BaselineError, Tolerance, load_baseline
from conformance.checks.cause import fill_cause
from conformance.checks.manifest import ManifestError, load_manifest
from conformance.output import history
from conformance.output.outdir import OutDirError, claim, name_junit_classes
from conformance.output.records import (
    RecordsError,
    _check_names,
    _fast_for,
    _validator,
    check_record,
    read_records,
    read_usable,
)
from conformance.output.triage import render_text, triage_dir
from tests.conftest import case_registry_saver
from tests.test_bad_inputs import child_env

#: examples per property (CI runs these; the subprocess one runs a handful)
EXAMPLES = {"records": 400, "manifest": 300, "junit": 200, "history": 100, "baseline": 200, "cases": 100,
            "options": 60, "cli": 6, "triage": 150, "fast": 60}
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

GOOD = {"case": "mlp-s-infer", "backend": "eager", "status": "pass", "reason": "", "kind": "inference",
        "family": "mlp", "seed": 0}

# --------------------------------------------------------------------------- strategies

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=12)
record_keys = st.sampled_from([*Result("c", "b", "pass").to_json().keys(), "memory", "timing", "checks", "x"])


@st.composite
def record_line(draw: st.DrawFn) -> bytes:
    """A results line: a valid record with fields replaced or added, JSON that is not a record, or bytes."""
    kind = draw(st.sampled_from(["mutated", "mutated", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200)).replace(b"\n", b" ")
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    record: dict[str, Any] = dict(GOOD)
    for key, value in draw(st.dictionaries(record_keys, json_values, max_size=4)).items():
        record[key] = value
    for key in draw(st.lists(st.sampled_from(sorted(GOOD)), max_size=2)):
        record.pop(key, None)
    return json.dumps(record).encode()


results_files = st.lists(record_line(), max_size=6).map(lambda lines: b"\n".join(lines) + b"\n")
toml_strings = st.text(max_size=30).map(json.dumps)  # JSON strings are TOML basic strings (mostly)
toml_values = st.one_of(toml_strings, st.integers(-10**20, 10**20).map(str), st.sampled_from(
    ["true", "[]", "['a', 1]", "{x = 1}", "1.5", "nan", "1979-05-27", "'fail-peak'", "\"pass\""]))


@st.composite
def manifest_text(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.text(max_size=200))
    keys = ["case", "status", "reason", "issue", "excess", "max_excess", "when", "owner", "cause", "max_excess_pct"]
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        parts.append("[[expect]]")
        for key in draw(st.lists(st.sampled_from(keys), max_size=6, unique=True)):
            parts.append(f"{key} = {draw(toml_values)}")
    return "\n".join(parts) + "\n"


def _no_writes_outside(root: Path, allowed: Path) -> None:
    """Nothing under ``root`` appeared outside ``allowed``."""
    stray = [p for p in root.rglob("*") if allowed not in p.parents and p != allowed]
    assert stray == [], stray


# --------------------------------------------------------------------------- results.jsonl


@settings(max_examples=EXAMPLES["records"], **FUZZ)
@given(data=results_files)
def test_results_reader(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(data)
    loaded = read_records(path)
    for problem in loaded.problems:
        line = problem.describe(path)
        assert "\n" not in line and str(path) in line
    assert len(loaded.results) + len(loaded.problems) == sum(1 for ln in data.split(b"\n") if ln.strip())
    for result in loaded.results:  # what was kept can be used: rendered, hashed, written back
        json.dumps(result.to_json(), default=str)
    try:
        read_usable(path)
    except RecordsError as exc:
        assert "\n" not in str(exc)


def _with_memory() -> dict[str, Any]:
    memory = MemoryFigures(timeline=[(0.0, 8), (1.5, 0)], model_timeline=[("fw:mm", 8)], peak_per_step=[8],
                           residual_per_step=[0], program_timeline=[("fw:line 1 buf0 = empty_strided_cpu(...)", 8)])
    record = json.loads(json.dumps(Result("mlp-s-infer", "eager", "pass", memory=memory, notes=["a"]).to_json()))
    assert _validator().is_valid(record)
    return record


#: a long array's item kinds (timelines' points, per-step figures); ``notes`` holds strings
ITEM_SHAPES: dict[str, Any] = {"timeline": ("number", "integer"), "model_timeline": ("string", "integer"),
                               "program_timeline": ("string", "integer"), "peak_per_step": "integer",
                               "residual_per_step": "integer"}
#: values at and past the edges of what a slot takes
EDGES = [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 5.0, 5.5, -0.0, True, False, "5", "", None, float("nan"),
         float("inf"), [], {}]
RIGHT = {"number": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**63), 2**63 - 1)),
         "integer": st.integers(-(2**63), 2**63 - 1), "string": st.text(max_size=5)}


def _slot(draw: st.DrawFn, kind: str) -> Any:
    """Mostly a right value for ``kind``; one time in four one at or past its edges."""
    return draw(RIGHT[kind]) if draw(st.integers(0, 3)) else draw(st.sampled_from(EDGES))


@st.composite
def near_valid_record(draw: st.DrawFn) -> dict[str, Any]:
    """A valid record whose long arrays (and notes) hold drawn items: each slot mostly right, now and then at or
    past an edge, an item now and then of another shape; so whole records are valid often, and invalid by one
    value often."""
    record = _with_memory()
    for name in draw(st.lists(st.sampled_from(sorted(ITEM_SHAPES)), max_size=5, unique=True)):
        shape, items = ITEM_SHAPES[name], []
        for _ in range(draw(st.integers(0, 2))):
            if not draw(st.integers(0, 15)):
                items.append(draw(json_values))
            else:
                items.append(_slot(draw, shape) if isinstance(shape, str) else [_slot(draw, k) for k in shape])
        record["memory"][name] = items
    record["notes"] = [_slot(draw, "string") for _ in range(draw(st.integers(0, 2)))]
    return record


@settings(max_examples=EXAMPLES["fast"], **FUZZ)
@given(line=record_line(), record=near_valid_record())
def test_the_fast_record_check_answers_as_the_whole_schema(line: bytes, record: dict[str, Any]) -> None:
    """The reader's fast path (the long arrays' items checked apart) accepts exactly the records the whole
    schema accepts: on mutated records, and on valid ones whose timelines, steps and notes hold any values."""
    try:
        mutated = json.loads(line)
    except ValueError:
        mutated = None
    for data in (mutated, record):
        assert (check_record(data) is None) == _validator().is_valid(data), data


def _one_value_changed() -> list[tuple[str, Any]]:
    """A valid record's long arrays and notes, each item slot set to each edge value in turn (the rest right), and
    each item replaced by one of another shape: where a fast check would part from the schema, if anywhere."""
    changed: list[tuple[str, Any]] = []
    right = {"number": 1.5, "integer": 8, "string": "x"}
    for name, shape in [*ITEM_SHAPES.items(), ("notes", "string")]:
        kinds = [shape] if isinstance(shape, str) else list(shape)
        for i in range(len(kinds)):
            for edge in EDGES:
                item = [right[k] if j != i else edge for j, k in enumerate(kinds)]
                changed.append((name, [edge] if isinstance(shape, str) else [item]))
        changed += [(name, [[right[k] for k in kinds][:1]]), (name, [[right[k] for k in kinds] + [1]]), (name, None),
                    (name, [{"0": 1}]), (name, "x")]
    return changed


def test_the_fast_record_check_answers_as_the_whole_schema_at_every_edge() -> None:
    """Every item slot of the long arrays at each edge value (bools, 2**63, 5.0, NaN, strings, None, containers),
    and items of other shapes: the fast path accepts a record exactly when the whole schema does."""
    valid = 0
    for name, value in _one_value_changed():
        record = _with_memory()
        (record if name == "notes" else record["memory"])[name] = value
        whole = _validator().is_valid(record)
        assert (check_record(record) is None) == whole, (name, value)
        valid += whole
    assert 0 < valid < len(_one_value_changed())  # both answers were asked for


def test_the_fast_record_check_covers_the_long_arrays() -> None:
    """The arrays that make most of a record's values are the ones checked apart (else the fast path is gone)."""
    covered = {path for path, _ in _fast_for(_check_names()).items}
    assert {("memory", "timeline"), ("memory", "model_timeline"), ("memory", "program_timeline")} <= covered


# --------------------------------------------------------------------------- manifests


@settings(max_examples=EXAMPLES["manifest"], **FUZZ)
@given(text=manifest_text(), versions=st.dictionaries(st.sampled_from(["torch", "iree-base-compiler"]),
                                                     st.text(max_size=10), max_size=2))
def test_manifest_reader(tmp_path: Path, text: str, versions: dict[str, str]) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        manifest = load_manifest("fuzz", path, versions)
    except ManifestError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return
    for entry in manifest.entries:
        manifest.lookup(entry.case)


# --------------------------------------------------------------------------- junit

xml_text = st.one_of(
    st.text(max_size=200),
    st.builds(lambda name, cls, body: f'<testsuites><testsuite tests="{body}"><testcase name={json.dumps(name)} '
                                      f'classname={json.dumps(cls)}/></testsuite></testsuites>',
              st.one_of(st.text(max_size=40), st.text(max_size=20).map(lambda s: f"test_conformance[{s}]")),
              st.text(max_size=10), st.text(max_size=5)),
)


@settings(max_examples=EXAMPLES["junit"], **FUZZ)
@given(junit=xml_text, results=results_files)
def test_junit_reader(tmp_path: Path, junit: str, results: bytes) -> None:
    (tmp_path / "junit.xml").write_text(junit, encoding="utf-8", errors="surrogatepass")
    (tmp_path / "results.jsonl").write_bytes(results)
    name_junit_classes(tmp_path / "junit.xml", tmp_path / "results.jsonl")  # never raises: a bad junit is kept


@settings(max_examples=EXAMPLES["junit"] // 2, **FUZZ)
@given(junit=xml_text, results=results_files)
def test_resume_reads_any_earlier_run(tmp_path: Path, junit: str, results: bytes) -> None:
    root = tmp_path / uuid.uuid4().hex[:8]
    out = root / "out"
    out.mkdir(parents=True)
    (out / "junit.xml").write_text(junit, encoding="utf-8", errors="surrogatepass")
    (out / "results.jsonl").write_bytes(results)
    try:
        run_dir = claim(out, "resume")
    except OutDirError as exc:
        assert "\n" not in str(exc)
        return
    try:
        run_dir.publish(1)
    finally:
        run_dir.release()
    _no_writes_outside(root, out)


# --------------------------------------------------------------------------- history


sql_values = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=20),
                       st.binary(max_size=10))


@settings(max_examples=EXAMPLES["history"], **FUZZ)
@given(kind=st.sampled_from(["bytes", "sqlite", "real"]), garbage=st.binary(max_size=300),
       column=st.sampled_from(["started_at", "label", "fingerprint", "backend", "case_id", "status",
                               "measured_peak_bytes", "model_peak_bytes", "run_id"]),
       value=sql_values)
def test_history_reader(tmp_path: Path, kind: str, garbage: bytes, column: str, value: object) -> None:
    path = tmp_path / f"h-{uuid.uuid4().hex[:8]}.sqlite"
    if kind == "bytes":
        path.write_bytes(garbage)
    elif kind == "sqlite":
        path.write_bytes(b"SQLite format 3\x00" + garbage)
    else:
        history.record_run(path, [Result("mlp-s-infer", "eager", "pass"), Result("mlp-s-train", "eager", "crash")])
        history.record_run(path, [Result("mlp-s-infer", "eager", "fail-peak")])
        with sqlite3.connect(path) as db:
            table = "runs" if column in ("started_at", "label", "fingerprint") else "results"
            try:
                db.execute(f"UPDATE {table} SET {column} = ?", (value,))
            except sqlite3.IntegrityError:
                pass
    try:
        history.check(path)
        history.runs(path)
        history.backend_trends(path)
        history.case_trends(path)
        history.changes(path)
    except history.HistoryError as exc:
        assert "\n" not in str(exc)


# --------------------------------------------------------------------------- triage


@settings(max_examples=EXAMPLES["triage"], **FUZZ)
@given(results=results_files, history_kind=st.sampled_from(["none", "garbage", "real"]),
       garbage=st.binary(max_size=200), as_dir=st.booleans())
def test_triage_reader(tmp_path: Path, results: bytes, history_kind: str, garbage: bytes, as_dir: bool) -> None:
    """Triage reads a results directory and its history: it returns, or raises one line of its own."""
    work = tmp_path / f"t-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    (work / "results.jsonl").write_bytes(results)
    db = work / "history.sqlite"
    if history_kind == "garbage":
        db.write_bytes(garbage)
    elif history_kind == "real":
        history.record_run(db, [Result("mlp-s-infer", "eager", "fail-peak", cause="peak: x", cause_parts=["peak: x"])])
    before = sorted(p.name for p in work.iterdir())
    try:
        found, warnings = triage_dir(work if as_dir else work / "results.jsonl", fill=fill_cause)
        render_text(found)
        assert all("\n" not in w for w in warnings)
    except (RecordsError, history.HistoryError) as exc:
        assert "\n" not in str(exc)
    assert sorted(p.name for p in work.iterdir()) == before  # triage writes nothing


# --------------------------------------------------------------------------- baselines


@settings(max_examples=EXAMPLES["baseline"], **FUZZ)
@given(results=results_files, tolerance=st.text(max_size=12), as_dir=st.booleans())
def test_baseline_reader(tmp_path: Path, results: bytes, tolerance: str, as_dir: bool) -> None:
    (tmp_path / "results.jsonl").write_bytes(results)
    try:
        load_baseline(tmp_path if as_dir else tmp_path / "results.jsonl")
    except BaselineError as exc:
        assert "\n" not in str(exc)
    try:
        Tolerance.parse(tolerance)
    except BaselineError as exc:
        assert "\n" not in str(exc)


# --------------------------------------------------------------------------- --cases modules

case_ids = st.one_of(st.text(max_size=140), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,20}", fullmatch=True))
REGISTERING = """
from conformance.api.case import Case, register, resolve

base = resolve("mlp-s-infer")
register(Case({case_id!r}, {kind!r}, "fuzz", 0, base.builder))
"""


@pytest.fixture
def case_registry() -> Any:
    """The registry and ``--cases`` bookkeeping as they were: fuzzed sources must not leak into other tests."""
    from conformance.api import case as case_mod

    case_mod.all_cases()
    restore = case_registry_saver()
    yield case_mod, restore
    restore()


@settings(max_examples=EXAMPLES["cases"], **FUZZ)
@given(source=st.one_of(st.text(max_size=120),
                        st.builds(lambda i, k: REGISTERING.format(case_id=i, kind=k), case_ids,
                                  st.sampled_from(["inference", "train_step", "loop", "bogus"]))))
def test_cases_module_reader(tmp_path: Path, case_registry: Any, source: str) -> None:
    case_mod, restore = case_registry
    path = tmp_path / f"fuzz_{uuid.uuid4().hex[:8]}.py"
    path.write_text(source, encoding="utf-8", errors="surrogatepass")
    try:
        case_mod.load_source(str(path))
    except case_mod.CaseError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
    else:
        assert all(case_mod.id_problem(c.id) is None for c in case_mod._REGISTRY.values())
    finally:
        restore()


# --------------------------------------------------------------------------- run options


class ReachedPytest(Exception):
    """The options were good: the run got as far as starting pytest."""


OPTION_FLAGS = ["--timeout", "--steps", "--shard", "--baseline-tolerance", "--generated", "--hypothesis-seed",
                "--out", "--baseline", "--history", "--report", "--shard-durations", "-n"]


@settings(max_examples=EXAMPLES["options"], **FUZZ)
@given(options=st.lists(st.tuples(st.sampled_from(OPTION_FLAGS),
                                  st.one_of(st.text(max_size=20), st.integers(-5, 10**6).map(str),
                                            st.sampled_from(["0", "1/2", "3/2", "auto", "5%", "nan", "inf",
                                                             "-1", "..", "/", "results.jsonl"]))),
                        min_size=1, max_size=3))
def test_run_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                     options: list[tuple[str, str]]) -> None:
    from conformance.cli import main as cli_main

    def reached(*args: object, **kwargs: object) -> int:
        raise ReachedPytest

    work = tmp_path / f"w-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    (work / "in").write_text("not a results file\n")
    monkeypatch.setattr(cli_main.pytest, "main", reached)
    monkeypatch.chdir(work)
    argv = ["run", "--backend", "eager", "--case", "mlp-s-infer", "--no-isolate", "--out", "out"]
    argv += [part for flag, value in options for part in (flag, value)]
    capsys.readouterr()
    restore = case_registry_saver()  # `--generated N` registers N programs: not for the tests that follow
    try:
        code = cli_main.main(argv)
    except SystemExit as exc:  # argparse: a value of the wrong type
        code = exc.code
    except ReachedPytest:
        return
    finally:
        restore()
    err = capsys.readouterr().err
    assert code == 2, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1 and "Traceback" not in err, err
    assert not any(p.name.startswith("results.jsonl") for p in work.rglob("*")), err


# --------------------------------------------------------------------------- the CLI, end to end


@settings(max_examples=EXAMPLES["cli"], **FUZZ)
@given(results=results_files, command=st.sampled_from(["report", "diff", "merge", "triage"]))
def test_cli_readers_end_to_end(tmp_path: Path, results: bytes, command: str) -> None:
    work = tmp_path / f"w-{uuid.uuid4().hex[:8]}"
    (work / "a").mkdir(parents=True)
    (work / "a" / "results.jsonl").write_bytes(results)
    args = {"report": ["report", "a", "-o", "site", "--no-history"], "diff": ["diff", "a", "a"],
            "merge": ["merge", "a", "-o", "merged"], "triage": ["triage", "a"]}[command]
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=work, capture_output=True,
                          text=True, timeout=120, env=child_env())
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert {p.name for p in work.iterdir()} <= {"a", "site", "merged"}
