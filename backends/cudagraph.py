"""``cudagraph``: ``torch.compile(mode="reduce-overhead")``, i.e. inductor with CUDA graph trees.

Inductor is called through the same recording shim as ``inductor`` with the
options ``mode="reduce-overhead"`` sets (``triton.cudagraphs``), so the graphs it
lowers are still modelled.  Graph trees run each graph in phases: *warm-up*
(first call, eager in the tree's pool), *record* (second call, captured into the
pool), then *replay*.  The engine's probed steps are the later runs; each run's
phase is measured (graphs recorded / functions warmed up during it, read from
the tree manager) and reported as ``result.memory.findings["phase"]`` / ``["phases"]``.

A replay allocates nothing through the caching allocator: the graphs' memory is
the tree's private pool, visible only in snapshots.  The probe of a replay
(:class:`CudaGraphProbe`) is the allocator's window in requested bytes, plus the
pool-resident outputs of the tree that someone still holds when the window ends
(gradients the backward graph wrote into the pool and ``.grad`` now holds), so
the residual is the caller's view.  The first two runs (warm-up, record) are
probed by the step itself, and the pool's peak while recording is reported as
``result.memory.findings["record_pool_peak_bytes"]`` (phase ``record``; reported, not
judged: the pool also holds copies of non-parameter inputs the model does not
count).  Beyond peak and residual the backend checks, per case:

- every step: the last replay's outputs and gradients equal the first run's (the
  engine's parity run is the warm-up; a replay writing over live memory shows
  here), one private pool for all graphs (forward, backward, branches), and the
  last probed replay recorded nothing and reserved no new pool memory;
- pool cases (``cases/cuda_pools.py``, models implementing
  :class:`conformance.api.pools.PoolScenario`): sharing between
  branches, reuse of dropped outputs, re-recording for kept outputs
  (:mod:`conformance.api.pools`), measured in fresh trees.
"""

from __future__ import annotations

import contextlib
import gc
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from conformance.api.adapter import Backend, Capabilities, CompiledStep
from conformance.api.aot import model_of_received, modelled_compile
from conformance.api.case import Case, Workload
from conformance.api.pools import (
    PoolCheck,
    PoolContract,
    PoolScenario,
    check_pool_reuse,
    check_pool_sharing,
    check_replay_stable,
    check_rerecorded,
    check_single_pool,
)
from conformance.api.step import StepOutput, run_module_step
from conformance.api.verdict import Check, CheckName, Status, passed
from conformance.models.lifetime import LifetimeModel, Observation
from conformance.probes.cpu import Allocation, MemoryProbe, MemoryTrace
from conformance.probes.cuda import (
    DOMAIN,
    CudaAllocatorProbe,
    Snapshot,
    cuda_unavailable_reason,
    new_pools,
    pool_peaks,
    pool_reserved,
)

from .inductor import RecordingCompiler
from .inductor_cuda import cuda_versions, move_workload

CALIBRATION_RUNS = 3  # warm-up, record, replay: a scenario's pool is complete after the first replay
SELF_PROBED_RUNS = 2  # warm-up and record: the engine's parity and timed runs, before its probed steps


def reduce_overhead_options() -> dict[str, Any]:
    """Exactly the inductor options ``torch.compile(mode="reduce-overhead", dynamic=False)`` passes.

    Taken from torch.compile's own inductor wrapper, which also sets the CUPTI
    environment variables CUDA graphs need (profiler teardown workaround).
    """
    return dict(torch._TorchCompileInductorWrapper("reduce-overhead", None, False).config)


def count_tree_nodes(roots: Mapping[Any, list[Any]]) -> int:
    """Recorded graphs in a tree manager's ``roots`` (warm-up nodes are never in the tree)."""
    stack = [n for nodes in roots.values() for n in nodes]
    count = 0
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(c for children in node.children.values() for c in children)
    return count


def tree_counts(device: int) -> tuple[int, int]:
    """``(graphs recorded, functions warmed up)`` so far by the graph-tree manager of ``device``."""
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_manager(device, create_if_none_exists=False)
    if manager is None or manager.roots is None:
        return 0, 0
    return count_tree_nodes(manager.roots), len(manager.warmed_up_functions)


def phase_of(recorded: int, warmed: int, total_graphs: int) -> str:
    """Which phase a step was in: any recording makes it ``record``; no graph at all, ``eager``."""
    if recorded:
        return "record"
    if warmed:
        return "warmup"
    return "replay" if total_graphs else "eager"


def private_reserved_since(baseline: Snapshot, snapshot: Snapshot) -> dict[tuple[int, int], int]:
    """Reserved bytes of the private pools created after ``baseline`` (this step's tree)."""
    fresh = new_pools(baseline, snapshot)
    return {p: b for p, b in pool_reserved(snapshot).items() if p in fresh}


def pool_outputs_held(path: Iterable[Any], is_live: Callable[[Any], bool]) -> dict[int, int]:
    """``data_ptr -> nbytes`` of the outputs of a tree path that something still holds."""
    held: dict[int, int] = {}
    for node in path:
        metas = getattr(node, "outputs_metadata", None)  # warm-up nodes have none: nothing in the pool yet
        if metas is None:
            continue
        for ref, meta in zip(node.outputs_weakrefs, metas):
            if ref is not None and isinstance(meta, dict) and is_live(ref):
                held[int(meta["data_ptr"])] = int(meta["nbytes"])
    return held


def tree_outputs_held(device: int) -> dict[int, int]:
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_manager(device, create_if_none_exists=False)
    node = getattr(manager, "current_node", None)
    if node is None:
        return {}
    return pool_outputs_held(node._path_from_root, cudagraph_trees.is_live)


def add_pool_held(trace: MemoryTrace, before: Mapping[int, int], after: Mapping[int, int]) -> None:
    """Append the pool outputs held at the window's end that the allocator did not see allocated.

    A replay writes its outputs into pool memory recorded long ago, so they are
    not allocations of the window; held at its end, they are what the caller keeps.
    """
    alive = {a.ptr for a in trace.still_alive()}
    t = trace.timeline[-1][0] + 1 if trace.timeline else 0
    for ptr, nbytes in sorted(after.items()):
        if ptr in before or ptr in alive:
            continue
        trace.allocations.append(Allocation(ptr, nbytes, t, None, None, "cudagraph pool output",
                                            seq=len(trace.allocations)))
        trace.timeline.append((t, trace.residual_bytes + nbytes))


class CudaGraphProbe(CudaAllocatorProbe):
    """The caching allocator over a replay, plus the tree's pool outputs still held at its end."""

    def __enter__(self) -> CudaGraphProbe:
        self._held_before = tree_outputs_held(self._device_index())
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        add_pool_held(self.trace, self._held_before, tree_outputs_held(self._device_index()))


@dataclass
class RunInfo:
    phase: str
    recorded: int
    warmed: int
    pool_reserved_bytes: int
    pools: dict[tuple[int, int], int]  # private pool -> reserved bytes, after the run
    pool_peak_bytes: int | None = None  # peak live requested bytes in this tree's pools (self-probed runs)


class CountedUnit:
    """A separately compiled unit that counts the graphs recorded while it ran."""

    def __init__(self, name: str, compiled: Callable[..., Any], counts: dict[str, int], device: int) -> None:
        self.name, self.compiled, self.counts, self.device = name, compiled, counts, device

    def __call__(self, *args: Any) -> Any:
        before = tree_counts(self.device)[0]
        out = self.compiled(*args)
        self.counts[self.name] += tree_counts(self.device)[0] - before
        return out


def compile_units(model: PoolScenario, counts: dict[str, int], device: int) -> None:
    """Compile each of a scenario's units as its own graph (its own tree node)."""
    for name in model.compile_units:
        compiled = torch.compile(getattr(model, name), backend=RecordingCompiler(reduce_overhead_options()),
                                 dynamic=False)
        model.unit_calls[name] = CountedUnit(name, compiled, counts, device)


def fresh_trees() -> None:
    from torch._inductor import cudagraph_trees

    torch._dynamo.reset()
    cudagraph_trees.reset_cudagraph_trees()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def scenario_pool_bytes(case: Case, paths: tuple[str, ...], device: int) -> int:
    """Private-pool reserved bytes of a fresh tree running only ``paths`` of a scenario case."""
    fresh_trees()
    baseline = torch.cuda.memory._snapshot()
    workload = move_workload(case.build(), "cuda")
    model = workload.model
    if not isinstance(model, PoolScenario):
        raise TypeError(f"{case.id}: its model is not a conformance.api.pools.PoolScenario")
    model.active_paths = paths
    compile_units(model, defaultdict(int), device)
    with torch.no_grad():
        for _ in range(CALIBRATION_RUNS):
            torch.compiler.cudagraph_mark_step_begin()
            out = model(*workload.inputs)
            del out
    torch.cuda.synchronize()
    total = sum(private_reserved_since(baseline, torch.cuda.memory._snapshot()).values())
    del model, workload
    fresh_trees()
    return total


class CudaGraphStep(CompiledStep):
    def __init__(self, case: Case, workload: Workload) -> None:
        self.case = case
        self.workload = workload
        self.device = torch.cuda.current_device()
        self.baseline = torch.cuda.memory._snapshot()
        self.runs: list[RunInfo] = []
        self.unit_recordings: dict[str, int] = defaultdict(int)
        self.checks: dict[str, PoolCheck] = {}
        model = workload.model
        self.scenario = isinstance(model, PoolScenario)  # units compiled separately, paths run step by step
        self.recorder: RecordingCompiler | None = None
        if isinstance(model, PoolScenario):
            compile_units(model, self.unit_recordings, self.device)
            self.call: Callable[..., Any] = model
        else:
            self.recorder = RecordingCompiler(reduce_overhead_options())
            self.call = torch.compile(model, backend=self.recorder, dynamic=False)

    def run(self) -> StepOutput:
        torch.compiler.cudagraph_mark_step_begin()  # each run is one step of the tree
        graphs0, warm0 = tree_counts(self.device)
        probe = CudaAllocatorProbe(self.device) if len(self.runs) < SELF_PROBED_RUNS else None
        with modelled_compile(), probe or contextlib.nullcontext():
            out = run_module_step(self.call, self.workload, self.case.trains)
        torch.cuda.synchronize()
        graphs1, warm1 = tree_counts(self.device)
        pools = private_reserved_since(self.baseline, torch.cuda.memory._snapshot())
        peak = None
        if probe is not None and probe.snapshot is not None:
            peak = sum(v for p, v in pool_peaks(probe.snapshot, self.device).items() if p in pools)
        self.runs.append(RunInfo(phase_of(graphs1 - graphs0, warm1 - warm0, graphs1), graphs1 - graphs0,
                                 warm1 - warm0, sum(pools.values()), pools, peak))
        return out

    def received_model(self, observation: Observation) -> LifetimeModel | None:
        return model_of_received(self.recorder.graphs, observation) if self.recorder else None

    def memory_findings(self, observation: Observation, traces: list[MemoryTrace]) -> dict[str, Any]:
        last = self.runs[-1] if self.runs else None
        return {
            "phase": last.phase if last else None,  # the phase of the last probed step
            "phases": [r.phase for r in self.runs],  # every run: parity run, timed run, probed steps
            "graphs_recorded_per_run": [r.recorded for r in self.runs],
            "record_pool_peak_bytes": max((r.pool_peak_bytes or 0 for r in self.runs if r.phase == "record"),
                                          default=None),
            "private_pool_reserved_bytes": last.pool_reserved_bytes if last else 0,
            "private_pools": [list(p) for p in last.pools] if last else [],
            "unit_recordings": dict(self.unit_recordings),
        }

    def notes(self) -> list[str]:
        if self.runs and self.runs[-1].phase == "eager":
            if self.runs[-1].pools:
                return [f"{len(self.runs[-1].pools)} private pool(s) made, but this thread's graph-tree manager "
                        "recorded no graph: graphs were recorded elsewhere (phases unknown)"]
            return ["no CUDA graph was recorded: graph trees fell back to eager (see inductor's cudagraph skip log)"]
        return []

    def contract_check(self) -> Check | None:
        if len(self.runs) < 2:
            return None
        prev, last = self.runs[-2], self.runs[-1]
        # A replay reading memory that was overwritten shows as wrong results on the last probed
        # call, which the engine checks against float64 with that call's own fresh inputs.
        if last.phase == "eager" and not last.pools:
            if self.scenario:
                return Check(CheckName.POOL, Status.FAIL_RUN, "no CUDA graph was recorded for a CUDA-graph pool case")
            return None
        # Phases are read from this thread's tree manager; private pools made since the compile
        # show graphs recorded all the same (by another manager, say): the pool contracts still hold.
        self.checks["single_pool"] = check_single_pool(last.pools)
        self.checks["replay_stable"] = check_replay_stable(prev.pool_reserved_bytes, last.pool_reserved_bytes,
                                                           last.recorded)
        model = self.workload.model
        contract = model.pool_contract if isinstance(model, PoolScenario) else None
        if contract is not None:
            self.checks[contract.kind] = self._pool_check(contract)
        figures = {name: check.to_json() for name, check in self.checks.items()}
        for name, check in self.checks.items():
            if not check.ok:
                return Check(CheckName.POOL, POOL_FAILURE[name], f"cudagraph contract {name}: {check.reason}", figures)
        return passed(CheckName.POOL, **figures)

    def _pool_check(self, contract: PoolContract) -> PoolCheck:
        if contract.kind == "survive":
            return check_rerecorded(self.unit_recordings, contract.rerecorded_unit)
        if contract.kind == "share":
            ab = scenario_pool_bytes(self.case, ("ab",), self.device)
            ab_prime = scenario_pool_bytes(self.case, ("ab_prime",), self.device)
            both = scenario_pool_bytes(self.case, ("ab", "ab_prime"), self.device)
            return check_pool_sharing(both, ab, ab_prime)
        dropped = scenario_pool_bytes(self.case, ("drop",), self.device)
        kept = scenario_pool_bytes(self.case, ("keep",), self.device)
        return check_pool_reuse(dropped, kept, contract.freed_bytes)


#: the verdict each pool check fails with: more pool than promised is a peak, growth a residual,
#: an output overwritten (a unit not recorded again) a wrong run
POOL_FAILURE = {"single_pool": Status.FAIL_PEAK, "replay_stable": Status.FAIL_RESIDUAL, "share": Status.FAIL_PEAK,
                "reuse": Status.FAIL_PEAK, "survive": Status.FAIL_RUN}


class CudaGraphBackend(Backend):
    name = "cudagraph"
    capabilities = Capabilities(cuda_graphs=True, devices=("cuda",), memory_domains=(DOMAIN,),
                                outputs_overwritten_by_next_call=True)  # run() marks each step begun
    cost_weight = 10.0  # inductor compiles, plus the pool cases' calibration trees

    def unavailable_reason(self) -> str | None:
        return cuda_unavailable_reason()

    def versions(self) -> dict[str, str]:
        return {**cuda_versions(), "inductor": torch.__version__, "mode": "reduce-overhead"}

    def make_probe(self) -> MemoryProbe:
        return CudaGraphProbe()

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        fresh_trees()  # a new tree manager, hence a new private pool: the case's pool is told apart by its id
        return CudaGraphStep(case, move_workload(workload, "cuda"))
