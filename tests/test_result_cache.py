"""The result cache (:mod:`conformance.util.result_cache`): references and lifetime models kept across runs.

A warm rerun must make none of them and judge every pair the same; anything the key does not name (the
graph, the code that models it) must be a miss; an entry that is torn, another version's or garbage
must be made again, never trusted; ``--no-cache`` makes everything; and a faulty backend must still fail
on a warm cache: only what the harness derives is kept, never a measurement.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from conformance.api.case import select_cases
from conformance.api.step import trace_step
from conformance.models.lifetime import model_graph
from conformance.models.lifetime.cached import decode_model, encode_model, graph_digest
from conformance.models.lifetime.model import LifetimeModel, Storage
from conformance.models.program import Binding
from conformance.util import result_cache
from conformance.util.result_cache import FORMAT, MAGIC, REBUILT, ResultCache, sources_digest

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- entries


def test_an_entry_is_read_back_only_whole_and_as_written(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path)
    body = b'{"x": 1}' * 100
    assert cache.write("reference", "ab" * 32, body)
    assert cache.read("reference", "ab" * 32) == body
    path = cache.path("reference", "ab" * 32)
    good = path.read_bytes()
    head = good.split(b"\n", 1)[0]
    spoiled = {
        "torn": good[: len(good) // 2],
        "torn by one byte": good[:-1],
        "another format": good.replace(b" %d " % FORMAT, b" %d " % (FORMAT + 1), 1),
        "another kind": good.replace(b" reference ", b" user-model ", 1),
        "another key's entry": good.replace(b"ab" * 32, b"cd" * 32, 1),
        "a changed byte": good[:-1] + bytes([good[-1] ^ 1]),
        "garbage": os.urandom(len(good)),
        "empty": b"",
        "a header alone": head + b"\n",
    }
    for what, data in spoiled.items():
        path.write_bytes(data)
        assert cache.read("reference", "ab" * 32) is None, what
    # a good read is counted by its caller once the body decodes (ResultCache.hit); each spoiled one is rebuilt
    assert cache.counts() == {"reference": {REBUILT: len(spoiled)}}
    assert cache.read("reference", "ef" * 32) is None  # nothing there: a miss
    assert cache.counts() == {"reference": {"miss": 1}}
    assert cache.write("reference", "ab" * 32, body) and cache.read("reference", "ab" * 32) == body
    assert not list(path.parent.glob("*.tmp")), "a temporary file was left beside the entry"


def test_a_spoiled_entry_is_counted_rebuilt(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path)
    cache.write("user-model", "12" * 32, b"{}")
    cache.path("user-model", "12" * 32).write_bytes(MAGIC + b" garbage")
    assert cache.read("user-model", "12" * 32) is None
    assert cache.counts() == {"user-model": {REBUILT: 1}}


# --------------------------------------------------------------------------- keys


def test_the_key_follows_the_code_a_model_is_made_by(tmp_path: Path) -> None:
    """The harness's own version of a model is the digest of its sources and of what they import, at any depth:
    a change there is a new key (no version constant to forget), a change elsewhere is not."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "conformance", tree / "conformance", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "backends", "cases"))
    models = ("conformance.models",)
    references = ("conformance.checks.state",)
    before = sources_digest(tree, models), sources_digest(tree, references)
    assert before == (result_cache.source_digest(*models), result_cache.source_digest(*references))
    with (tree / "conformance" / "output" / "report.py").open("a") as f:  # no model imports it
        f.write("\n# a comment\n")
    assert (sources_digest(tree, models), sources_digest(tree, references)) == before
    with (tree / "conformance" / "models" / "lifetime" / "liveness.py").open("a") as f:
        f.write("\n# a comment\n")
    assert sources_digest(tree, models) != before[0]
    with (tree / "conformance" / "checks" / "noise.py").open("a") as f:  # imported by the references' code
        f.write("\n# a comment\n")
    assert sources_digest(tree, references) != before[1]


def _traced(fn: Any, *args: torch.Tensor) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*args)


def test_the_graph_digest_sees_ops_shapes_and_strides() -> None:
    x = torch.randn(2, 3)
    same = graph_digest(_traced(torch.tanh, x))
    assert graph_digest(_traced(torch.tanh, torch.randn(2, 3))) == same  # values are not the graph
    assert graph_digest(_traced(torch.sigmoid, x)) != same
    assert graph_digest(_traced(torch.tanh, torch.randn(3, 2))) != same
    assert graph_digest(_traced(torch.tanh, torch.randn(3, 2).t())) != same  # a transposed layout
    assert graph_digest(_traced(torch.tanh, x.double())) != same


# --------------------------------------------------------------------------- the codec


def _fields(s: Storage) -> dict[str, Any]:
    return {k: v for k, v in vars(s).items()}


def test_a_model_reads_back_as_it_was_made() -> None:
    (case,) = select_cases(["mlp-s-train"])
    workload = case.build()
    gm, _, _ = trace_step(workload, case.trains)
    model = model_graph(gm, retained_outputs=range(1, 7), cache_as=None)
    back = decode_model(json.loads(json.dumps({"codec": 1, "model": encode_model(model)})))
    assert (back.events, back.live_bytes, back.work_events) == (model.events, model.live_bytes, model.work_events)
    assert [_fields(s) for s in back.storages] == [_fields(s) for s in model.storages]
    assert (back.peak_bytes, back.residual_bytes, back.made_bytes) == (model.peak_bytes, model.residual_bytes,
                                                                      model.made_bytes)


def test_a_program_s_findings_keep_what_they_refer_to() -> None:
    """A program model's bindings refer to its storages and to each other: read back, they refer to the read
    model's own storages and bindings, as the late-reference check reads them."""
    a = Storage(0, 64, "buf0", "mm", (4, 4), "torch.float32", birth=0, death=3, last_use=2)
    b = Storage(1, 32, "buf1", "add", (8,), "torch.float32", birth=1, death=None)
    first = Binding("call", "buf0", 0, kind="tuple", last_load=1, released=3, settled=3)
    second = Binding("call", "view", 1)
    first.suspects.append((2, (a, b)))
    first.view_readers[2] = {0: [second]}
    model = LifetimeModel(["fw:mm", "fw:add", "fw:sum", "del"], [64, 96, 96, 32], [a, b], {0, 1, 2}, [first, second])
    back = decode_model(json.loads(json.dumps({"codec": 1, "model": encode_model(model)})))
    one, two = back.findings
    assert isinstance(one, Binding) and (one.name, one.kind, one.released) == ("buf0", "tuple", 3)
    event, held = one.suspects[0]
    assert event == 2 and held[0] is back.storages[0] and held[1] is back.storages[1]
    assert one.view_readers[2][0][0] is two
    assert back.storages[0].shape == (4, 4)


# --------------------------------------------------------------------------- real runs

CASES_FILE = '''
import os
import torch
from conformance.api.case import Case, Workload, register


class Step(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        return (torch.tanh(y) if os.environ.get("CACHE_PROBE_OP", "tanh") == "tanh" else torch.sigmoid(y)).sum()


register(Case("cache-probe-train", "train_step", "cache-probe", 0, lambda seed: Workload(Step(), (torch.randn(4, 8),))))
'''


def _run(tmp: Path, out: str, cache: Path, *args: str, op: str = "tanh") -> dict[str, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
           "CONFORMANCE_RESULT_CACHE": str(cache), "CACHE_PROBE_OP": op}
    proc = subprocess.run([sys.executable, "-m", "conformance", "run", "--steps", "1", "--no-report", "--no-history",
                           "--no-auto-repro", "--out", str(tmp / out), *args], cwd=tmp, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=900)
    lines = (tmp / out / "results.jsonl").read_text().splitlines() if (tmp / out / "results.jsonl").is_file() else []
    assert lines, proc.stdout[-3000:]
    return {f"{r['case']}@{r['backend']}": r for r in map(json.loads, lines)}


def _judged(record: dict[str, Any]) -> dict[str, Any]:
    """A record but for its times (the timing, when each measured event happened) and its cache counts."""
    judged = {k: v for k, v in record.items() if k not in ("timing", "cache")}
    memory = dict(judged["memory"] or {})
    memory["timeline"] = [live for _, live in memory.get("timeline") or []]
    return {**judged, "memory": memory}


def _outcomes(records: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """Per kind of entry, the outcomes seen over every pair."""
    seen: dict[str, set[str]] = {}
    for record in records.values():
        for kind, outcomes in record["cache"].items():
            seen.setdefault(kind, set()).update(o for o, n in outcomes.items() if n)
    return seen


@pytest.mark.slow
def test_a_warm_rerun_makes_nothing_again_and_judges_the_same(tmp_path: Path) -> None:
    """Inductor on a training case uses every kind of entry; its warm rerun (isolated, as runs are) finds each."""
    cache = tmp_path / "cache"
    args = ("--backend", "inductor", "--case", "mlp-s-train")
    cold = _run(tmp_path, "cold", cache, *args)
    warm = _run(tmp_path, "warm", cache, *args)
    assert set(_outcomes(cold)) == set(result_cache.KINDS) and "miss" in _outcomes(cold)["reference"]
    assert _outcomes(warm) == {kind: {"hit"} for kind in result_cache.KINDS}, warm
    assert {k: _judged(r) for k, r in warm.items()} == {k: _judged(r) for k, r in cold.items()}
    assert all("phase_reference_s" not in r["timing"] for r in warm.values())
    diff = subprocess.run([sys.executable, "-m", "conformance", "diff", str(tmp_path / "cold"), str(tmp_path / "warm")],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert diff.returncode == 0 and diff.stdout.startswith("0 of 1 pairs changed"), diff.stdout + diff.stderr


@pytest.fixture
def probe_cases(tmp_path: Path) -> tuple[str, ...]:
    source = tmp_path / "probe_cases.py"
    source.write_text(CASES_FILE)
    return ("--cases", str(source), "--case", "cache-probe-train", "--no-isolate")


def test_a_changed_graph_misses_and_a_spoiled_entry_is_made_again(tmp_path: Path,
                                                                    probe_cases: tuple[str, ...]) -> None:
    """The same case id, file, seed and inputs with another op in its step: its references and model are made
    anew.  Then every entry is spoiled (torn, another version's, garbage): each is made again, the verdict is
    the same, and the entries written over them are found by the next run."""
    cache = tmp_path / "cache"
    args = (*probe_cases, "--backend", "eager")
    first = _run(tmp_path, "tanh", cache, *args)
    changed = _run(tmp_path, "sigmoid", cache, *args, op="sigmoid")
    again = _run(tmp_path, "tanh-again", cache, *args)
    (pair,) = first
    assert first[pair]["status"] == changed[pair]["status"] == "pass", (first[pair]["reason"], changed[pair]["reason"])
    assert _outcomes(changed) == _outcomes(first) == {"reference": {"miss"}, "user-model": {"miss"}}
    assert _outcomes(again) == {"reference": {"hit"}, "user-model": {"hit"}}
    assert _judged(again[pair]) == _judged(first[pair])

    entries = sorted(p for p in cache.rglob("*") if p.is_file())
    assert len(entries) == 4  # a reference and a model for each graph
    for i, entry in enumerate(entries):
        data = entry.read_bytes()
        spoiled = [data[: len(data) // 3], data.replace(b" %d " % FORMAT, b" 0 ", 1), os.urandom(200)][i % 3]
        entry.write_bytes(spoiled)
    rebuilt = _run(tmp_path, "rebuilt", cache, *args)
    assert _outcomes(rebuilt) == {"reference": {"rebuilt"}, "user-model": {"rebuilt"}}
    assert _judged(rebuilt[pair]) == _judged(first[pair])
    assert _outcomes(_run(tmp_path, "after", cache, *args)) == {"reference": {"hit"}, "user-model": {"hit"}}


def test_no_cache_makes_everything_and_writes_nothing(tmp_path: Path, probe_cases: tuple[str, ...]) -> None:
    cache = tmp_path / "cache"
    args = (*probe_cases, "--backend", "eager")
    warm = _run(tmp_path, "warm", cache, *args)
    stored = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    off = _run(tmp_path, "off", cache, *args, "--no-cache")
    (pair,) = off
    assert stored and off[pair]["cache"] == {} and "phase_reference_s" in off[pair]["timing"]
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == stored
    assert _judged(off[pair]) == _judged(warm[pair])


def test_a_planted_fault_still_fails_on_a_warm_cache(tmp_path: Path, probe_cases: tuple[str, ...]) -> None:
    """A clean backend fills the cache; faulty ones (a leak, a wrong gradient) then run the same case on it, find
    its references and model, and fail as they do with no cache: the measurement is never cached."""
    cache = tmp_path / "cache"
    clean = _run(tmp_path, "clean", cache, *probe_cases, "--backend", "eager")
    assert all(r["status"] == "pass" for r in clean.values())
    faulty = ("--backend", "tests.planted_backends:LeakIntermediateBackend",
              "--backend", "tests.planted_backends:PerturbGradBackend")
    warm = _run(tmp_path, "faulty-warm", cache, *probe_cases, *faulty)
    alone = _run(tmp_path, "faulty-alone", cache, *probe_cases, *faulty, "--no-cache")
    statuses = {k.split("@")[1]: r["status"] for k, r in warm.items()}
    assert statuses == {"planted-leak": "fail-residual", "planted-grad": "fail-parity"}, \
        {k: r["reason"] for k, r in warm.items()}
    assert all(r["cache"]["reference"] == {"hit": 1} and r["cache"]["user-model"].get("hit") for r in warm.values())
    assert {k: _judged(r) for k, r in warm.items()} == {k: _judged(r) for k, r in alone.items()}
