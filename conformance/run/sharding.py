"""Deterministic, cost-balanced sharding of case x backend pairs across CI machines.

Pairs are placed longest-first onto the least-loaded shard (LPT scheduling), so
shards finish at about the same time even when one backend compiles for seconds
and another runs in milliseconds.  Costs come from a previous run's timings where
given, otherwise from each backend's declared ``cost_weight`` and the case kind.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.output.records import read_results
from conformance.util.phases import pair_wall_s

KIND_WEIGHT = {"inference": 1.0, "train_step": 2.0, "loop": 2.0}


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as users write it
    count: int

    @classmethod
    def parse(cls, text: str, flag: str = "--shard") -> Shard:
        """``I/N``; a ValueError's message names ``flag`` (the option as the user spelled it)."""
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not m:
            raise ValueError(f"{flag} must look like I/N (e.g. 2/3), got {text!r}")
        if max(len(m.group(1)), len(m.group(2))) > 18:  # counted, not converted: a range check costs nothing
            raise ValueError(f"{flag} {text.strip()[:60]}: I and N must be below 10**18")
        index, count = int(m.group(1)), int(m.group(2))
        if count < 1 or not 1 <= index <= count:
            raise ValueError(f"{flag} {text}: need 1 <= I <= N")
        return cls(index, count)


@dataclass(frozen=True)
class PairCost:
    pair_id: str  # "case@backend"
    cost: float


def estimate(case_kind: str, trains: bool, backend_weight: float, measured_s: float | None) -> float:
    if measured_s is not None and measured_s > 0:
        return measured_s
    return backend_weight * KIND_WEIGHT.get(case_kind, 1.0) * (1.5 if trains and case_kind == "loop" else 1.0)


def assign(costs: Sequence[PairCost], count: int) -> list[list[str]]:
    """Longest-processing-time-first onto the least-loaded shard; ties broken by id and index."""
    placed = _placed(costs, count)
    return [placed.get(i, []) for i in range(count)]


def _placed(costs: Sequence[PairCost], count: int) -> dict[int, list[str]]:
    """Shard index (0-based) -> its pairs, for the shards that get any.  The least-loaded shard comes from a
    heap of the first ``len(costs)`` shards only: the k-th pair placed can reach no shard beyond index k (an
    untouched shard's key is ``(0, index)``), so a count of 10**12 costs what a count of ``len(costs)`` does."""
    heap = [(0.0, i) for i in range(min(count, len(costs)))]  # (load, index): already a heap
    placed: dict[int, list[str]] = {}
    for pc in sorted(costs, key=lambda p: (-p.cost, p.pair_id)):
        load, target = heapq.heappop(heap)
        placed.setdefault(target, []).append(pc.pair_id)
        heapq.heappush(heap, (load + pc.cost, target))
    return placed


def select_shard(costs: Sequence[PairCost], shard: Shard) -> set[str]:
    return set(_placed(costs, shard.count).get(shard.index - 1, []))


def measured_durations(results_dir: Path | None) -> Mapping[str, float]:
    """``case@backend`` -> seconds spent, from an earlier results directory (if any)."""
    if results_dir is None:
        return {}
    path = results_dir / "results.jsonl" if results_dir.is_dir() else results_dir
    if not path.exists():
        return {}
    return {f"{r.case}@{r.backend}": pair_wall_s(r.timing) for r in read_results(path)}
