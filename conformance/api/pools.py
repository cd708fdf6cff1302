"""What CUDA graph trees promise about their shared memory pool, as pure checks.

The "graphs sharing one pool" bug of docs/design.md ("The problem"): graph
trees record graphs A, B (and A, B' on another branch) into *one* private pool.
Three promises follow, each checked here on byte counts a probe measured
(private-pool reserved bytes from snapshots, see :mod:`conformance.probes.cuda`),
so the arithmetic is testable without a GPU:

- **share**: branches reuse each other's memory: the pool of a tree holding A→B
  and A→B' costs ``max(mem(A,B), mem(A,B'))``, not the sum.
- **reuse**: an output of A the caller dropped before B runs is memory B may use:
  dropping it saves its bytes.
- **survive**: an output of A the caller keeps while B runs is never overwritten
  (checked as parity on it after B) and B is recorded again for that liveness.

Slack: the allocator reserves pool memory in segments rounded up to 2 MiB
(``kRoundLarge``; allocations under 10 MiB get 2 MiB or 20 MiB segments), so two
trees doing the same work may differ by one segment's rounding.  The cases use
tensors of >= 16 MiB so that one such rounding (``POOL_SLACK_BYTES``) is far
below the bytes a broken pool would add (a whole branch, or a whole tensor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

MiB = 1 << 20
#: One large-segment rounding (``kRoundLarge`` in CUDACachingAllocator.cpp).
POOL_SLACK_BYTES = 2 * MiB

ContractKind = Literal["share", "reuse", "survive"]


@dataclass(frozen=True)
class PoolContract:
    """What a pool case asks of a CUDA graph backend beyond parity and memory.

    The case's module says how (``cases/cuda_pools.py``: units compiled as separate
    graphs, paths run one CUDA-graph step each); ``kind`` names the promise, and the
    promise's own figure comes with it: ``freed_bytes`` of a ``reuse`` contract (what the
    output dropped before B frees), ``rerecorded_unit`` of a ``survive`` one (the unit that
    must be recorded again once the kept output is alive around it).
    """

    kind: ContractKind
    description: str = ""
    freed_bytes: int = 0
    rerecorded_unit: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("share", "reuse", "survive"):
            raise ValueError(f"unknown pool contract {self.kind!r}: share, reuse or survive")
        if self.kind == "reuse" and self.freed_bytes <= 0:
            raise ValueError("a reuse contract needs freed_bytes: the bytes the dropped output frees")
        if self.kind == "survive" and not self.rerecorded_unit:
            raise ValueError("a survive contract needs rerecorded_unit: the unit recorded again")


@runtime_checkable
class PoolScenario(Protocol):
    """What a pool case's model implements for a CUDA graph backend to run it as a scenario.

    A model that is one (``isinstance(model, PoolScenario)``; the built-in ones derive from
    ``cases/cuda_pools.py``'s ``PoolScenarioModule``) is not compiled whole: the backend
    compiles each unit as its own graph (its own node of one graph tree), and the model runs
    its paths, one CUDA-graph step each, calling its units through ``unit_calls``.

    - ``compile_units``: the names of the model's attributes (submodules) compiled separately;
    - ``unit_calls``: where the backend puts each unit's compiled callable, by name (a unit
      missing there runs uncompiled);
    - ``active_paths``: the paths ``__call__`` runs, in order; the backend sets a subset to
      measure it alone in a fresh tree (e.g. ``("ab",)`` of a share case);
    - ``pool_contract``: the promise checked beyond parity and the every-step checks, or None.
    """

    @property
    def compile_units(self) -> Sequence[str]: ...

    @property
    def unit_calls(self) -> dict[str, Callable[..., Any]]: ...

    active_paths: tuple[str, ...]

    @property
    def pool_contract(self) -> PoolContract | None: ...

    def __call__(self, *inputs: Any) -> Any: ...


@dataclass(frozen=True)
class PoolCheck:
    ok: bool
    reason: str
    measured_bytes: int
    expected_bytes: int
    slack_bytes: int

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "reason": self.reason, "measured_bytes": self.measured_bytes,
                "expected_bytes": self.expected_bytes, "slack_bytes": self.slack_bytes}


def expected_pool_bytes(mem_ab: int, mem_ab_prime: int) -> int:
    """A tree holding both branches costs what its larger branch costs alone."""
    return max(mem_ab, mem_ab_prime)


def check_pool_sharing(measured: int, mem_ab: int, mem_ab_prime: int, slack: int = POOL_SLACK_BYTES) -> PoolCheck:
    """``measured`` (both branches in one tree) must be <= max(branch alone) + slack."""
    expected = expected_pool_bytes(mem_ab, mem_ab_prime)
    ok = measured <= expected + slack
    reason = "" if ok else (
        f"pool of A->B + A->B' is {measured} B > max(mem(A,B)={mem_ab} B, mem(A,B')={mem_ab_prime} B) "
        f"+ slack {slack} B: branches do not share the pool (sum would be {mem_ab + mem_ab_prime} B)"
    )
    return PoolCheck(ok, reason, measured, expected, slack)


def check_pool_reuse(mem_dropped: int, mem_kept: int, freed_bytes: int, slack: int = POOL_SLACK_BYTES) -> PoolCheck:
    """Dropping ``freed_bytes`` of A's outputs before B must save them: dropped <= kept - freed + slack."""
    expected = mem_kept - freed_bytes
    ok = mem_dropped <= expected + slack
    reason = "" if ok else (
        f"pool with A's output dropped before B is {mem_dropped} B > {mem_kept} B (kept) - {freed_bytes} B "
        f"(dropped) + slack {slack} B: B did not reuse the dropped output's memory"
    )
    return PoolCheck(ok, reason, mem_dropped, expected, slack)


def check_rerecorded(recordings: Mapping[str, int], unit: str, expected_at_least: int = 2) -> PoolCheck:
    """``unit`` must have been recorded once per liveness of what the caller kept around it."""
    got = recordings.get(unit, 0)
    ok = got >= expected_at_least
    reason = "" if ok else (
        f"{unit} was recorded {got} time(s), expected >= {expected_at_least}: a graph recorded while A's "
        "output was dead is being replayed while it is alive (its memory may be overwritten)"
    )
    return PoolCheck(ok, reason, got, expected_at_least, 0)


def check_single_pool(pools: Mapping[tuple[int, int], int]) -> PoolCheck:
    """All graphs of one tree (forward, backward, every branch) live in one private pool."""
    n = len(pools)
    ok = n == 1
    reason = "" if ok else f"graphs were recorded into {n} private pools {sorted(pools)}, expected one shared pool"
    return PoolCheck(ok, reason, n, 1, 0)


def check_replay_stable(reserved_before: int, reserved_after: int, recorded: int) -> PoolCheck:
    """A replay records no graph and reserves no pool memory: a tree that re-records grows without bound."""
    ok = reserved_after <= reserved_before and recorded == 0
    reason = "" if ok else (
        f"replay recorded {recorded} graph(s) and moved private-pool reserved bytes "
        f"{reserved_before} -> {reserved_after} B"
    )
    return PoolCheck(ok, reason, reserved_after, reserved_before, 0)
