"""A case's references made once per run and shared by its backends (:mod:`conformance.checks.references`).

Sharing must change nothing but the time: every pair gets the parity figures it got with references of its
own, a faulty backend's state never reaches another pair's reference, a reference is never shared across
seeds, steps, inputs or torch versions, and a reference that fails to be made is each pair's own verdict.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance.api.case import Case, Workload, select_cases
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend
from conformance.checks.references import InputDigest, SharedReferences, reference_key
from conformance.checks.state import make_references
from conformance.run.engine import run_case
from conformance.run.options import RunOptions
from conformance.util.phases import key
from tests.faults import planted

REPO = Path(__file__).resolve().parents[1]
EAGER = EagerBackend


def _case(case_id: str) -> Case:
    (case,) = select_cases([case_id])
    return case


def _made(result: object) -> bool:
    """Whether the pair made its references (else it loaded a shared one)."""
    return key("reference") in result.timing  # type: ignore[attr-defined]


def _stored(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.pt")) if directory.is_dir() else []


@pytest.mark.parametrize(("case_id", "fault"), [("bn-mlp-s-train", "weights-frozen-at-first-call"),
                                                ("bn-mlp-s-train", "lost-buffer-update")])
def test_a_faulty_backend_s_state_never_reaches_the_shared_reference(tmp_path: Path, case_id: str,
                                                                     fault: str) -> None:
    """A faulty training backend makes the case's references first; a clean one then loads them and gets the
    very figures it gets with its own, and the faulty one's figures are those it gets alone."""
    case, shared = _case(case_id), RunOptions(steps=2, references=str(tmp_path))
    faulty_alone = run_case(case, planted(EAGER, fault)(), RunOptions(steps=2))
    clean_alone = run_case(case, EagerBackend(), RunOptions(steps=2))
    faulty = run_case(case, planted(EAGER, fault)(), shared)
    clean = run_case(case, EagerBackend(), shared)
    assert faulty.status == Status.FAIL_PARITY and clean.status == Status.PASS, (faulty.reason, clean.reason)
    assert _made(faulty) and not _made(clean) and len(_stored(tmp_path)) == 1
    assert clean.parity == clean_alone.parity
    assert faulty.parity == faulty_alone.parity and faulty.reason == faulty_alone.reason


def test_every_load_is_a_fresh_copy(tmp_path: Path) -> None:
    """What a pair does to the references it loaded reaches no other pair."""
    case = _case("mlp-s-train")
    shared = SharedReferences(tmp_path)
    made = make_references(case, [0, 1])
    assert shared.store("k", made)
    first = shared.load("k")
    assert first is not None
    for ref in first.values():
        for t in [*ref.ref64.values(), *ref.eager32.values()]:
            t.add_(1.0) if t.is_floating_point() else t.fill_(7)
    second = shared.load("k")
    assert second is not None
    for call, ref in made.items():
        assert set(second[call].ref64) == set(ref.ref64)
        for name, t in ref.ref64.items():
            assert torch.equal(second[call].ref64[name], t), name
        for name, t in ref.eager32.items():
            assert torch.equal(second[call].eager32[name], t), name
        assert second[call].noise == dataclasses.replace(ref.noise, random=frozenset(ref.noise.random))


def _digest(*tensors: torch.Tensor) -> str:
    d = InputDigest()
    d.add("call 0", tensors)
    return d.hexdigest()


def test_the_key_names_seed_steps_inputs_torch_threads_and_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    case = _case("mlp-s-train")
    inputs = _digest(torch.ones(2))
    base = reference_key(case, [0, 1, 2], inputs)
    assert reference_key(case, [0, 1, 2], inputs) == base
    assert reference_key(dataclasses.replace(case, seed=case.seed + 1), [0, 1, 2], inputs) != base
    assert reference_key(case, [0, 1, 2, 3], inputs) != base
    assert reference_key(case, [0, 1, 2], _digest(torch.tensor([1.0, 1.0 + 2**-20]))) != base
    assert _digest(torch.ones(2)) != _digest(torch.ones(2, dtype=torch.float64))  # same values, other dtype
    assert _digest(torch.ones(2)) != _digest(torch.ones(1, 2))
    assert reference_key(_case("mlp-s-infer"), [0, 1, 2], inputs) != base
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert reference_key(case, [0, 1, 2], inputs) != base
    monkeypatch.undo()
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    try:
        torch.set_num_threads(threads + 1)
        assert reference_key(case, [0, 1, 2], inputs) != base
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision("medium" if precision != "medium" else "highest")
        assert reference_key(case, [0, 1, 2], inputs) != base
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)


def test_the_key_is_the_same_in_every_process() -> None:
    """Workers find each other's references: the key depends on nothing a process draws for itself (string
    hashing: a case's ``requires`` is a frozenset, whose order differs between processes)."""
    case = _case("loop-rnn-t3-train")
    assert len(case.requires) > 1
    code = ("from conformance.api.case import select_cases; from conformance.checks.references import reference_key;"
            "(c,) = select_cases(['loop-rnn-t3-train']); print(reference_key(c, [0, 1], 'x'))")
    keys = set()
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        keys.add(proc.stdout.strip())
    assert keys == {reference_key(case, [0, 1], "x")}


def test_another_seed_steps_or_inputs_make_their_own_reference(tmp_path: Path) -> None:
    case, shared = _case("mlp-s-infer"), str(tmp_path)
    assert _made(run_case(case, EagerBackend(), RunOptions(steps=1, references=shared)))
    assert not _made(run_case(case, EagerBackend(), RunOptions(steps=1, references=shared)))
    assert _made(run_case(case, EagerBackend(), RunOptions(steps=2, references=shared)))
    reseeded = dataclasses.replace(case, seed=case.seed + 1)
    result = run_case(reseeded, EagerBackend(), RunOptions(steps=1, references=shared))
    assert _made(result) and result.status == Status.PASS, result.reason
    assert len(_stored(tmp_path)) == 3


#: what the drifting builder adds to its seed: another process's draw, as a builder reading a process-wide
#: random state would make in another worker
_DRIFT = [0]


def _drifting(seed: int) -> Workload:
    torch.manual_seed(seed + _DRIFT[0])
    return Workload(torch.nn.Linear(8, 4), (torch.randn(2, 8),))


def test_a_case_whose_builder_gives_other_values_never_shares(tmp_path: Path) -> None:
    """A pair is held to the references of the values its backend was given: another build's values (same
    id, same seed) make their own references, and both pairs pass on them."""
    case = Case("t-drifting", "inference", "t", 0, _drifting)
    options = RunOptions(steps=1, references=str(tmp_path))
    try:
        first = run_case(case, EagerBackend(), options)
        _DRIFT[0] = 1000
        second = run_case(case, EagerBackend(), options)
    finally:
        _DRIFT[0] = 0
    assert first.status == Status.PASS and second.status == Status.PASS, (first.reason, second.reason)
    assert _made(first) and _made(second) and len(_stored(tmp_path)) == 2


class _NoFloat64(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float64:
            raise RuntimeError("this model refuses float64")
        return self.fc(x)


def _no_float64(seed: int) -> Workload:
    return Workload(_NoFloat64(), (torch.randn(2, 4),))


def test_a_reference_that_fails_is_each_pair_s_verdict_and_is_never_stored(tmp_path: Path) -> None:
    case = Case("t-no-float64", "inference", "t", 0, _no_float64)
    options = RunOptions(steps=1, references=str(tmp_path))
    for _ in range(2):
        result = run_case(case, EagerBackend(), options)
        assert result.status == Status.FAIL_RUN, result.reason
        assert result.reason.startswith("harness error in reference: the float64 and float32 calls: RuntimeError: "
                                        "this model refuses float64"), result.reason
        assert _made(result)
    assert _stored(tmp_path) == []


def test_a_run_s_pairs_share_the_references_across_workers(tmp_path: Path) -> None:
    """Three pairs of one case on two pytest-xdist workers: the pair that starts last starts after one of the
    others ended, so it loads their references; the run removes its references when it ends."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--case", "bn-mlp-s-train", "--backend", "eager", "--backend",
         "example-vendor", "--backend", "tests.planted_backends:LeakIntermediateBackend", "--workers", "2",
         "--steps", "1", "--out", "out", "--no-report", "--no-history"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 3, proc.stderr
    assert all(r["parity"] for r in results), [r["reason"] for r in results]
    loaded = [r for r in results if key("reference") not in r["timing"]]
    assert loaded and all(key("parity") in r["timing"] for r in loaded), [r["timing"] for r in results]
    assert not (tmp_path / "out" / ".references").exists()
    eager = next(r for r in results if r["backend"] == "eager")
    assert eager["status"] == "pass", eager["reason"]
