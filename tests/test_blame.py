"""Blame names something a reader can act on for every allocation, also one no operator made."""

from __future__ import annotations

from conformance.checks.blame import OUTSIDE_OPERATORS, _entry
from conformance.models.lifetime import LifetimeModel
from conformance.probes.cpu import Allocation


def test_an_allocation_outside_any_operator_is_named_not_none() -> None:
    model = LifetimeModel(events=[], live_bytes=[], storages=[])
    entry = _entry(Allocation(ptr=1, nbytes=32, t_alloc=0), None, model, "alive at measured peak")
    assert None not in (entry["producer"], entry["op"], entry["measured_op"])
    assert entry["producer"] == entry["op"] == entry["measured_op"] == OUTSIDE_OPERATORS
    named = _entry(Allocation(ptr=2, nbytes=32, t_alloc=0, op="aten::empty"), None, model, "alive at measured peak")
    assert named["producer"] == named["op"] == "aten::empty"


def test_a_peak_over_the_received_graphs_is_blamed_on_the_generated_programs_buffer() -> None:
    """Inductor's layout optimisation (mod-Conv2d-infer, a manifest finding): the program held exactly, its
    channels-last result and the caller's contiguous copy are both alive.  Blame names the program's
    buffer and the statement that made it, not an allocation ``(outside any operator)``."""
    from conformance.api.case import select_cases
    from conformance.api.verdict import CheckName, Status
    from conformance.backends.inductor import InductorBackend
    from conformance.run.engine import run_case

    (case,) = select_cases(["mod-Conv2d-infer"])
    result = run_case(case, InductorBackend())
    assert result.status == Status.FAIL_PEAK, result.reason
    peak = result.check(CheckName.PEAK)
    assert peak is not None and peak.blamed
    (culprit,) = peak.blamed
    assert culprit["model"] == "generated program"
    assert culprit["producer"].startswith("buf") and "made at fw:line" in culprit["producer"]
    assert "empty_strided_cpu" in culprit["producer"]
    assert culprit["bytes"] == peak.figures["measured_peak_bytes"] - peak.figures["model_peak_bytes"]
    assert OUTSIDE_OPERATORS not in result.reason
