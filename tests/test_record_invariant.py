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

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.api.result import DomainFigures, MemoryFigures, Result, append_result
from conformance.checks.baseline import Tolerance, apply_baseline, diff, format_diff, load_baseline
from conformance.checks.cause import fill_cause
from conformance.output import history
from conformance.output.merge import merge
from conformance.output.outdir import claim
from conformance.output.records import check_record, read_records, schema
from conformance.output.report import build_page, render
from conformance.output.triage import render_text, triage
from conformance.output.version_matrix import version_matrix

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


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
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
