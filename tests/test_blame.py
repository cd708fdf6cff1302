"""Blame names something a reader can act on for every allocation, also one no operator made."""

from __future__ import annotations

from typing import Any

from conformance.checks.blame import OUTSIDE_OPERATORS, _entry
from conformance.models.lifetime import LifetimeModel
from conformance.probes.cpu import Allocation


def test_an_allocation_outside_any_operator_is_named_not_none() -> None:
    model = LifetimeModel(events=[], live_bytes=[], storages=[])
    entry = _entry(Allocation(ptr=1, nbytes=32, t_alloc=0), None, model, "alive at measured peak")
    assert None not in (entry.producer, entry.op, entry.measured_op)
    assert entry.producer == entry.op == entry.measured_op == OUTSIDE_OPERATORS
    assert entry.to_json()["op"] == OUTSIDE_OPERATORS and entry.to_json()["shape"] is None
    named = _entry(Allocation(ptr=2, nbytes=32, t_alloc=0, op="aten::empty"), None, model, "alive at measured peak")
    assert named.producer == named.op == "aten::empty"


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


def _step(storages: list[Any], live: list[int], allocations: list[Allocation], timeline: list[tuple[int, int]]) -> Any:
    from conformance.checks.judge import ProbedStep
    from conformance.probes.cpu import MemoryTrace

    model = LifetimeModel(events=[f"e{i}" for i in range(len(live))], live_bytes=live, storages=storages)
    return ProbedStep(2, MemoryTrace("torch-cpu", allocations, timeline), model, model)


def test_blame_adds_up_to_the_excess_or_says_what_else_makes_it_up() -> None:
    """A 4 B residual excess where the only allocation left alive is 504 B (and the model's 500 B gradient was
    not kept): nothing of 4 B or less explains it, so nothing is blamed, and the record says so."""
    from conformance.checks.judge import judge_residual
    from conformance.models.lifetime import Storage

    grad = Storage(0, 500, "grad", "aten.mm.default", (125,), "float32", role="retained", birth=0)
    step = _step([grad], [500], [Allocation(ptr=1, nbytes=504, t_alloc=0, op="aten::empty", seq=0)], [(0, 504)])
    check = judge_residual([step])
    assert check.failed and check.excess_bytes == 4 and check.contract is not None
    assert check.contract.measured_bytes == 504 and check.contract.high_bytes == 500
    assert check.blamed == []
    assert check.figures["blame_unexplained_bytes"] == 4
    assert "none of the 4 B excess named" in check.figures["blame_note"]
    assert "(4 B of the excess not named)" in check.reason


def test_a_wrapped_scalar_is_never_an_allocation_an_operator_made() -> None:
    """The model's optimizer makes 8 B wrapped scalars outside any operator; an 8 B allocation an operator made
    and kept is not matched to one of them by size: it is said as unidentified, beside the candidates."""
    from conformance.checks.blame import blame_residual
    from conformance.models.lifetime import Storage

    scalar = Storage(0, 8, "optimizer:aten.mul_.Tensor (wrapped scalar)", "wrapped scalar", (), "float64", birth=0,
                     death=0)
    kept = Allocation(ptr=7, nbytes=8, t_alloc=0, op="aten::empty_strided", seq=0)
    made = Allocation(ptr=8, nbytes=8, t_alloc=1, t_free=2, op=None, seq=1)
    step = _step([scalar], [8], [kept, made], [(0, 8), (1, 16), (2, 8)])
    (entry,) = blame_residual(step.model, step.trace, held_by={7: ["my_module.LOG[0] (float64[])"]})
    assert entry.model_death == "not in model" and entry.identified_by == "not identified"
    assert entry.candidates == (scalar.producer,) and entry.to_json()["candidates"] == [scalar.producer]
    assert "could not identify the storage" in entry.producer and "my_module.LOG[0]" in entry.producer
    assert not entry.producer.startswith("optimizer:")


def test_a_runtime_domain_names_its_program_calls_results_and_transients() -> None:
    """IREE's HAL figures per call (as ``HalAllocatorProbe`` records them): the call at the domain's peak
    is named, its results kept apart from what it freed by its end, each with its size."""
    from conformance.checks.blame import invocation_breakdown

    calls = [{"live_before": 7968, "peak_rise": 7552, "live_after": 15456},
             {"live_before": 17476, "peak_rise": 9792, "live_after": 24964}]
    note = invocation_breakdown(calls, "iree-hal")
    assert note.startswith("in iree-hal, the compiled program's call 2 of 2 reached its peak, 9792 B above the 17476 B")
    assert "7488 B of results it left allocated, 2304 B of transients and input copies" in note
    assert invocation_breakdown([], "iree-hal") == ""


def _storage(sid: int, nbytes: int, producer: str, role: str, birth: int, death: int | None) -> Any:
    from conformance.models.lifetime import Storage

    return Storage(sid, nbytes, producer, "op", (), "float32", role, birth, death)


def _two_calls() -> LifetimeModel:
    """A forward (loss and one saved activation, one 128 B pack) and a backward (one 64 B gradient)."""
    events = ["fw:stage:x", "fw:results", "fw:relu", "fw:mean", "bw:stage:relu", "bw:results", "bw:mul"]
    storages = [_storage(0, 64, "fw:stage:x", "staging", 0, 1), _storage(1, 64, "fw:mean", "output", 1, None),
                _storage(2, 64, "fw:relu", "intermediate", 1, 4), _storage(3, 64, "bw:mul", "retained", 5, None)]
    return LifetimeModel(events, [64, 192, 192, 192, 192, 256, 256], storages)


def _calls(relu_alive: bool) -> list[dict[str, Any]]:
    fw = {"live_before": 64, "peak_rise": 128, "live_after": 192, "inputs": [{"bytes": 64, "label": "fw:stage:x"}],
          "results": [{"shape": [], "dtype": "float32", "bytes": 4, "label": "fw:mean", "alive_after": False},
                      {"shape": [4, 4], "dtype": "float32", "bytes": 64, "label": "fw:relu",
                       "alive_after": relu_alive},
                      {"shape": [4, 4], "dtype": "float32", "bytes": 64, "label": "fw:detach", "same_buffer_as": 1,
                       "alive_after": relu_alive}],
          "alive_before": []}
    bw = {"live_before": 192, "peak_rise": 320, "live_after": 256, "inputs": [{"bytes": 64, "label": "bw:stage:relu"}],
          "results": [{"shape": [4, 4], "dtype": "float32", "bytes": 64, "label": "bw:mul", "alive_after": True}],
          "alive_before": [[0, 0], [0, 2]] if relu_alive else [[0, 0]]}
    return [fw, bw]


def test_a_runtime_domain_names_the_result_buffer_left_alive_and_the_transients_over_the_model() -> None:
    """IREE frees a call's result buffer with its last result: a saved activation kept (through its detach, one
    buffer returned twice) keeps the whole 128 B; the backward's 256 B of transients are 256 B over the model's."""
    from conformance.checks.blame import runtime_buffers

    model = _two_calls()
    (residual,) = runtime_buffers(_calls(True), model, "residual", 128)
    assert residual["bytes"] == 128
    assert residual["producer"] == "iree-hal call 1/2's result buffer (128 B allocated; alive in it: fw:relu 64 B)"
    assert runtime_buffers(_calls(False), model, "residual", 64) == []  # the gradient is the model's
    peak = runtime_buffers(_calls(True), model, "peak", 320)
    assert [p["bytes"] for p in peak] == [256, 64]
    assert peak[0]["producer"].startswith("iree-hal call 2/2's transients: 256 B allocated inside the call, 0 B")
    assert peak[1]["producer"].startswith("iree-hal call 1/2's result buffer (128 B allocated; alive in it when "
                                          "call 2/2 started: fw:mean 4 B, fw:relu 64 B")
    assert runtime_buffers([{"live_before": 0, "peak_rise": 8, "live_after": 0}], model, "peak", 8) == []


def _two_allocations(recorded: bool) -> tuple[LifetimeModel, list[dict[str, Any]]]:
    """shape-seq-train's shape, small: the forward returns its results in two HAL allocations, {x, saved a}
    (128 B, freed once the backward drops a) and {loss, saved b, saved c} (192 B, kept by the loss the caller
    holds). The backward starts with the second alive: b and c (128 B) outlive the model's schedule."""
    events = ["fw:stage:p", "fw:results", "fw:mean", "bw:stage:a", "bw:stage:b", "bw:stage:c", "bw:results",
              "bw:mul"]
    storages = [_storage(0, 64, "fw:stage:p", "staging", 0, 2), _storage(1, 64, "fw:mean", "output", 1, None),
                _storage(2, 64, "fw:x", "intermediate", 1, 2), _storage(3, 64, "fw:a", "saved", 1, 3),
                _storage(4, 64, "fw:b", "saved", 1, 4), _storage(5, 64, "fw:c", "saved", 1, 5),
                _storage(6, 64, "bw:mul", "retained", 6, None)] + [
                _storage(7 + i, 64, f"bw:stage:{v}", "staging", 3 + i, 7) for i, v in enumerate("abc")]
    model = LifetimeModel(events, [64, 384, 384, 256, 256, 256, 256, 320], storages)
    place = {"fw:mean": (0, 0), "fw:x": (1, 0), "fw:a": (1, 64), "fw:b": (0, 64), "fw:c": (0, 128)}
    results = [{"shape": [4, 4], "dtype": "float32", "bytes": 64 if name != "fw:mean" else 4, "label": name,
                "alive_after": False, **({"buffer": place[name][0], "offset": place[name][1]} if recorded else {})}
               for name in ("fw:mean", "fw:x", "fw:a", "fw:b", "fw:c")]
    fw = {"live_before": 64, "peak_rise": 320, "live_after": 384, "inputs": [{"bytes": 64, "label": "fw:stage:p"}],
          "results": results, "alive_before": []}
    bw = {"live_before": 192 + 192, "peak_rise": 64, "live_after": 448,
          "inputs": [{"bytes": 64, "label": f"bw:stage:{v}"} for v in "abc"],
          "results": [{"shape": [4, 4], "dtype": "float32", "bytes": 64, "label": "bw:mul", "alive_after": True}],
          "alive_before": [[0, 0]]}
    return model, [fw, bw]


def test_a_call_returning_several_allocations_names_the_one_left_alive() -> None:
    """Where the probe recorded which allocation holds each result, the one the loss keeps is named with its own
    bytes (192 B, 128 B over the model's), not the call's 320 B of results (more than the excess: unnamed)."""
    from conformance.checks.blame import runtime_buffers

    model, calls = _two_allocations(True)
    (peak,) = runtime_buffers(calls, model, "peak", 128)
    assert peak["bytes"] == 128
    assert peak["producer"] == ("iree-hal call 1/2's result buffer 1 of 2 (192 B allocated; alive in it when call "
                                "2/2 started: fw:mean 4 B; the model has freed fw:b 64 B, fw:c 64 B)"), peak
    calls[0]["results"][3]["alive_after"] = True  # b kept past the step: its allocation, not the call's results
    (residual,) = runtime_buffers(calls, model, "residual", 192)
    assert residual["producer"] == "iree-hal call 1/2's result buffer 1 of 2 (192 B allocated; alive in it: fw:b 64 B)"
    # without the allocations recorded, the call's 320 B of results is one pack, 256 B over the model's: more than
    # the excess, and not what stayed allocated
    model, calls = _two_allocations(False)
    legacy = [e for e in runtime_buffers(calls, model, "peak", 128) if "call 1/2's result buffer" in e["producer"]]
    assert [e["bytes"] for e in legacy] == [256] and "(320 B allocated" in legacy[0]["producer"]


def test_results_are_placed_in_their_allocations_by_address() -> None:
    """IREE's slots in one allocation follow each other at 64-byte-aligned offsets; another allocation starts
    elsewhere (past its buffer header); a result returned twice shares its twin's place."""
    from conformance.backends.iree import result_allocations

    base, other = 1 << 20, 1 << 24
    spans = [(other + 1024, 4), (base, 2176), (base + 2176, 2312), (base + 2176, 2312), (other, 1024),
             (other + 1088, 2176), (base + 2176 + 2368 + 64, 8)]
    assert result_allocations(spans) == [(0, 1024), (1, 0), (1, 2176), (1, 2176), (0, 0), (0, 1088), (2, 0)]


def test_what_a_steps_only_call_left_allocated_that_no_result_holds_is_named() -> None:
    """A loop's one call (IREE) that keeps buffers of its own (a carry per trip): the residual is named as the call's
    own allocations, not left unnamed; with its results recorded in the older form, nothing is claimed."""
    from conformance.checks.blame import runtime_buffers

    model = LifetimeModel(["fw:stage:x", "fw:results", "fw:loop"], [512, 1024, 1536],
                          [_storage(0, 512, "fw:stage:x", "staging", 0, 2), _storage(1, 512, "fw:out", "output", 1, 2)])
    call = {"live_before": 512, "peak_rise": 1536, "live_after": 2048,
            "inputs": [{"bytes": 512, "label": "fw:stage:x"}],
            "results": [{"shape": [4, 32], "dtype": "float32", "bytes": 512, "label": "fw:out", "alive_after": False,
                         "buffer": 0, "offset": 0}], "alive_before": []}
    (entry,) = runtime_buffers([call], model, "residual", 1536)
    assert entry["bytes"] == 1536
    assert entry["producer"] == ("iree-hal call 1/1's own allocations: it left 1536 B allocated when it returned, "
                                 "1536 B of them held by no result alive after the step (it returned fw:out 512 B)")
    call["results"][0]["alive_after"] = True  # the caller keeps the result: only the rest is the call's own
    assert [e["bytes"] for e in runtime_buffers([call], model, "residual", 1536)] == [1024, 512]
    for r in call["results"]:
        del r["buffer"], r["offset"]
    assert not any("own allocations" in e["producer"] for e in runtime_buffers([call], model, "residual", 1536))
