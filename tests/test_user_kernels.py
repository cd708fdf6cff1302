"""The model of a step as eager PyTorch runs it with the user's kernels (issue 21).

``torch.compile`` leaves ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` to eager PyTorch (Dynamo breaks
the graph there), so a compiling backend runs them on oneDNN's LSTM and ATen's C++ composites,
not on the reference executor's kernels.  :func:`conformance.api.step.trace_user_kernels` models
that step: here it is held to measurements of the real module (peak at or above the measured one,
by no more than what the CPU-dependent bounds and the composites' scopes allow; residual exact),
inductor's RNN pairs pass against it, and an extra allocation planted in them is still caught.
"""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from conformance.api.case import Workload, select_cases
from conformance.api.step import clear_grads, params_of, run_module_step, trace_user_kernels
from conformance.api.verdict import Status
from conformance.backends.inductor import InductorBackend
from conformance.cases.modules import _Step
from conformance.models.lifetime import model_graph
from conformance.models.transients import kernel_transient_bounds
from conformance.probes.cpu import CpuAllocatorProbe
from conformance.run.engine import RunOptions, run_case
from tests.faults import SCRATCH_BYTES, planted

#: name -> (module, input shape): layers, directions, batch_first, sizes off oneDNN's blocks
LSTMS = {
    "lstm": (lambda: nn.LSTM(8, 12), (5, 3, 8)),
    "lstm-2layer": (lambda: nn.LSTM(8, 12, num_layers=2), (5, 3, 8)),
    "lstm-bi-batch-first": (lambda: nn.LSTM(6, 10, bidirectional=True, batch_first=True), (2, 7, 6)),
    "lstm-2layer-bi": (lambda: nn.LSTM(5, 33, num_layers=2, bidirectional=True), (4, 2, 5)),
    "lstm-no-bias": (lambda: nn.LSTM(16, 16, bias=False), (3, 4, 16)),
    "lstm-one-step-one-sample": (lambda: nn.LSTM(3, 5), (1, 1, 3)),
    "lstm-3layer-bi": (lambda: nn.LSTM(20, 40, num_layers=3, bidirectional=True), (6, 4, 20)),
}
COMPOSITES = {
    "gru": (lambda: nn.GRU(8, 12), (5, 3, 8)),
    "gru-2layer-bi": (lambda: nn.GRU(7, 9, num_layers=2, bidirectional=True, batch_first=True), (3, 4, 7)),
    "rnn-relu": (lambda: nn.RNN(8, 12, nonlinearity="relu"), (5, 3, 8)),
    "rnn-3layer": (lambda: nn.RNN(4, 6, num_layers=3), (6, 2, 4)),
    "gru-batch-first": (lambda: nn.GRU(8, 12, batch_first=True), (3, 5, 8)),
    "gru-one-step-one-sample": (lambda: nn.GRU(3, 5, bias=False), (1, 1, 3)),
    # oneDNN has no LSTM projection: ATen's composite runs it (the same scopes as GRU's)
    "lstm-projection-2layer-bi": (lambda: nn.LSTM(6, 10, num_layers=2, proj_size=4, bidirectional=True), (4, 2, 6)),
}


def _measure(name: str, spec: tuple, trains: bool) -> tuple[int, int, int, int, int]:
    """(measured peak, measured residual, the model's peak with every CPU-dependent entry at its low end,
    at its high end, the model's residual) of one step of the module."""
    make, shape = spec
    torch.manual_seed(0)
    workload = Workload(_Step(make(), trains, scaled=None), (torch.randn(shape),))
    gm = trace_user_kernels(workload, trains)
    retained = range(1, 1 + len(params_of(workload.model))) if trains else ()
    model = model_graph(gm, None, retained)
    widths = sum(b.high - b.low for b in map(kernel_transient_bounds, gm.graph.nodes))
    run_module_step(workload.model, workload, trains)  # warm-up: oneDNN's primitive cache
    clear_grads(workload.model)
    gc.collect()
    with CpuAllocatorProbe() as probe:
        out = run_module_step(workload.model, workload, trains)
        del out
    clear_grads(workload.model)
    return (probe.trace.peak_bytes, probe.trace.residual_bytes, model.peak_bytes - widths, model.peak_bytes,
            model.residual_bytes)


@pytest.mark.parametrize("trains", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name", sorted(LSTMS))
def test_lstm_step_is_within_the_models_bounds(name: str, trains: bool) -> None:
    """oneDNN's LSTM layers: the measured peak lies between the model with every CPU-dependent entry at its
    low end and at its high end (training: equal, nothing in it depends on the ISA)."""
    measured, residual, low, high, model_residual = _measure(name, LSTMS[name], trains)
    assert low <= measured <= high, f"{name}: measured {measured} B, model [{low}, {high}] B"
    assert residual == model_residual
    if trains:
        assert measured == high, f"{name}: measured {measured} B, model {high} B"


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("trains", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composite_rnn_step_is_bounded(name: str, trains: bool) -> None:
    """ATen's GRU/RNN composites: values held to their C++ scopes' ends, the model bounds the measurement."""
    measured, residual, _, high, model_residual = _measure(name, COMPOSITES[name], trains)
    assert measured <= high, f"{name}: measured {measured} B above the model's {high} B"
    assert residual == model_residual


RNN_PAIRS = ["mod-LSTM-infer", "mod-LSTM-train", "mod-LSTM-bidirectional-train", "mod-GRU-2layer-infer",
             "mod-GRU-2layer-train", "mod-RNN-train"]


def _case(case_id: str):  # type: ignore[no-untyped-def]
    (case,) = select_cases([case_id])
    return case


@pytest.mark.slow
@pytest.mark.parametrize("case_id", RNN_PAIRS)
def test_inductor_rnn_pairs_pass_on_the_user_kernels_model(case_id: str) -> None:
    result = run_case(_case(case_id), InductorBackend(), RunOptions(steps=2))
    assert result.status is Status.PASS, result.reason
    assert result.memory is not None and result.memory.model_source == "user-kernels"


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["mod-LSTM-infer", "mod-LSTM-train", "mod-GRU-infer", "mod-GRU-2layer-infer",
                                     "mod-RNN-train"])
def test_an_extra_allocation_in_an_eager_rnn_step_is_caught(case_id: str) -> None:
    """A scratch buffer of 4 KiB alive across the step (the RNN's eager region included) fails the peak,
    and the blame names the allocation, not None."""
    result = run_case(_case(case_id), planted(InductorBackend, "scratch-buffer")(), RunOptions(steps=2))
    assert result.status is Status.FAIL_PEAK, result.reason
    assert result.excess_bytes is not None and 0 < result.excess_bytes <= SCRATCH_BYTES
    assert "None" not in result.reason


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["mod-LSTM-infer", "mod-GRU-2layer-infer", "mod-LSTM-train"])
def test_an_exact_backend_is_held_to_the_models_range(case_id: str) -> None:
    """A backend whose contract is equality (the example vendor's) and that leaves the RNN to eager is held
    to the range the model spans: CPU-dependent workspaces at their low end and every value to its last
    use, up to their high end and the C++ scopes."""
    from example_vendor import ExampleVendorBackend

    result = run_case(_case(case_id), ExampleVendorBackend(), RunOptions(steps=2))
    assert result.status is Status.PASS, result.reason
    (peak,) = [c for c in result.checks if c.name == "peak"]
    assert peak.figures["model_low_peak_bytes"] <= peak.figures["measured_peak_bytes"]
    assert peak.figures["measured_peak_bytes"] <= peak.figures["model_peak_bytes"]
