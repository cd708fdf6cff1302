"""Sharding covers exactly the unsharded pairs, balanced by cost; merged shards equal one run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.api.case import select_cases
from conformance.run.sharding import PairCost, Shard, assign, select_shard


def test_shards_partition_the_pairs_deterministically() -> None:
    costs = [PairCost(f"c{i}@b{i % 3}", float(1 + (i * 7) % 5)) for i in range(40)]
    shards = assign(costs, 3)
    flat = [p for s in shards for p in s]
    assert sorted(flat) == sorted(p.pair_id for p in costs) and len(flat) == len(set(flat))
    assert shards == assign(list(reversed(costs)), 3)  # input order does not matter


def test_shards_balance_cost_not_count() -> None:
    costs = [PairCost("slow@inductor", 30.0)] + [PairCost(f"c{i}@eager", 1.0) for i in range(30)]
    shards = assign(costs, 2)
    loads = [sum(next(c.cost for c in costs if c.pair_id == p) for p in s) for s in shards]
    assert loads == [30.0, 30.0]
    assert len(shards[0]) != len(shards[1])  # even by cost, uneven by count


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "a/b", "1-3"])
def test_bad_shard_spec(text: str) -> None:
    with pytest.raises(ValueError):
        Shard.parse(text)


def test_select_shard_is_the_assigned_part() -> None:
    costs = [PairCost(f"p{i}", 1.0) for i in range(6)]
    parts = [select_shard(costs, Shard(i, 3)) for i in (1, 2, 3)]
    assert set().union(*parts) == {f"p{i}" for i in range(6)} and all(len(p) == 2 for p in parts)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.full(ci="tests/test_nightly_recipe.py::test_two_shards_then_the_merge_report_and_history")
def test_shards_merged_equal_the_unsharded_run(tmp_path: Path) -> None:
    # in-process pairs: isolation is not what sharding changes, and each run would start a worker
    select = ["--backend", "eager", "--case", "mlp-*", "--case", "customop-early-late-s", "--no-isolate"]
    # the unsharded run's verdicts: eager passes every one of these pairs (its byte-exact contract,
    # tests/test_backends_clean.py), so the merge must give exactly these
    full = {(c.id, "eager"): "pass" for c in select_cases(["mlp-*", "customop-early-late-s"])}
    for i in (1, 2):
        shard = _cli("run", *select, "--shard", f"{i}/2", "--out", f"s{i}", cwd=tmp_path)
        assert shard.returncode == 0, shard.stderr
    merged = _cli("merge", "s1", "s2", "-o", "merged", cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr

    def verdicts(d: str) -> dict[tuple[str, str], str]:
        lines = (tmp_path / d / "results.jsonl").read_text().splitlines()
        return {(r["case"], r["backend"]): r["status"] for r in map(json.loads, lines)}

    shard_sets = [set(verdicts(f"s{i}")) for i in (1, 2)]
    assert all(shard_sets) and sum(map(len, shard_sets)) == len(set().union(*shard_sets))
    assert verdicts("merged") == full
    assert len(full) == 7
    assert (tmp_path / "merged" / "junit.xml").exists()
    again = _cli("merge", "s1", "s1", "-o", "dup", cwd=tmp_path)
    assert again.returncode == 2 and "is in both" in again.stderr


BROKEN_CASES = '''
from conformance.api.case import Case, register, select_cases

good = select_cases(["mlp-s-infer"])[0]
register(Case("shardbuild-good", "inference", "shardbuild", 0, good.builder, in_default=False))


def broken(seed):
    raise RuntimeError("this case cannot build")


register(Case("shardbuild-broken", "inference", "shardbuild", 0, broken, in_default=False))
'''


def test_a_shard_builds_only_its_own_cases_before_it_runs(tmp_path: Path) -> None:
    """The up-front build check (a case that cannot build refuses the run in one line) covers the shard's
    pairs, not the whole selection: a shard of the op sweep would otherwise build its 2,300 cases first."""
    (tmp_path / "shard_cases.py").write_text(BROKEN_CASES)
    select = ["--cases", "shard_cases.py", "--backend", "eager", "--case", "shardbuild-*", "--no-report",
              "--no-history"]
    done = [_cli("run", *select, "--shard", f"{i}/2", "--out", f"s{i}", cwd=tmp_path) for i in (1, 2)]
    refused = [d for d in done if d.returncode == 2]
    ran = [d for d in done if d.returncode == 0]
    assert len(refused) == 1 and len(ran) == 1, [(d.returncode, d.stderr[-500:]) for d in done]
    assert "case shardbuild-broken failed to build: RuntimeError: this case cannot build" in refused[0].stderr
    i = done.index(ran[0]) + 1
    records = [json.loads(line) for line in (tmp_path / f"s{i}" / "results.jsonl").read_text().splitlines()]
    assert [(r["case"], r["status"]) for r in records] == [("shardbuild-good", "pass")]
