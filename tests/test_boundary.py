"""What an adapter returns is checked where it enters the harness: a wrong return is a ``fail-run`` that
names the hook, the engine's own figures stay the engine's, and the record written is one the harness's
own reader accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.api.adapter import load_backend_class
from conformance.api.case import resolve
from conformance.api.result import Result, append_result
from conformance.output.records import read_records
from conformance.run.engine import run_case


def run(spec: str, case: str = "mlp-s-infer") -> Result:
    found = resolve(case)
    assert found is not None
    return run_case(found, load_backend_class(spec, spec))


def read_back(result: Result, tmp_path: Path) -> Result:
    """The record as the run writes it, read by the harness's own reader (resume, merge, report)."""
    path = tmp_path / "results.jsonl"
    append_result(path, result)
    loaded = read_records(path)
    assert not loaded.problems, loaded.problems
    return loaded.results[0]


@pytest.fixture(scope="module")
def eager() -> Result:
    return run("conformance.backends.eager:EagerBackend")


@pytest.mark.parametrize(("spec", "hook"), [
    ("NonStringNotesBackend", "CompiledStep.notes() returned a list whose item 1 is 42 (int), not a str"),
    ("ClobberFindingsBackend", "CompiledStep.memory_findings() returned 'timeline', one of the harness's own"),
    ("BadVersionsBackend", "Backend.versions() returned 'torch' (str): ['2', '13'] (list)"),
    ("BadModelBackend", "CompiledStep.program_model() returned 'a model' (str), not a LifetimeModel"),
])
def test_a_bad_hook_return_is_a_fail_run_naming_it(spec: str, hook: str, eager: Result, tmp_path: Path) -> None:
    result = read_back(run("tests.hostile_backends:" + spec), tmp_path)
    assert result.status == "fail-run"
    assert hook in result.reason, result.reason
    if result.memory is not None:  # the engine's figures, not the backend's
        assert eager.memory is not None
        assert result.memory.measured_peak_bytes == eager.memory.measured_peak_bytes
        assert result.memory.timeline and all(len(p) == 2 for p in result.memory.timeline)
        assert "timeline" not in result.memory.findings and "measured_peak_bytes" not in result.memory.findings
