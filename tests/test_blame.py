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
