"""Valid means readable: every record the results schema accepts is read by every reader without a crash,
and every line the harness writes (a record read back and written again, as merge and resume do) is
accepted by the schema again.  Records are generated from the shipped schema itself, with unknown keys
at every level it leaves open (the names of the harness's own fields among them)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.api.case import resolve
from conformance.api.result import DomainFigures, MemoryFigures, Result, append_result
from conformance.api.verdict import CheckName, Status, combine
from conformance.checks.baseline import Tolerance, apply_baseline, diff, format_diff, load_baseline
from conformance.checks.blame import share
from conformance.checks.cause import fill_cause
from conformance.output import history
from conformance.output.merge import merge
from conformance.output.outdir import claim
from conformance.output.records import check_record, read_records, schema
from conformance.output.report import build_page, render
from conformance.output.triage import render_text, triage
from conformance.output.version_matrix import version_matrix
from conformance.run.engine import run_case
from tests.sweep_sample import full

#: names an open object may get besides the schema's own: every field name the readers know, and others
KNOWN_NAMES = sorted({f.name for f in fields(MemoryFigures)} | {f.name for f in fields(DomainFigures)}
                     | {f.name for f in fields(Result)} | {"calls", "call", "figures", "torch"})
JSON_LEAF = (st.none() | st.booleans() | st.integers(-(2**40), 2**40)
             | st.floats(allow_nan=False, allow_infinity=False, width=32) | st.text(max_size=6))
JSON = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(KNOWN_NAMES) | st.text(max_size=4), inner, max_size=3),
                    max_leaves=6)
EXTRA_KEY = st.sampled_from(KNOWN_NAMES) | st.text(min_size=1, max_size=4)


def from_schema(node: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under ``node``, for the keywords the results schema uses."""
    if "$ref" in node:
        return from_schema(root["$defs"][node["$ref"].rsplit("/", 1)[1]], root)
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    types = node.get("type")
    if types is None:
        return JSON
    if isinstance(types, list):
        return st.one_of([from_schema({**node, "type": t}, root) for t in types])
    if types == "string":
        return st.text(min_size=node.get("minLength", 0), max_size=6)
    if types == "integer":
        return st.integers(-(2**40), 2**40)
    if types == "number":
        return st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False, width=32)
    if types == "boolean":
        return st.booleans()
    if types == "null":
        return st.none()
    if types == "array":
        return _array(node, root)
    assert types == "object", node
    return _object(node, root)


def _array(node: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    items = from_schema(node["items"], root) if "items" in node else JSON
    if "prefixItems" in node:
        prefix = st.tuples(*(from_schema(p, root) for p in node["prefixItems"]))
        return st.tuples(prefix, st.lists(JSON, max_size=1)).map(lambda t: [*t[0], *t[1]])
    return st.lists(items, max_size=3)


def _object(node: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    props = node.get("properties", {})
    required = set(node.get("required", ()))
    extra = node.get("additionalProperties", True)
    fixed = st.fixed_dictionaries({k: from_schema(v, root) for k, v in props.items() if k in required},
                                  optional={k: from_schema(v, root) for k, v in props.items() if k not in required})
    if extra is False:
        return fixed
    values = JSON if extra is True else from_schema(extra, root)
    more = st.dictionaries(EXTRA_KEY.filter(lambda k: k not in props), values, max_size=2)
    return st.tuples(fixed, more).map(lambda t: {**t[1], **t[0]})


def _array_of_records() -> st.SearchStrategy[list[dict[str, Any]]]:
    root = schema()
    record = from_schema(root, root).filter(lambda r: check_record(r) is None)
    return st.lists(record, min_size=1, max_size=3, unique_by=lambda r: (r["case"], r["backend"]))


@settings(max_examples=100 if full() else 25, deadline=None,  # CI: 25 examples; the nightly: 100
          suppress_health_check=list(HealthCheck))
@given(_array_of_records())
def test_every_valid_record_is_readable_by_every_reader(records: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shard = root / "shard"
        shard.mkdir()
        (shard / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        loaded = read_records(shard / "results.jsonl")
        assert not loaded.problems, loaded.problems
        results = loaded.results
        for r in results:  # written again (merge, resume, the history's fingerprint): still a valid record
            again = json.loads(json.dumps(r.to_json(), default=str))
            assert check_record(again) is None, (check_record(again), again)
        merged = merge([shard], root / "merged")  # merge
        assert [r.case for r in read_records(root / "merged" / "results.jsonl").results] == [r.case for r in merged]
        run_dir = claim(shard, "resume")  # resume
        try:
            assert len(run_dir.kept) == len(results)
        finally:
            run_dir.release()
        db = root / "history.db"  # history, then the report that reads it
        render(build_page(results, [str(shard)], db))
        version_matrix(results)
        baseline = load_baseline(shard)  # baseline and diff
        for r in results:
            apply_baseline(Result.from_json(r.to_json()), baseline[(r.case, r.backend)], Tolerance.parse("0"), "b")
        format_diff(diff(results, results), show_all=True)
        history.changes(db)
        render_text(triage(results, db, fill_cause))  # triage, first sightings from the history


def test_a_written_record_with_hostile_findings_reads_back() -> None:
    """Findings are written after the engine's figures; the reader puts them back under findings."""
    result = Result("c", "b", "pass", memory=MemoryFigures(measured_peak_bytes=1, findings={"vendor": [1, 2]}))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.jsonl"
        append_result(path, result)
        back = read_records(path).results[0]
    assert back.memory is not None and back.memory.findings == {"vendor": [1, 2]}


def test_merge_reads_an_unknown_domain_key(tmp_path: Path) -> None:
    """A record the schema accepts with a key this version does not know under ``memory.domains``."""
    from conformance.cli.main import main as cli

    record = Result("mlp-s-infer", "vendor", "pass", memory=MemoryFigures(measured_peak_bytes=1)).to_json()
    record["memory"]["domains"] = {"vendor-hbm": {"peak_bytes": 5, "residual_bytes": 0, "bank": 3}}
    assert check_record(record) is None
    shard = tmp_path / "shard"
    shard.mkdir()
    (shard / "results.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert cli(["merge", str(shard), "-o", str(tmp_path / "merged")]) == 0
    merged = read_records(tmp_path / "merged" / "results.jsonl").results
    assert merged[0].memory is not None and merged[0].memory.domains is not None
    assert merged[0].memory.domains["vendor-hbm"].peak_bytes == 5


# --------------------------------------------------------------------------- one story per record
# Records from real runs: for every failing memory verdict, the headline figures (``memory``) are the
# deciding check's, they break the contract they quote, the deciding reason quotes them, and the blamed
# bytes add up to the excess or the record says what else makes it up.



def story_problems(r: Result) -> list[str]:
    """Where a record tells another story than its verdict (empty: one story)."""
    problems: list[str] = []
    memory = r.memory
    raw = Status.parse(r.raw_status or r.status)
    deciding = combine(r.checks)
    if memory is None:
        return ["no memory figures"] if raw.is_memory else []
    contract = memory.contract
    if not raw.is_memory:  # a pass (or a failure no memory check decided): the peak's figures, which pass
        if raw is Status.PASS and (contract is None or contract.violated):
            problems.append(f"a pass beside a contract its figures break: {contract}")
        return problems
    if deciding is None or deciding.status is not raw:
        return [f"{raw} but the checks decide {deciding}"]
    if memory.check != deciding.name.value or contract != deciding.contract or contract is None:
        return [f"headline of check {memory.check} ({contract}), verdict of {deciding.name} ({deciding.contract})"]
    if not contract.violated:
        problems.append(f"{raw} beside figures within their contract: {contract}")
    if r.excess_bytes != contract.excess_bytes:
        problems.append(f"excess {r.excess_bytes} B, contract's {contract.excess_bytes} B")
    reason = deciding.reason
    if deciding.name == CheckName.PEAK:
        if not (memory.measured_peak_bytes == contract.measured_bytes and memory.model_peak_bytes is not None):
            problems.append(f"measured peak {memory.measured_peak_bytes} B, contract's {contract.measured_bytes} B")
        for quoted in (f"measured peak {memory.measured_peak_bytes} B", f"{memory.model_peak_bytes} B"):
            if quoted not in reason:
                problems.append(f"the reason does not quote {quoted!r}: {reason}")
        if memory.measured_peak_bytes is not None and memory.model_peak_bytes is not None and memory.peak_contract \
                and memory.peak_contract.startswith("<=") and memory.measured_peak_bytes <= memory.model_peak_bytes:
            problems.append(f"fail-peak beside measured {memory.measured_peak_bytes} B <= model "
                            f"{memory.model_peak_bytes} B")
    elif deciding.name == CheckName.RESIDUAL:
        if memory.measured_residual_bytes != contract.measured_bytes or memory.measured_residual_bytes == \
                memory.model_residual_bytes:
            problems.append(f"residual {memory.measured_residual_bytes} B vs model {memory.model_residual_bytes} B "
                            f"beside the contract's {contract.measured_bytes} B")
        for quoted in (f"residual {memory.measured_residual_bytes} B",
                       f"model residual {memory.model_residual_bytes} B"):
            if quoted not in reason:
                problems.append(f"the reason does not quote {quoted!r}: {reason}")
    elif f"{contract.measured_bytes} B" not in reason:
        problems.append(f"the reason does not quote the excess {contract.measured_bytes} B: {reason}")
    explained = sum(share(b) for b in memory.blamed) + (memory.blame_unexplained_bytes or 0)
    if r.excess_bytes is not None and r.excess_bytes > 0 and explained != r.excess_bytes:
        problems.append(f"blamed {[share(b) for b in memory.blamed]} B + unexplained {memory.blame_unexplained_bytes} "
                        f"B != excess {r.excess_bytes} B")
    if memory.blame_unexplained_bytes and not memory.blame_note:
        problems.append("a remainder of the excess with no word on what makes it up")
    return problems


def _verdict(case_id: str, backend: Any) -> Result:
    case = resolve(case_id)
    assert case is not None
    result = run_case(case, backend)
    line = json.loads(json.dumps(result.to_json(), default=str))  # as results.jsonl holds it
    assert check_record(line) is None, check_record(line)
    return Result.from_json(line)


def test_a_planted_leak_is_blamed_on_the_storage_kept_not_a_same_size_stand_in(tmp_path: Path) -> None:
    """An 8 B float64 copy of the loss kept in a module's list each step: the optimizer's wrapped scalars are
    8 B too, and blame must not name one of them: it names the storage by its address (what holds it).
    The report's pair panel shows the same story: the residual contract's figures, what holds the leak."""
    from tests.planted_backends import LossLogBackend

    r = _verdict("mlp-s-train", LossLogBackend())
    assert r.status == "fail-residual", r.reason
    assert story_problems(r) == []
    assert r.memory is not None and r.memory.blamed
    kept = r.memory.blamed[0]
    assert kept["bytes"] == 8
    assert any("tests.planted_backends.LOSS_LOG[" in h for h in kept.get("held_by", [])), kept
    assert kept["model_death"] == "not in model", kept  # not pinned on a model storage of that size
    assert not kept["producer"].startswith("optimizer:"), kept
    assert "LOSS_LOG" in r.reason and "could not identify the storage" in r.reason, r.reason
    html = render(build_page([r], [str(tmp_path)], tmp_path / "history.db"))
    assert 'data-field="contract" data-measured="8" data-low="0" data-high="0"' in html
    assert "residual after probed call" in html and "tests.planted_backends.LOSS_LOG[" in html


def test_eager_and_planted_faults_tell_one_story() -> None:
    from conformance.backends.eager import EagerBackend
    from tests.planted_backends import HoldActivationBackend, LeakIntermediateBackend

    records = [_verdict("mlp-s-train", EagerBackend()), _verdict("mlp-s-infer", EagerBackend()),
               _verdict("mlp-s-train", HoldActivationBackend()), _verdict("mlp-s-infer", LeakIntermediateBackend())]
    assert [str(r.status) for r in records] == ["pass", "pass", "fail-peak", "fail-residual"], \
        [r.reason for r in records]
    for r in records:
        assert story_problems(r) == [], (r.case, r.backend, r.reason)


@pytest.mark.slow
def test_inductor_records_tell_one_story() -> None:
    """The layout copy (a peak over the received graphs, set apart from the kernels' own transients) and the
    while_loop's host code (the program check decides, below a model peak the record once showed)."""
    from conformance.backends.inductor import InductorBackend

    conv = _verdict("mod-Conv2d-infer", InductorBackend())
    loop = _verdict("loop-rnn-t3", InductorBackend())
    assert conv.status == loop.status == "fail-peak", (conv.reason, loop.reason)  # before any manifest
    assert combine(loop.checks) is not None and combine(loop.checks).name == CheckName.PROGRAM  # type: ignore[union-attr]
    for r in (conv, loop):
        assert story_problems(r) == [], (r.case, [c.reason for c in r.checks])
    assert loop.memory is not None and loop.memory.model_source == "generated program"
