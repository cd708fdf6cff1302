"""The op sweep in other dtypes than float32 (``op-<key>-<k>-<dtype>-{infer,train}``): opted in by name,
ids stable and readable, a backend claims the dtypes it runs (``Capabilities.dtypes``) and skips the others
with the reason, a float64 case is held to float64's references (eager exact and at parity), and planted
faults are caught on float64 op cases, among them a backend whose float64 results are only float32-accurate."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
import torch

pytest.importorskip("expecttest", reason="the op sweep needs expecttest (pip install 'torch-conformance[ops]')")

from conformance.api.adapter import Capabilities, CompiledStep
from conformance.api.case import Case, Workload, id_problem, select_cases
from conformance.api.result import Result
from conformance.api.step import StepOutput
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend, EagerStep
from conformance.cases import ops
from conformance.output.coverage import op_coverage, op_markdown
from conformance.run.engine import run_case
from tests.planted import LeakyEagerBackend
from tests.planted_backends import PerturbGradBackend

KEYS = ["abs", "add", "tanh"]


def test_float64_ids_are_readable_stable_and_require_the_dtype() -> None:
    first = [ops.screen(ops._by_key()[k], "float64") for k in KEYS]
    second = [ops.screen(ops._by_key()[k], "float64") for k in KEYS]
    assert [[c.id for c in s.cases] for s in first] == [[c.id for c in s.cases] for s in second]
    for screened in first:
        assert screened.cases
        for case in screened.cases:
            assert id_problem(case.id) is None
            m = re.fullmatch(rf"op-{re.escape(screened.key)}-(\d)-float64-(infer|train)", case.id)
            assert m is not None, case.id
            assert ops.parse_id(case.id) == ops.OpId(screened.key, int(m[1]), "float64", m[2])
            assert "dtype:float64" in case.requires and case.tolerance == ops.TOLERANCES["float64"]
            assert all(t.dtype == torch.float64 for t in case.build().inputs if t.is_floating_point())
    float32 = ops.screen(ops._by_key()["add"])  # the float32 sweep's ids and requirements are as they were
    assert [c.id for c in float32.cases] == ["op-add-0-infer", "op-add-0-train", "op-add-1-infer", "op-add-1-train"]
    assert not any(r.startswith("dtype:") for c in float32.cases for r in c.requires)
    assert ops.parse_id("op-abs-0-infer") == ops.OpId("abs", 0, "float32", "infer")


def test_op_star_alone_does_not_register_another_dtype() -> None:
    probe = ("from conformance.api.case import all_cases, select_cases\n"
             "select_cases(['op-abs-*'])\n"
             "print(sum('float64' in c.id for c in all_cases()))\n"
             "chosen = select_cases(['op-abs-*-float64-*'])\n"
             "print(len(chosen), all(c.id.startswith('op-abs-') and '-float64-' in c.id for c in chosen))\n"
             "print([c.id for c in select_cases(['op-add-1-float64-train'])])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["0", "2 True", "['op-add-1-float64-train']"]


def test_patterns_name_the_dtypes_they_hold() -> None:
    named = ops.dtypes_named(["op-*", "op-*-float64-*", "op-abs-0-bfloat16-infer", "op-*-float16-*", "op-bfloat16-*",
                              "op-bfloat16-0-bfloat16-train"])
    assert named == {"float32": ["op-*", "op-bfloat16-*"], "float64": ["op-*-float64-*"],
                     "bfloat16": ["op-abs-0-bfloat16-infer", "op-bfloat16-0-bfloat16-train"],
                     "float16": ["op-*-float16-*"]}  # the op named bfloat16 (Tensor.bfloat16) is float32's


def test_capabilities_claim_dtypes() -> None:
    assert "dtype:float64" in EagerBackend.capabilities.describe()
    assert Capabilities().dtypes == ("float32",) and "dtype:float64" not in Capabilities().describe()
    case = dataclasses.replace(select_cases(["op-add-0-float64-infer"])[0])
    assert Capabilities().missing_for(case) == ["dtype:float64"]
    assert EagerBackend.capabilities.missing_for(case) == []
    assert Capabilities(training=False).missing_for(select_cases(["op-add-0-float64-train"])[0]) == [
        "dtype:float64", "training"]


def _values(tree: object, key: str) -> list[object]:
    """Every value under ``key`` in a nest of dicts and lists."""
    if isinstance(tree, dict):
        return [v for k, item in tree.items() for v in ([item] if k == key else _values(item, key))]
    return [v for item in tree for v in _values(item, key)] if isinstance(tree, list) else []


class Float32OnlyEager(EagerBackend):
    name = "eager-float32-only"
    capabilities = dataclasses.replace(EagerBackend.capabilities, dtypes=("float32",))


def test_a_float64_case_passes_on_eager_exactly_and_skips_where_not_claimed() -> None:
    (case,) = select_cases(["op-add-0-float64-train"])
    result = run_case(case, EagerBackend())
    assert result.status == Status.PASS, (result.status, result.reason)
    parity = next(c for c in result.checks if str(c.name) == "parity")
    assert set(_values(parity.figures, "noise_eps")) == {torch.finfo(torch.float64).eps}  # float64's ulp
    skipped = run_case(case, Float32OnlyEager())
    assert skipped.status == Status.SKIP and skipped.reason == "backend lacks capability: dtype:float64"


class _Float32AccurateStep(EagerStep):
    def __init__(self, case: Case, workload: Workload) -> None:
        super().__init__(case, workload, None)
        #: a quarter of float32's ulp, below float32's own rounding error: eager float32's RMSE would allow it
        self.factor = torch.tensor(1 + 2.0**-26, dtype=torch.float64)  # made here: the step allocates nothing

    def run(self) -> StepOutput:
        out = super().run()
        with torch.no_grad():
            for t in out.outputs:
                t.mul_(self.factor)
        return out


class Float32AccurateBackend(EagerBackend):
    """Returns float64 results only as accurate as float32's: what a backend demoting float64 to float32 does."""

    name = "planted-float32-accurate"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return _Float32AccurateStep(case, workload)


def test_planted_faults_are_caught_on_float64_op_cases() -> None:
    (tanh,) = select_cases(["op-tanh-0-float64-infer"])
    assert run_case(tanh, EagerBackend()).status == Status.PASS
    leaked = run_case(tanh, LeakyEagerBackend())
    assert leaked.status.is_failure, leaked.reason
    (abs_train,) = select_cases(["op-abs-0-float64-train"])
    wrong = run_case(abs_train, PerturbGradBackend())
    assert wrong.status == Status.FAIL_PARITY, (wrong.status, wrong.reason)
    (add,) = select_cases(["op-add-0-float64-infer"])
    demoted = run_case(add, Float32AccurateBackend())
    assert demoted.status == Status.FAIL_PARITY, (demoted.status, demoted.reason)
    assert [c.status for c in demoted.checks if str(c.name) != "parity" and c.status.is_failure] == []


def test_the_coverage_table_shows_a_dtype_as_a_row_of_its_own() -> None:
    results = [Result("op-add-0-infer", "eager", Status.PASS, family="ops"),
               Result("op-add-0-float64-infer", "eager", Status.FAIL_PARITY, "max abs err 1e-7", family="ops"),
               Result("op-add-0-float64-train", "eager", Status.PASS, family="ops")]
    table = op_coverage(results)
    assert table is not None and [(r.op, r.key, r.dtype) for r in table.rows] == [
        ("add", "add", "float32"), ("add [float64]", "add", "float64")]
    text = op_markdown(table)
    assert "| `add [float64]` | eager | fail-parity: max abs err 1e-7 | pass |" in text
    assert "| `add` | eager | pass | - |" in text


@pytest.mark.slow
def test_inductor_runs_a_float64_op_case_in_float64() -> None:
    """Inductor claims float64: a float64 case passes there against float64's references (its tolerance is
    float64's, so a float32 computation would fail parity)."""
    from conformance.backends.inductor import InductorBackend

    assert "float64" in InductorBackend.capabilities.dtypes
    (case,) = select_cases(["op-abs-0-float64-infer"])
    result = run_case(case, InductorBackend())
    assert result.status == Status.PASS, (result.status, result.reason)


def test_a_float16_training_loss_that_overflows_is_left_out_with_the_reason() -> None:
    """The sweep's loss squares the outputs: past 256 that overflows float16 where float64's is finite, so the
    case could only fail; it is left out, saying so (float32's exp case is as it was)."""
    screened = ops.screen(ops._by_key()["exp"], "float16")
    reasons = {lo.label: lo.reason for lo in screened.left_out}
    assert "overflows float16" in reasons["op-exp-0-float16-train"]
    assert "op-exp-0-float16-infer" in {c.id for c in screened.cases}
    assert "op-exp-0-train" in {c.id for c in ops.screen(ops._by_key()["exp"]).cases}
