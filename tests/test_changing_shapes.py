"""Shapes that change between calls: every call modelled at its own shapes, recompiles counted,
memory kept across shapes told from a leak, and faults that only show on a new shape caught."""

from __future__ import annotations

import pytest
import torch

from conformance.api.case import Case, CaseError, ShapeSchedule, Workload, register, resolve, select_cases
from conformance.api.result import Result
from conformance.backends.eager import EagerBackend
from conformance.backends.inductor import InductorBackend
from conformance.run.engine import run_case
from conformance.run.options import RunOptions
from tests.planted_shape_backends import (
    FirstShapeBufferBackend,
    GraphPerShapeBackend,
    ShapeCacheBackend,
    StaleAfterRecompileBackend,
)


def _case(case_id: str) -> Case:
    (case,) = select_cases([case_id])
    return case


def _blame_names_something(result: Result) -> None:
    assert result.memory is not None
    for entry in result.memory.blamed:
        assert isinstance(entry["producer"], str) and entry["producer"] not in ("", "None"), entry


def test_schedule_draws_each_calls_shapes_and_requires_the_capability() -> None:
    case = _case("shape-batch-train")
    assert case.shapes is not None and "dynamic_shapes" in case.requires
    assert [case.inputs_for(call)[0].shape[0] for call in range(7)] == [4, 7, 10, 13, 16, 4, 7]
    assert torch.equal(case.inputs_for(3)[0], case.inputs_for(3)[0])  # seeded: the same in every process
    seq = _case("shape-seq-infer")
    assert [seq.inputs_for(call)[0].shape[1] for call in range(3)] == [5, 8, 11]
    with pytest.raises(CaseError):
        ShapeSchedule("batch", ())
    with pytest.raises(CaseError):
        ShapeSchedule("batch", (4,), compile="sometimes")  # type: ignore[arg-type]


def test_a_backend_without_the_capability_skips_with_the_reason() -> None:
    from conformance.api.adapter import Capabilities

    class Static(EagerBackend):
        name = "static-only"
        capabilities = Capabilities(exact_memory=True)

    result = run_case(_case("shape-batch-infer"), Static())
    assert result.status == "skip" and "dynamic_shapes" in result.reason


def test_eager_is_byte_exact_at_every_calls_shapes() -> None:
    """The issue's first report: a model built once, for call 0, failed eager at 2,560-4,096 B."""
    result = run_case(_case("shape-batch-train"), EagerBackend())
    assert result.status == "pass", result.reason
    peak = result.check("peak")
    assert peak is not None
    figures = peak.figures
    assert figures["shape_per_step"] == ["batch=10", "batch=13", "batch=16"]
    assert result.memory is not None
    assert result.memory.peak_per_step == figures["model_peak_per_step"]  # each call equals its own model
    assert len(set(figures["model_peak_per_step"])) == 3  # and the models differ with the batch
    assert sorted(int(c) for c in result.parity["calls"]) == [0, 1, 2, 3, 4]  # parity at every call


def test_eager_loop_and_sequence_cases_are_exact() -> None:
    for case_id in ("shape-loop-batch", "shape-seq-train"):
        result = run_case(_case(case_id), EagerBackend())
        assert result.status == "pass", (case_id, result.reason)


def test_a_model_of_call_0_would_not_hold_later_calls() -> None:
    """The per-call models are what makes eager pass: call 0's model differs from each probed call's."""
    from conformance.run.engine import user_level_model

    case = _case("shape-batch-infer")
    peaks = [user_level_model(case, call)[0].peak_bytes for call in (0, 2, 4)]
    assert peaks[0] < peaks[1] < peaks[2]


def test_inductor_recompiles_once_then_runs_dynamic_graphs_modelled_per_call() -> None:
    result = run_case(_case("shape-batch-train"), InductorBackend())
    assert result.status == "pass", result.reason
    shapes = result.shapes
    assert shapes["sizes"] == [4, 7, 10, 13, 16]
    assert shapes["compiles_per_call"] == [1, 1, 0, 0, 0] and shapes["recompiles"] == 1
    assert shapes["kept_bytes"] == 0
    assert result.memory is not None and result.memory.model_source == "received-graphs"
    program = result.check("program")
    assert program is not None and program.status == "pass"
    assert program.figures["timeline"] == "exact"  # the dynamic wrapper, evaluated at each call's batch
    peak = result.check("peak")
    assert peak is not None
    model_peaks = peak.figures["model_peak_per_step"]
    assert model_peaks == sorted(model_peaks) and len(set(model_peaks)) == 3
    assert not [n for n in result.notes if "not modelled" in n], result.notes


@pytest.mark.parametrize("case_id", ["shape-batch-infer-dynamic", "shape-batch-infer-marked"])
def test_dynamic_and_mark_dynamic_compile_one_graph(case_id: str) -> None:
    result = run_case(_case(case_id), InductorBackend())
    assert result.status == "pass", result.reason
    assert result.shapes["compiles_per_call"] == [1, 0, 0, 0, 0] and result.shapes["recompiles"] == 0


def test_buffer_sized_for_the_first_shape_is_caught_on_the_first_new_shape() -> None:
    one_shape = run_case(_case("mlp-s-infer"), FirstShapeBufferBackend())
    # one shape: every call's values are right when it returns (parity passes); returning one buffer of its own
    # on every call is the outputs check's fault (the next call overwrites the output its caller kept)
    assert one_shape.parity["ok"] and one_shape.status == "fail-parity", one_shape.reason
    assert one_shape.reason.startswith("call 1 overwrote call 0's output[0]"), one_shape.reason
    result = run_case(_case("shape-batch-infer"), FirstShapeBufferBackend())
    assert result.status == "fail-parity", result.reason
    assert result.reason.startswith("call 1:") and "shape (4, 8) != (7, 8)" in result.reason


def test_stale_results_after_a_recompile_are_caught_on_the_recompiling_call() -> None:
    result = run_case(_case("shape-batch-infer"), StaleAfterRecompileBackend())
    assert result.status == "fail-parity", result.reason
    assert result.shapes["compiles_per_call"][1] == 1
    assert result.reason.startswith("call 1:"), result.reason  # the call that recompiled, not a later one


def test_a_cache_keeping_every_shapes_buffers_is_a_leak() -> None:
    result = run_case(_case("shape-batch-infer"), ShapeCacheBackend())
    assert result.status == "fail-residual", result.reason
    assert "no new graph compiled" in result.reason and "batch=" in result.reason
    assert result.shapes["kept_bytes_per_call"] == {"2": 10 * 8 * 4, "3": 13 * 8 * 4, "4": 16 * 8 * 4}
    _blame_names_something(result)


def test_one_graph_per_shape_is_counted_and_reported_not_a_leak() -> None:
    """A workspace per compiled graph grows with the graphs, and stops when shapes come again."""
    result = run_case(_case("shape-batch-infer"), GraphPerShapeBackend(), RunOptions(steps=8))
    assert result.status == "pass", result.reason
    shapes = result.shapes
    assert shapes["compiles_per_call"] == [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]  # shapes revisited from call 5
    assert shapes["kept_bytes_per_call"]["2"] == 10 * 8 * 4
    assert all(shapes["kept_bytes_per_call"][str(c)] == 0 for c in range(5, 10))
    residual = result.check("residual")
    assert residual is not None and residual.figures["kept_for_new_graphs"] == {2: 320, 3: 416, 4: 512}


def test_a_case_whose_shapes_do_not_change_records_no_shapes() -> None:
    result = run_case(_case("mlp-s-infer"), EagerBackend())
    assert result.status == "pass" and result.shapes == {}


def test_a_user_case_declares_changing_shapes_with_a_schedule() -> None:
    schedule = ShapeSchedule("batch", (2, 5))

    def inputs(n: int) -> tuple[torch.Tensor, ...]:
        return (torch.randn(n, 4),)

    def build(seed: int) -> Workload:
        return Workload(torch.nn.Linear(4, 3), inputs(schedule.size(0)))

    from conformance.api import case as registry

    try:
        register(Case("test-user-shapes", "inference", "mine", 0, build,
                      make_inputs=lambda call: inputs(schedule.size(call)), shapes=schedule))
        case = resolve("test-user-shapes")
    finally:
        registry._REGISTRY.pop("test-user-shapes", None)
    assert case is not None and "dynamic_shapes" in case.requires
    result = run_case(case, EagerBackend(), RunOptions(steps=2))
    assert result.status == "pass", result.reason
    assert result.shapes["sizes"] == [2, 5, 2, 5]


def test_generated_dyn_programs_run_at_every_batch_of_their_schedule() -> None:
    """Hypothesis draws dynamic batches too: every ``dyn`` program it draws runs at each of its sizes."""
    from hypothesis import HealthCheck, given, settings

    from conformance.cases.generated import DYN_SIZES, Program, load_source, program_source, programs

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(programs(family="dyn", train=False))
    def check(program: Program) -> None:
        assert len(program.batches) == DYN_SIZES and program.batches[0] == program.batch
        assert "expand" not in {op.kind for op in program.ops}
        ns = load_source(program_source(program), "<test>")
        model = ns["make_model"]()
        shapes = [tuple(t.shape) for b in program.batches for t in model(*ns["make_inputs"](b))]
        assert shapes  # it ran at every batch

    check()


def test_default_generated_set_gains_dyn_cases_and_keeps_the_others() -> None:
    from conformance.cases.generated import DEFAULT_DYN, dyn_cases

    dyn = [c.id for c in dyn_cases(DEFAULT_DYN, 0)]
    assert [c.id for c in select_cases(["gen-dyn-*"])] == dyn and len(dyn) == DEFAULT_DYN
    case = resolve(dyn[0])
    assert case is not None and case.shapes is not None and "dynamic_shapes" in case.requires
    assert [case.inputs_for(call)[0].shape[0] for call in range(3)] == list(case.shapes.sizes[:3])
    result = run_case(case, EagerBackend())
    assert result.status == "pass", result.reason
    assert result.shapes["sizes"] == list(case.shapes.sizes)


def _undeclared_case() -> Case:
    """The issue's new user: a plain MLP whose batch grows on every call, given by ``make_inputs`` alone."""
    from conformance.cases.changing_shapes import BATCHES, BatchMLP

    return Case("test-undeclared-batches", "inference", "mine", 0,
                lambda seed: Workload(BatchMLP(False), (torch.randn(BATCHES[0], 16),)),
                make_inputs=lambda call: (torch.randn(BATCHES[call % len(BATCHES)], 16),))


@pytest.mark.parametrize("backend", [EagerBackend, InductorBackend], ids=["eager", "inductor"])
def test_shapes_seen_in_the_inputs_change_the_models_too(backend: type) -> None:
    """No schedule declared: a call whose inputs come with other shapes than call 0's is modelled at
    its own (eager failed at 2,560-4,096 B against call 0's model; inductor blamed None)."""
    result = run_case(_undeclared_case(), backend())
    assert result.status == "pass", result.reason
    assert result.shapes["dimension"] == "inputs" and result.shapes["sizes"] == []
    assert [s[0][0] for s in result.shapes["input_shapes"]] == [4, 7, 10, 13, 16]
    if backend is InductorBackend:  # compiled as users do: a recompile, then dynamic
        assert result.shapes["compiles_per_call"] == [1, 1, 0, 0, 0]
