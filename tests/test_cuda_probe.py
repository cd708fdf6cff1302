"""The CUDA probe's arithmetic and the CUDA-graph pool contracts, on recorded snapshot dicts.

The snapshot fixtures follow ``torch.cuda.memory._snapshot()`` exactly as the
allocator writes it (torch/csrc/cuda/memory_snapshot.cpp, CUDACachingAllocator):
segments with ``segment_pool_id`` / ``segment_type`` and their blocks (rounded
``size``, ``requested_size``, ``state``), and ``device_traces`` whose ``alloc`` /
``free_requested`` entries carry the *requested* size and the entry's ``pool_id``.
Those run on CPU.  Tests marked ``cuda`` need a GPU and skip here with the reason.
"""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from conformance.api.adapter import CAPABILITY_NAMES, Capabilities, discover
from conformance.api.case import all_cases, select_cases
from conformance.api.pools import (
    POOL_SLACK_BYTES,
    PoolContract,
    PoolScenario,
    check_pool_reuse,
    check_pool_sharing,
    check_replay_stable,
    check_rerecorded,
    check_single_pool,
    expected_pool_bytes,
)
from conformance.api.step import reference_step
from conformance.api.verdict import CheckName, Status
from conformance.backends.cudagraph import (
    CudaGraphBackend,
    CudaGraphStep,
    RunInfo,
    add_pool_held,
    count_tree_nodes,
    phase_of,
    pool_outputs_held,
    private_reserved_since,
)
from conformance.backends.eager import EagerBackend
from conformance.backends.inductor_cuda import InductorCudaBackend
from conformance.cases.cuda_pools import COLS, ROWS, TENSOR_BYTES, Share, Survive
from conformance.models.lifetime import Observation
from conformance.probes.cuda import (
    DEFAULT_POOL,
    DOMAIN,
    CudaAllocatorProbe,
    cuda_unavailable_reason,
    new_pools,
    pool_peaks,
    pool_reserved,
    pool_usage,
    private,
    requested_stats,
    trace_from_snapshot,
    trace_from_stats,
)
from conformance.run.engine import run_case, user_level_model

MiB = 1 << 20
NO_CUDA = cuda_unavailable_reason()
needs_cuda = pytest.mark.skipif(NO_CUDA is not None, reason=NO_CUDA or "")
STREAM = 0
FRAME = [{"filename": "/work/model.py", "line": 42, "name": "forward"}]


# ---- fixtures in the allocator's own format -------------------------------------------------

def block(address: int, size: int, requested: int, state: str) -> dict[str, Any]:
    return {"address": address, "size": size, "requested_size": requested, "state": state,
            "frames": FRAME if state != "inactive" else []}


def segment(address: int, pool: tuple[int, int], blocks: list[tuple[int, int, str]], large: bool = True,
            device: int = 0) -> dict[str, Any]:
    """A segment as ``_snapshot()`` reports it; its totals follow from its blocks as in the allocator."""
    out, addr = [], address
    for size, requested, state in blocks:
        out.append(block(addr, size, requested, state))
        addr += size
    allocated = [b for b in out if b["state"] == "active_allocated"]
    return {
        "device": device, "address": address, "total_size": addr - address,
        "allocated_size": sum(b["size"] for b in allocated),
        "active_size": sum(b["size"] for b in out if b["state"] != "inactive"),
        "requested_size": sum(b["requested_size"] for b in allocated),
        "stream": STREAM, "segment_type": "large" if large else "small",
        "segment_pool_id": pool, "is_expandable": False, "frames": FRAME, "blocks": out,
    }


def entry(action: str, addr: int, size: int, t_us: int, pool: tuple[int, int] = DEFAULT_POOL) -> dict[str, Any]:
    return {"action": action, "addr": addr, "size": size, "stream": STREAM, "compile_context": "N/A",
            "user_metadata": "", "frames": FRAME if action == "alloc" else [], "time_us": t_us, "pool_id": pool}


def snapshot(segments: list[dict[str, Any]], trace: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"segments": segments, "device_traces": [trace or []],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0, "expandable_segments": False,
                                   "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                                   "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {}}}


SMALL = 0x7F3A_2000_0000  # a 2 MiB small-pool segment
LARGE = 0x7F3A_4000_0000
POOL = (0, 1)  # graph_pool_handle() of a graph-tree manager

#: A window on the default pool: 1000 B (block 1024) and 3000 B (block 3072) allocated, the
#: first freed, then 500 000 B in a large segment; a tensor made before the window is freed in it.
WINDOW = snapshot(
    [segment(SMALL, DEFAULT_POOL, [(1024, 1000, "inactive"), (3072, 3000, "active_allocated"),
                                   (2 * MiB - 4096, 0, "inactive")], large=False),
     segment(LARGE, DEFAULT_POOL, [(2 * MiB, 2 * MiB - 1, "inactive")])],
    [entry("alloc", SMALL, 1000, 10),
     entry("alloc", SMALL + 1024, 3000, 11),
     entry("free_requested", SMALL, 1000, 12),
     entry("free_completed", SMALL, 1000, 12),
     entry("free_requested", 0x7F3A_0000_0000, 8192, 13),  # allocated before recording started
     entry("segment_alloc", LARGE, 2 * MiB, 14),
     entry("alloc", LARGE, 500_000, 14),
     entry("free_requested", LARGE, 500_000, 15),
     entry("free_completed", LARGE, 500_000, 15),
     entry("snapshot", 0, 0, 16)],
)


def pool_snapshot(pools: dict[tuple[int, int], list[int]]) -> dict[str, Any]:
    """A snapshot after a graph tree ran: per private pool, its segments' sizes (inactive after replay)."""
    segs, addr = [], LARGE
    for pool, sizes in pools.items():
        for size in sizes:
            segs.append(segment(addr, pool, [(size, size, "inactive")]))
            addr += size
    segs.append(segment(SMALL, DEFAULT_POOL, [(512, 400, "active_allocated"), (2 * MiB - 512, 0, "inactive")],
                        large=False))
    return snapshot(segs)


T = 16 * MiB  # one tensor of the pool cases
# A tree holding A->B alone: x (static input), h = A(x), B's two outputs; A->B' alike.
AB = pool_snapshot({(0, 5): [T, T, T, T]})
AB_PRIME = pool_snapshot({(0, 6): [T, T, T, T]})
BOTH_SHARED = pool_snapshot({(0, 7): [T, T, T, T]})  # B' reused B's dead outputs
BOTH_NOT_REUSED = pool_snapshot({(0, 7): [T, T, T, T, T, T]})  # B' got fresh segments
BOTH_TWO_POOLS = pool_snapshot({(0, 7): [T, T, T, T], (0, 8): [T, T]})  # B' recorded into its own pool


def mem(snap: dict[str, Any]) -> int:
    return sum(private(pool_reserved(snap)).values())


# ---- the probe's arithmetic ---------------------------------------------------------------

def test_requested_stats_window_is_relative_to_its_start() -> None:
    before = {"requested_bytes.all.current": 4096, "requested_bytes.all.peak": 4096,
              "allocated_bytes.all.current": 1 << 20}
    after = {"requested_bytes.all.current": 4096 + 300, "requested_bytes.all.peak": 4096 + 1000}
    assert requested_stats(after) == (4396, 5096)
    trace = trace_from_stats(before, after)
    assert (trace.domain, trace.peak_bytes, trace.residual_bytes) == (DOMAIN, 1000, 300)


def test_trace_counts_requested_bytes_not_blocks() -> None:
    trace = trace_from_snapshot(WINDOW)
    assert trace.peak_bytes == 3000 + 500_000  # 1000 was freed before the large alloc; blocks would say 3072 + 2 MiB
    assert trace.residual_bytes == 3000
    assert trace.foreign_free_bytes == 8192
    assert [a.nbytes for a in trace.still_alive()] == [3000]
    assert trace.allocations[0].op == "forward (/work/model.py:42)"


def test_trace_ignores_allocator_bookkeeping() -> None:
    only_bookkeeping = snapshot([], [e for e in WINDOW["device_traces"][0]
                                     if e["action"] not in ("alloc", "free_requested")])
    assert trace_from_snapshot(only_bookkeeping).timeline == []


def test_trace_filters_by_pool_and_device() -> None:
    trace = [entry("alloc", LARGE, 100, 1), entry("alloc", LARGE + 512, 7 * MiB, 2, POOL),
             entry("free_requested", LARGE + 512, 7 * MiB, 3, POOL), entry("alloc", LARGE + 512, 5 * MiB, 4, POOL)]
    snap = snapshot([], trace)
    assert trace_from_snapshot(snap, pools=[POOL]).peak_bytes == 7 * MiB
    assert trace_from_snapshot(snap, pools=[DEFAULT_POOL]).peak_bytes == 100
    assert trace_from_snapshot(snap).peak_bytes == 7 * MiB + 100
    assert pool_peaks(snap) == {DEFAULT_POOL: 100, POOL: 7 * MiB}
    assert trace_from_snapshot(snap, device=1).timeline == []


def test_pool_usage_and_reserved() -> None:
    snap = snapshot([
        segment(LARGE, POOL, [(T, T - 100, "active_allocated"), (2 * MiB, 1000, "inactive")]),
        segment(LARGE + T + 2 * MiB, POOL, [(T, T, "active_pending_free")]),
        segment(SMALL, DEFAULT_POOL, [(512, 4, "active_allocated"), (2 * MiB - 512, 0, "inactive")], large=False),
    ])
    assert pool_usage(snap) == {POOL: T - 100, DEFAULT_POOL: 4}
    assert pool_reserved(snap) == {POOL: 2 * T + 2 * MiB, DEFAULT_POOL: 2 * MiB}
    assert private(pool_reserved(snap)) == {POOL: 2 * T + 2 * MiB}
    assert pool_usage(snap, device=1) == {}


def test_new_pools_are_those_made_in_between() -> None:
    assert new_pools(AB, BOTH_TWO_POOLS) == {(0, 7), (0, 8)}
    assert new_pools(BOTH_TWO_POOLS, BOTH_TWO_POOLS) == set()
    assert private_reserved_since(AB, BOTH_TWO_POOLS) == {(0, 7): 4 * T, (0, 8): 2 * T}


# ---- the pool contracts -------------------------------------------------------------------

def test_expected_pool_bytes_is_the_larger_branch() -> None:
    assert expected_pool_bytes(64 * MiB, 80 * MiB) == 80 * MiB
    assert POOL_SLACK_BYTES < TENSOR_BYTES  # a pool one tensor too big cannot hide in the slack


def test_shared_pool_passes() -> None:
    check = check_pool_sharing(mem(BOTH_SHARED), mem(AB), mem(AB_PRIME))
    assert check.ok, check.reason
    assert check_single_pool(private(pool_reserved(BOTH_SHARED))).ok


def test_pool_not_reused_across_branches_fails() -> None:
    check = check_pool_sharing(mem(BOTH_NOT_REUSED), mem(AB), mem(AB_PRIME))
    assert not check.ok
    assert "do not share" in check.reason and str(mem(BOTH_NOT_REUSED)) in check.reason


def test_branch_recorded_into_its_own_pool_fails() -> None:
    assert not check_pool_sharing(mem(BOTH_TWO_POOLS), mem(AB), mem(AB_PRIME)).ok
    single = check_single_pool(private(pool_reserved(BOTH_TWO_POOLS)))
    assert not single.ok and "2 private pools" in single.reason


def test_sharing_slack_is_one_segment_rounding() -> None:
    assert check_pool_sharing(mem(AB) + POOL_SLACK_BYTES, mem(AB), mem(AB_PRIME)).ok
    assert not check_pool_sharing(mem(AB) + POOL_SLACK_BYTES + 1, mem(AB), mem(AB_PRIME)).ok


def test_dropped_output_reused() -> None:
    kept = mem(pool_snapshot({(0, 3): [T, T, T, T]}))  # x, p, q, r
    dropped = mem(pool_snapshot({(0, 4): [T, T, T]}))  # r took p's segment
    assert check_pool_reuse(dropped, kept, T).ok
    not_reused = mem(pool_snapshot({(0, 4): [T, T, T, T]}))
    check = check_pool_reuse(not_reused, kept, T)
    assert not check.ok and "did not reuse" in check.reason


def test_kept_output_needs_a_second_recording() -> None:
    assert check_rerecorded({"a": 1, "b": 2}, "b").ok
    check = check_rerecorded({"a": 1, "b": 1}, "b")
    assert not check.ok and "overwritten" in check.reason


def test_replay_records_nothing_and_reserves_nothing() -> None:
    assert check_replay_stable(4 * T, 4 * T, 0).ok
    assert not check_replay_stable(4 * T, 5 * T, 0).ok
    assert not check_replay_stable(4 * T, 4 * T, 1).ok


def test_tree_node_count_and_phase() -> None:
    leaf = SimpleNamespace(children={})
    b2 = SimpleNamespace(children={})
    a = SimpleNamespace(children={1: [leaf, b2], 2: [SimpleNamespace(children={})]})
    assert count_tree_nodes({0: [a], 5: [SimpleNamespace(children={})]}) == 5
    assert phase_of(recorded=1, warmed=2, total_graphs=3) == "record"
    assert phase_of(recorded=0, warmed=1, total_graphs=0) == "warmup"
    assert phase_of(recorded=0, warmed=0, total_graphs=3) == "replay"
    assert phase_of(recorded=0, warmed=0, total_graphs=0) == "eager"


def test_pool_outputs_held_by_the_caller() -> None:
    """Tree nodes as graph trees keep them: storage weakrefs and per-output metadata."""
    live, dead = object(), object()
    fw = SimpleNamespace(outputs_weakrefs=[live, dead, None],
                         outputs_metadata=[{"data_ptr": LARGE, "nbytes": 400}, {"data_ptr": LARGE + 512, "nbytes": 8},
                                           3])
    bw = SimpleNamespace(outputs_weakrefs=[live, live],
                         outputs_metadata=[{"data_ptr": LARGE + 1024, "nbytes": 4096},
                                           {"data_ptr": LARGE + 8192, "nbytes": 128}])
    warm = SimpleNamespace(outputs_weakrefs=[live])  # a warm-up node: nothing recorded in the pool
    held = pool_outputs_held([fw, bw, warm], lambda ref: ref is live)
    assert held == {LARGE: 400, LARGE + 1024: 4096, LARGE + 8192: 128}


def test_replay_residual_counts_held_pool_outputs_once() -> None:
    """A replay's grads sit in the pool: not allocated in the window, yet held by ``.grad`` at its end."""
    trace = trace_from_snapshot(snapshot([], [entry("alloc", SMALL, 100, 1), entry("alloc", SMALL + 512, 64, 2),
                                               entry("free_requested", SMALL, 100, 3)]))
    before = {LARGE: 400}  # held before the window: not this step's
    after = {LARGE: 400, LARGE + 1024: 4096, SMALL + 512: 64}  # SMALL + 512 the allocator already counts
    add_pool_held(trace, before, after)
    assert trace.residual_bytes == 64 + 4096
    assert trace.peak_bytes == 64 + 4096
    assert [a.op for a in trace.still_alive()][-1] == "cudagraph pool output"
    empty = trace_from_snapshot(snapshot([]))
    add_pool_held(empty, {}, {})
    assert empty.residual_bytes == 0


# ---- skips on a machine without CUDA ------------------------------------------------------

CUDA_CASES = [c for c in all_cases() if "cuda_graphs" in c.requires]


def test_cuda_graphs_is_a_capability() -> None:
    assert "cuda_graphs" in CAPABILITY_NAMES
    assert not Capabilities().cuda_graphs
    assert CudaGraphBackend.capabilities.cuda_graphs
    assert "device:cuda" in CudaGraphBackend.capabilities.describe()
    assert f"memory:{DOMAIN}" in InductorCudaBackend.capabilities.describe()
    assert {c.id for c in CUDA_CASES} >= {"cudagraph-pool-share", "cudagraph-pool-reuse",
                                          "cudagraph-pool-survive", "cudagraph-train-mlp"}


@pytest.mark.parametrize("case", CUDA_CASES, ids=lambda c: c.id)
def test_cpu_backend_skips_cuda_graph_cases(case) -> None:
    result = run_case(case, EagerBackend())
    assert result.status == "skip"
    assert result.reason == "backend lacks capability: cuda_graphs"


@pytest.mark.skipif(NO_CUDA is None, reason="CUDA is available: the backends run instead of skipping")
@pytest.mark.parametrize("backend", [CudaGraphBackend(), InductorCudaBackend()], ids=lambda b: b.name)
@pytest.mark.parametrize("case_id", ["cudagraph-pool-share", "cudagraph-train-mlp", "mlp-s-infer"])
def test_cuda_backends_skip_without_cuda(backend, case_id: str) -> None:
    result = run_case(select_cases([case_id])[0], backend)
    assert result.status == "skip"
    assert result.reason.startswith("CUDA not available: torch ")
    assert result.reason == backend.unavailable_reason() == NO_CUDA


def test_list_backends_shows_the_reason() -> None:
    registry = discover()
    assert {"cudagraph", "inductor-cuda"} <= set(registry.backends)
    for name in ("cudagraph", "inductor-cuda"):
        assert registry.backends[name].unavailable_reason() == NO_CUDA


def test_probe_imports_and_default_probe_is_cpu() -> None:
    assert CudaAllocatorProbe.domain == DOMAIN
    assert EagerBackend().make_probe().domain == "torch-cpu"
    assert CudaGraphBackend().make_probe().domain == DOMAIN  # constructing touches no CUDA


@pytest.mark.parametrize(
    "case", [c for c in CUDA_CASES if c.kind == "inference" and c.family == "cuda-pools"], ids=lambda c: c.id
)
def test_pool_scenarios_have_a_reference_on_cpu(case) -> None:
    """What the engine computes on CPU before the GPU runs (reference, lifetime model) works."""
    ref = reference_step(case, torch.float64)
    model = case.build().model
    per_path = {"ab": 2, "ab_prime": 2, "drop": 2, "keep": 3}
    assert len(ref.outputs) == sum(per_path[p] for p in model.paths)
    user_model, _ = user_level_model(case)
    assert user_model.peak_bytes >= TENSOR_BYTES


def test_survive_scenario_records_b_with_p_dead_before_keeping_it() -> None:
    """The liveness the case promises: p dead when B runs on the "drop" paths, alive on "keep"."""
    model = Survive()
    p_refs: list[weakref.ref[torch.Tensor]] = []
    p_alive_at_b: list[bool] = []

    def a(x: torch.Tensor) -> Any:
        p, q = model.a(x)
        p_refs.append(weakref.ref(p))
        return p, q

    def b(q: torch.Tensor) -> Any:
        p_alive_at_b.append(p_refs[-1]() is not None)
        return model.b(q)

    model.unit_calls = {"a": a, "b": b}
    with torch.no_grad():
        outs = model(torch.randn(ROWS, COLS))
    assert p_alive_at_b == [False, False, True]
    assert len(outs) == 2 + 2 + 3


def test_shipped_pool_cases_implement_the_scenario_interface() -> None:
    """The cudagraph backend runs a model as a pool scenario by ``conformance.api.pools.PoolScenario``
    alone: every shipped pool case's model implements it, and a plain model does not."""
    pool_cases = [c for c in all_cases() if c.id.startswith("cudagraph-pool-")]
    assert sorted(c.id for c in pool_cases) == ["cudagraph-pool-reuse", "cudagraph-pool-share",
                                                "cudagraph-pool-survive"]
    for case in pool_cases:
        model = case.build().model
        assert isinstance(model, PoolScenario), case.id
        assert model.pool_contract is not None and case.id == f"cudagraph-pool-{model.pool_contract.kind}"
        assert model.compile_units and all(isinstance(getattr(model, u), torch.nn.Module)
                                           for u in model.compile_units)
        assert model.unit_calls == {} and model.active_paths
        if model.pool_contract.kind == "reuse":
            assert model.pool_contract.freed_bytes == TENSOR_BYTES
        if model.pool_contract.kind == "survive":
            assert model.pool_contract.rerecorded_unit in model.compile_units
    assert not isinstance(select_cases(["cudagraph-train-mlp"])[0].build().model, PoolScenario)
    assert not isinstance(torch.nn.Linear(2, 2), PoolScenario)


@pytest.mark.parametrize(("kind", "figures", "needs"), [
    ("reuse", {}, "freed_bytes"), ("survive", {}, "rerecorded_unit"), ("spill", {}, "unknown pool contract"),
])
def test_a_pool_contract_without_its_figure_is_refused(kind: str, figures: dict[str, Any], needs: str) -> None:
    with pytest.raises(ValueError, match=needs):
        PoolContract(kind, **figures)  # type: ignore[arg-type]


def test_share_scenario_runs_a_subset_of_paths() -> None:
    model = Share()
    calls: list[str] = []

    def recording(name: str) -> Any:
        def call(*args: torch.Tensor) -> Any:
            calls.append(name)
            return getattr(model, name)(*args)

        return call

    model.unit_calls = {n: recording(n) for n in model.compile_units}
    model.active_paths = ("ab_prime",)
    with torch.no_grad():
        model(torch.randn(ROWS, COLS))
    assert calls == ["a", "b_prime"]


def _step_with_runs(runs: list[RunInfo], model: torch.nn.Module) -> CudaGraphStep:
    """A CudaGraphStep as after the engine's runs, without CUDA: only its verdict logic is exercised."""
    step = object.__new__(CudaGraphStep)
    step.case = select_cases(["mlp-s-infer"])[0]
    step.runs, step.checks, step.scenario = runs, {}, False
    step.unit_recordings = {}
    step.workload = SimpleNamespace(model=model)
    return step


def test_contract_verdicts() -> None:
    pool = {(0, 3): 4 * T}
    warm, rec = RunInfo("warmup", 0, 2, 0, {}), RunInfo("record", 2, 0, 4 * T, pool)
    replay = RunInfo("replay", 0, 0, 4 * T, pool)
    plain = torch.nn.Linear(2, 2)
    def verdict(step: CudaGraphStep) -> tuple[Status, str]:
        check = step.contract_check()
        assert check is not None and check.name == CheckName.POOL
        return check.status, check.reason

    clean = _step_with_runs([warm, rec, replay, replay], plain).contract_check()
    assert clean is not None and not clean.failed
    assert clean.figures["single_pool"]["ok"] and clean.figures["replay_stable"]["measured_bytes"] == 4 * T
    status, reason = verdict(_step_with_runs([warm, rec, replay, rec], plain))
    assert status == Status.FAIL_RESIDUAL and "replay_stable" in reason
    grown = RunInfo("replay", 0, 0, 5 * T, {(0, 3): 5 * T})
    assert verdict(_step_with_runs([warm, rec, replay, grown], plain))[0] == Status.FAIL_RESIDUAL
    two = RunInfo("replay", 0, 0, 4 * T, {(0, 3): 2 * T, (0, 4): 2 * T})
    status, reason = verdict(_step_with_runs([warm, rec, two, two], plain))
    assert status == Status.FAIL_PEAK and "2 private pools" in reason
    eager = RunInfo("eager", 0, 0, 0, {})
    assert _step_with_runs([eager, eager], plain).contract_check() is None  # not a pool case: a note only
    # no recording by this thread's tree manager, yet pools made: graphs recorded elsewhere, held to the contracts
    elsewhere = RunInfo("eager", 0, 0, 4 * T, {(0, 3): 2 * T, (0, 4): 2 * T})
    status, reason = verdict(_step_with_runs([elsewhere, elsewhere], plain))
    assert status == Status.FAIL_PEAK and "2 private pools" in reason
    assert "recorded elsewhere" in _step_with_runs([elsewhere, elsewhere], plain).notes()[0]
    survive = _step_with_runs([warm, rec, replay, replay], Survive())
    survive.unit_recordings = {"a": 1, "b": 1}
    status, reason = verdict(survive)
    assert status == Status.FAIL_RUN and "survive" in reason
    survive.unit_recordings = {"a": 1, "b": 2}
    assert verdict(survive) == (Status.PASS, "")
    info = survive.memory_findings(Observation(), [])
    assert info["phase"] == "replay" and info["phases"] == ["warmup", "record", "replay", "replay"]


# ---- on CUDA ------------------------------------------------------------------------------

@pytest.mark.cuda
@needs_cuda
def test_real_probe_counts_requested_bytes() -> None:
    keep_before = torch.empty(1000, device="cuda")
    with CudaAllocatorProbe() as probe:
        kept = torch.empty(250, device="cuda", dtype=torch.uint8)  # 250 B requested, 512 B block
        tmp = torch.empty(3 * MiB, device="cuda", dtype=torch.uint8)
        del tmp
        del keep_before
    assert probe.trace.peak_bytes == 250 + 3 * MiB
    assert probe.trace.residual_bytes == 250
    assert probe.trace.foreign_free_bytes == 4000
    assert probe.stats_trace.peak_bytes == 250 + 3 * MiB
    del kept


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("case_id", ["cudagraph-pool-share", "cudagraph-pool-reuse", "cudagraph-pool-survive",
                                     "cudagraph-train-mlp", "mlp-s-train"])
def test_cudagraph_pool_cases_pass(case_id: str) -> None:
    result = run_case(select_cases([case_id])[0], CudaGraphBackend())
    assert result.status == "pass", (result.reason, result.check("pool"))
    assert result.memory.findings["phase"] == "replay"
    assert result.memory.domain == DOMAIN
    assert len(result.memory.findings["private_pools"]) == 1


@pytest.mark.cuda
@needs_cuda
def test_cudagraph_catches_a_pool_per_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted fault: every graph (each unit, forward or backward) recorded by a graph-tree manager of its
    own, hence into a private pool of its own: no sharing.

    Each manager is whole, made as torch makes its one per device.  (Swapping the one manager's pool
    handle before each recording is no such backend: torch 2.11 on an H200 refused it with its own
    asserts, "storage data ptrs are not allocated in pool", before any contract was checked.)  The
    thread's manager then records nothing, which the backend must not read as eager."""
    from torch._inductor import cudagraph_trees

    original = cudagraph_trees.cudagraphify
    own_trees: list[Any] = []

    def own_tree(*args: Any, **kwargs: Any) -> Any:
        container = cudagraph_trees.TreeManagerContainer(kwargs["device_index"])
        own_trees.append(container)
        with monkeypatch.context() as local:
            local.setattr(cudagraph_trees, "get_container", lambda device_index: container)
            return original(*args, **kwargs)

    monkeypatch.setattr(cudagraph_trees, "cudagraphify", own_tree)
    result = run_case(select_cases(["cudagraph-pool-share"])[0], CudaGraphBackend())
    assert own_trees, "the fault was not planted: no graph went through cudagraphify"
    assert result.status == "fail-peak", result.reason
    assert result.reason.startswith("cudagraph contract ")
    assert len(result.memory.findings["private_pools"]) > 1


@pytest.mark.cuda
@needs_cuda
def test_inductor_cuda_passes_small_cases() -> None:
    for case_id in ("mlp-s-infer", "mlp-s-train", "customop-early-late-s"):
        result = run_case(select_cases([case_id])[0], InductorCudaBackend())
        assert result.status == "pass", (case_id, result.reason)
        assert result.memory.domain == DOMAIN
