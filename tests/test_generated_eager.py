"""Property: on generated programs, eager's measured peak and residual equal the lifetime model's.

200 programs (inference and training DAGs, while-loops with and without
autograd) with ``CONFORMANCE_TESTS_FULL=1`` (the nightly), the first half of that budget in CI,
drawn by Hypothesis with a fixed seed so every run draws the same ones.
Equality is exact.  What eager kernels allocate *inside* an op is not a
tolerance: it is the named table :func:`conformance.models.transients.kernel_transient_bytes`
(wrapped Python scalars; the float32 workspace of reduced-precision ``mean``),
part of the model.  A failure is shrunk by Hypothesis to a minimal program.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from conformance.api.step import clear_grads
from conformance.backends.eager import EagerStep
from conformance.cases.generated import case_from_program, programs
from conformance.models.interpreter import GraphExecutor
from conformance.models.lifetime import model_graph
from conformance.models.transients import kernel_transient_bytes
from conformance.probes.cpu import CpuAllocatorProbe, MemoryTrace
from tests.sweep_sample import full

#: (family, train) -> how many programs; 200 in all (CI: half of each, :func:`budget`).
BUDGET = {("dag", False): 70, ("dag", True): 70, ("loop", False): 30, ("loop", True): 30}


def budget(family: str, train: bool) -> int:
    """The programs this run draws: the whole budget in the full tier, half of it in CI (a minute less), a
    third for loops (a second an example: each runs its trips under the probe)."""
    return BUDGET[family, train] if full() else BUDGET[family, train] // (3 if family == "loop" else 2)


def _probed(step: EagerStep, model: torch.nn.Module) -> MemoryTrace:
    """The engine's probed step, with a young-generation collection only: a full
    ``gc.collect()`` costs ~0.4 s in a process holding Dynamo and Hypothesis, and
    the reference executor frees by reference counting alone."""
    clear_grads(model)
    gc.collect(0)
    with CpuAllocatorProbe() as probe:
        out = step.run()
        del out
    return probe.trace


def eager_matches_model(program) -> None:  # type: ignore[no-untyped-def]
    case = case_from_program(program, "prop", 0)
    workload = case.build()
    step = EagerStep(case, workload, None)  # traces the step once; the model reads the same graph
    executor = GraphExecutor(label_ranges=False)
    with torch.no_grad():
        executor.run(step.gm, [step.state[n].detach() for n in step.param_names] + list(workload.inputs))
    retained = range(1, 1 + len(step.trainable))
    model = model_graph(step.gm, executor.observation, retained)
    try:
        del step.run().outputs  # warm-up: first-call allocations stay out of the window
        traces = [_probed(step, workload.model) for _ in range(2)]
    finally:
        for p in workload.model.parameters():
            p.grad = None
        gc.collect()
    for trace in traces:
        assert trace.peak_bytes == model.peak_bytes, (
            f"peak {trace.peak_bytes} != model {model.peak_bytes} at {model.events[model.peak_event]}"
        )
        assert trace.residual_bytes == model.residual_bytes, (
            f"residual {trace.residual_bytes} != model {model.residual_bytes}"
        )


@pytest.mark.parametrize(("family", "train"), list(BUDGET), ids=[f"{f}-{'train' if t else 'infer'}" for f, t in BUDGET])
def test_eager_equals_model_on_generated_programs(family: str, train: bool) -> None:
    @settings(max_examples=budget(family, train), deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs(family, train))
    def check(program) -> None:  # type: ignore[no-untyped-def]
        eager_matches_model(program)

    with frozen_survivors():
        check()


@contextmanager
def frozen_survivors() -> Iterator[None]:
    """What is alive before the examples (torch, Dynamo, Hypothesis) out of the collector's sight, as the
    engine does for its probed calls: each example's full ``gc.collect()`` then scans only what the
    examples made (it was two thirds of this test's time)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def test_transient_table_is_what_eager_kernels_allocate() -> None:
    """Each entry of the table is measured, not assumed: one single-op graph per entry."""
    from torch.fx.experimental.proxy_tensor import make_fx

    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(4, 8).to(dtype)
        mask = torch.randn(4, 8) > 0
        cases = [
            (lambda t: t * 2.0, (x,)),  # wrapped Python float, cast to the op's dtype
            (lambda t: t + 1, (x,)),  # wrapped Python int
            (lambda t: t.mean(1, keepdim=True), (x,)),  # mean: in-place division by the count
            (lambda t: t.narrow(1, 1, 5).sum(), (x,)),  # full sum of a non-contiguous tensor
            (lambda t, m: t * m, (x, mask)),  # a bool operand cast to the common dtype
            (lambda m: m.sum(0, keepdim=True), (mask,)),  # bool summed into int64
        ]
        for fn, args in cases:
            gm = make_fx(fn, tracing_mode="fake")(*args)
            (node,) = [n for n in gm.graph.nodes if n.op == "call_function" and "slice" not in str(n.target)]
            fn(*args)
            with CpuAllocatorProbe() as probe:
                out = fn(*args)
                nbytes = out.untyped_storage().nbytes()
                del out
            assert probe.trace.peak_bytes == nbytes + kernel_transient_bytes(node), (dtype, node.target)


ZERO_TRIP_TRAIN = {
    "family": "loop", "train": True, "dtype": "float32", "batch": 2, "width": 4, "n_inputs": 2,
    "param_shapes": [[4, 4]], "ops": [], "outputs": [], "carried": 1, "trips": 0,
    "body": [{"kind": "relu", "args": [1], "attrs": []}, {"kind": "blend", "args": [0, 2], "attrs": []}],
    "body_out": [4], "data_cond": False,
}


def test_a_training_loop_that_runs_no_trip_is_exact() -> None:
    """gen-loop-5458-train, shrunk: a loop with autograd that runs no trip still stacks one row per
    carry (torch's dense kernel: ``val.unsqueeze(0).clone()``), so the backward's ``cat`` of the
    initial carry with the stack is one row, not empty; the model had sized both at zero trips."""
    from conformance.cases.generated import Program

    eager_matches_model(Program.from_json(ZERO_TRIP_TRAIN))
