"""The CPU allocator probe: window-only counting and its arithmetic, through either recorder."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import record_function

from conformance.api.adapter import discover
from conformance.api.case import resolve
from conformance.api.step import clear_grads, host_copies
from conformance.probes.cpu import CpuAllocatorProbe, MemoryTrace, build_trace
from conformance.probes.observer import OPEN_END, ObserverError, ObserverWindow, decode

RECORDERS = ["observer", "profiler"]
REPO = Path(__file__).resolve().parent.parent


def test_build_trace_counts_only_allocations_inside_the_window() -> None:
    events = [
        (1, 0xA, 100, "n1", "aten::mm"),
        (2, 0xB, 50, "n2", "aten::relu"),
        (3, 0xF, -999, None, None),  # a tensor made before recording freed inside it
        (4, 0xA, -100, None, None),
        (5, 0xC, 10, "n3", "aten::sum"),
    ]
    trace = build_trace("torch-cpu", events)
    assert trace.peak_bytes == 150
    assert trace.residual_bytes == 60
    assert trace.foreign_free_bytes == 999
    assert [a.label for a in trace.still_alive()] == ["n2", "n3"]
    assert [a.label for a in trace.live_at(2)] == ["n1", "n2"]


def test_pointer_reuse_is_a_new_allocation() -> None:
    trace = build_trace("torch-cpu", [(1, 0xA, 8, None, None), (2, 0xA, -8, None, None), (3, 0xA, 16, None, None)])
    assert trace.peak_bytes == 16 and len(trace.allocations) == 2


@pytest.mark.parametrize("recorder", RECORDERS)
def test_real_probe_ignores_tensors_made_before_recording(recorder: str) -> None:
    gc.collect()  # earlier tests' garbage must not be collected (and counted as a foreign free) in the window
    before = [torch.randn(1000)]
    gc.disable()
    try:
        with CpuAllocatorProbe(recorder) as probe:
            kept = torch.empty(256)  # 1 KiB, alive at the end
            tmp = torch.empty(512)  # 2 KiB, freed inside
            del tmp
            before.clear()  # frees 4000 bytes allocated before the window
    finally:
        gc.enable()
    assert probe.trace.peak_bytes == 256 * 4 + 512 * 4
    assert probe.trace.residual_bytes == 256 * 4
    # the allocator may or may not report that free (with whatever else the process freed meanwhile);
    # either way it is kept out of the count, which the two figures above show
    assert probe.trace.foreign_free_bytes == 0 or probe.trace.foreign_free_bytes >= 4000
    del kept


def _signature(trace: MemoryTrace) -> tuple[object, ...]:
    """Everything a verdict reads from a trace, but the clock."""
    return ([(a.nbytes, a.label, a.op, a.transient_in, a.order_alloc, a.order_free) for a in trace.allocations],
            [live for _, live in trace.timeline], trace.foreign_free_bytes)


@pytest.mark.parametrize(("backend", "case_id"), [
    ("eager", "mlp-s-train"),  # node ranges label every allocation
    ("eager", "loop-rnn-t3"),
    ("inductor", "customop-early-late-s"),  # extern kernels and a custom op: innermost and outermost operators
])
def test_observer_records_what_the_profiler_records(backend: str, case_id: str) -> None:
    """The native observer and the profiler see the same allocations, labels, operators and op-internal transients."""
    case = resolve(case_id)
    assert case is not None
    workload = case.build()
    step = discover().get(backend).compile(case, workload)
    for _ in range(2):
        clear_grads(workload.model)
        step.run()
    traces: dict[str, MemoryTrace] = {}
    for recorder in RECORDERS:
        clear_grads(workload.model)
        gc.collect()
        with CpuAllocatorProbe(recorder) as probe:
            out = step.run()
            del out
        traces[recorder] = probe.trace
    torch._dynamo.reset()
    observed = _signature(traces["observer"])
    assert observed == _signature(traces["profiler"])
    allocations = traces["observer"].allocations
    assert any(a.op for a in allocations)  # operators were seen (not only bare allocations)
    if backend == "eager":
        assert any(a.label for a in allocations)  # and the reference executor's node ranges


def test_observer_leaves_the_profiler_off_and_will_not_nest() -> None:
    with CpuAllocatorProbe("observer") as probe:
        assert not torch.autograd._profiler_enabled()  # the program runs as users run it
        with pytest.raises(ObserverError, match="already recording"):
            ObserverWindow()
        kept = torch.empty(64)
    assert probe.trace.residual_bytes == 256
    with CpuAllocatorProbe("observer") as again:  # the refused window left nothing behind
        del kept
    assert again.trace.allocations == []


def test_observer_attributes_nested_ranges_as_the_profiler_does() -> None:
    """A node range resets the operator context, user ranges change nothing, the outermost operator owns
    what is freed inside it: both recorders, on the same real calls."""
    def work() -> list[torch.Tensor]:
        with record_function("node:outer_node"):
            a = torch.ones(64)
            with record_function("a user range"), record_function("node:inner_node"):
                b = torch.mm(torch.ones(8, 8), torch.ones(8, 8))  # inputs freed inside the window
            c = torch.nn.functional.layer_norm(a.view(8, 8), (8,))  # an op with internal workspace
            del a
        return [b, c]

    work()
    traces = {}
    for recorder in RECORDERS:
        gc.collect()
        with CpuAllocatorProbe(recorder) as probe:
            kept = work()
        traces[recorder] = probe.trace
        del kept
    assert _signature(traces["observer"]) == _signature(traces["profiler"])
    labels = {a.label for a in traces["observer"].allocations}
    assert {"outer_node", "inner_node"} <= labels


def test_decode_maps_names_and_outer_calls() -> None:
    names = {0: b"mm_1", 1: b"aten::mm", 2: b"aten::empty"}
    events = [10, 0xA, 64, 0, 2, 0,   # allocated in aten::empty inside aten::mm, node mm_1
              11, 0xA, -64, 0, 1, 0,
              12, 0xB, 8, -1, -1, -1,  # no range at all
              13, 0xC, 4, -1, 1, 1]    # inside a call still open at the window's end
    calls = [1, 15, 1, -1]
    assert decode(events, calls, lambda i: names[i]) == [
        (10, 0xA, 64, "mm_1", "aten::empty", ("aten::mm", 15)),
        (11, 0xA, -64, "mm_1", "aten::mm", ("aten::mm", 15)),
        (12, 0xB, 8, None, None, None),
        (13, 0xC, 4, None, "aten::mm", ("aten::mm", OPEN_END)),
    ]


def test_a_run_through_the_profiler_says_so_and_judges_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.run.engine import run_case

    case = resolve("mlp-s-train")
    assert case is not None
    eager = discover().get("eager")
    observed = run_case(case, eager)
    monkeypatch.setenv("CONFORMANCE_PROBE", "profiler")
    profiled = run_case(case, eager)
    assert not any("recorded by the profiler" in n for n in observed.notes)
    assert any("recorded by the profiler" in n and "CONFORMANCE_PROBE=profiler" in n for n in profiled.notes)
    assert (profiled.status, profiled.reason, profiled.excess_bytes) == (observed.status, observed.reason,
                                                                         observed.excess_bytes)
    for key in ("measured_peak_bytes", "measured_residual_bytes", "residual_per_step", "peak_per_step"):
        assert getattr(profiled.memory, key) == getattr(observed.memory, key), key


def test_without_a_compiler_the_profiler_records_and_the_result_says_why(tmp_path: Path) -> None:
    """No C++ compiler (and no observer built before): the run falls back to the profiler, same verdict."""
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "conformance", "run", "--backend", "eager", "--case", "mlp-s-train",
                           "--out", "out", "--no-report", "--no-history"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "results.jsonl").read_text())
    assert result["status"] == "pass"
    assert any("recorded by the profiler" in n and "no C++ compiler" in n for n in result["notes"]), result["notes"]


def test_copies_of_lazy_results_are_their_values_and_allocate_nothing_the_probe_sees() -> None:
    """A step's results are copied inside the window through NumPy; torch keeps some lazy (a conjugate or
    negative view, autograd's zero gradient) or in a dtype NumPy lacks (complex32): each copy has the
    tensor's values, and resolving it allocates nothing through torch's allocator."""
    z = torch.tensor([1 + 2j, -3 - 0.5j], dtype=torch.complex64)
    lazy = {"conj": z.conj(), "neg": z.conj().imag, "zero": torch._efficientzerotensor(2, 3),
            "complex32": z.to(torch.complex32), "bfloat16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16)}
    expected = {"conj": torch.tensor([1 - 2j, -3 + 0.5j]), "neg": torch.tensor([-2.0, 0.5]), "zero": torch.zeros(2, 3),
                "complex32": z, "bfloat16": torch.tensor([1.5, -2.0])}
    gc.collect()
    with CpuAllocatorProbe("observer") as probe:
        copies = host_copies(lazy)
    assert probe.trace.peak_bytes == 0
    for name, want in expected.items():
        got = copies[name]
        assert got.dtype == lazy[name].dtype and not got.is_conj() and not got.is_neg(), name
        assert not got._is_zerotensor() and torch.equal(got.to(want.dtype), want), (name, got)
