"""A dense ``while_loop`` on an ``aot_autograd`` backend holds each trip's predicate while the next body runs.

torch's dense kernel (``while_loop_dense``: ``should_loop = cond_fn(...)``) keeps the previous trip's 1-byte
predicate until the next condition returns; the graphs' schedule drops it once read.  That 1 B ``fail-peak`` was
a failure with no mechanism on every backend that runs the higher-order op (the example vendor's interpreter);
it is now ``while-loop-dense-predicate``, bounded by the predicates' bytes the model holds (the peak check's
``loop_predicate_bytes``), so anything more still fails."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from example_vendor import ExampleVendorBackend

from conformance.api.case import select_cases
from conformance.api.result import Result
from conformance.api.verdict import Status
from conformance.checks.cause import cause_of
from conformance.checks.manifest import apply, load_manifest
from conformance.run.engine import run_case


@pytest.fixture(scope="module")
def dense_loop() -> Result:
    (case,) = select_cases(["loop-rnn-t3"])
    return run_case(case, ExampleVendorBackend())


def _peak(result: Result):
    return next(c for c in result.checks if c.name == "peak")


def test_the_held_predicate_is_its_mechanism_bounded_by_the_predicates_bytes(dense_loop: Result) -> None:
    assert dense_loop.status == Status.FAIL_PEAK and dense_loop.excess_bytes == 1, dense_loop.reason
    assert _peak(dense_loop).figures["loop_predicate_bytes"] == 1  # one loop, a 0-d bool predicate
    cause = cause_of(dense_loop)
    assert cause is not None and cause.parts == ("peak: while-loop-dense-predicate",)
    assert cause.evidence_bound("peak: while-loop-dense-predicate") == 1


def test_a_manifest_expects_it_by_mechanism_and_more_than_the_predicates_still_fails(dense_loop: Result,
                                                                                     tmp_path: Path) -> None:
    path = tmp_path / "vendor.toml"
    path.write_text('[[expect]]\nmechanism = "while-loop-dense-predicate"\nstatus = "fail-peak"\nreason = "r"\n')
    manifest = load_manifest("example-vendor", path)
    assert apply(copy.deepcopy(dense_loop), manifest).status == Status.XFAIL
    beyond = copy.deepcopy(dense_loop)  # a backend holding one byte more than any predicate
    beyond.excess_bytes = 2
    _peak(beyond).excess_bytes = 2
    judged = apply(beyond, manifest)
    assert judged.status == Status.FAIL_PEAK and "beyond its bound" in judged.reason, judged.reason


def test_a_body_value_held_is_not_the_predicate(dense_loop: Result) -> None:
    """What a loop's body made, held past its death, is not the dense kernel's predicate."""
    held = copy.deepcopy(dense_loop)
    for entry in _peak(held).blamed:
        entry["producer"] = entry["producer"].replace(".cond", ".body")
    cause = cause_of(held)
    assert cause is not None and "peak: while-loop-dense-predicate" not in cause.parts
    no_loop = copy.deepcopy(dense_loop)  # nor is any excess of a step whose model holds no predicate
    _peak(no_loop).figures.pop("loop_predicate_bytes")
    cause = cause_of(no_loop)
    assert cause is not None and "peak: while-loop-dense-predicate" not in cause.parts
