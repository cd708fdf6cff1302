"""Every pair starts from the same process state: what one backend leaves changed is put back, the pair
that changed it gets a note naming it, and the next pair's verdict and figures are what they are alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conformance.api.result import Result
from conformance.run import pristine
from conformance.run.isolation import WorkerPool
from tests.test_bad_inputs import cli_subprocess

LEAKY = "tests.leaky_backends:"


def figures(result: Result) -> tuple[str, int | None, int | None, int | None]:
    memory = result.memory
    assert memory is not None, (result.status, result.reason)
    return (str(result.status), memory.measured_peak_bytes, memory.model_peak_bytes, memory.measured_residual_bytes)


def state_note(result: Result) -> str:
    return next((n for n in result.notes if "global state" in n), "")


def test_snapshot_diff_restore_in_process() -> None:
    import torch._dynamo

    before = pristine.snapshot()
    torch._dynamo.config.disable = True
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    os.environ["CONFORMANCE_TEST_LEAK"] = "1"
    try:
        changes = pristine.diff(before, pristine.snapshot())
        names = {c.name for c in changes}
        assert {"torch._dynamo.config.disable", "torch grad mode", "torch default dtype",
                "environment variable CONFORMANCE_TEST_LEAK"} <= names, names
        assert pristine.restore(before, changes) == []
        assert pristine.diff(before, pristine.snapshot()) == []
        text = pristine.note(changes, [], recycled=False)
        assert text is not None and "torch._dynamo.config.disable (False -> True)" in text and "restored" in text
    finally:
        torch._dynamo.config.disable = False
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)
        os.environ.pop("CONFORMANCE_TEST_LEAK", None)


@pytest.mark.parametrize(("leaky", "victim", "backend", "changed"), [
    ("DynamoDisableBackend", "mlp-s-infer", "inductor", "torch._dynamo.config.disable (False -> True)"),
    ("GradOffBackend", "mlp-s-train", "eager", "torch grad mode (True -> False)"),
    ("CasesEnvBackend", "mlp-s-infer", "eager", "environment variable CONFORMANCE_CASES"),
    ("Float64Backend", "mlp-s-infer", "eager", "torch default dtype (torch.float32 -> torch.float64)"),
])
def test_the_next_pair_in_the_worker_is_judged_as_alone(leaky: str, victim: str, backend: str, changed: str) -> None:
    """Alone (the worker's first pair), then after the leaky backend's pair in the same worker: the same
    verdict and figures; the leaky pair carries the note, the next pair none."""
    with WorkerPool() as pool:
        alone = pool.run(victim, backend, timeout_s=300)
        leaked = pool.run("mlp-s-infer", LEAKY + leaky, timeout_s=300)
        after = pool.run(victim, backend, timeout_s=300)
        assert pool.spawn_count == 1
    assert alone.status == "pass", alone.reason
    assert figures(after) == figures(alone), (after.reason, after.notes)
    assert changed in state_note(leaked), leaked.notes
    assert "restored" in state_note(leaked)
    assert state_note(after) == ""


def test_chdir_under_no_isolate_is_restored(tmp_path: Path) -> None:
    """Pairs run in the run's own process: the working directory a backend moves to is moved back, the
    run publishes both verdicts, and the next pair's figures are its own."""
    out = tmp_path / "out"
    proc = cli_subprocess("run", "--no-isolate", "--out", "out", "--no-history", "--no-report", "--no-auto-repro",
                          "--backend", LEAKY + "ChdirBackend", "--backend", "eager", "--case", "mlp-s-infer",
                          cwd=tmp_path)
    assert "INTERNALERROR" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    records = [Result.from_json(json.loads(line)) for line in (out / "results.jsonl").read_text().splitlines()]
    by_backend = {r.backend: r for r in records}
    assert set(by_backend) == {"leaky-chdir", "eager"}, proc.stderr[-2000:]
    assert "working directory" in state_note(by_backend["leaky-chdir"])
    assert by_backend["eager"].status == "pass" and state_note(by_backend["eager"]) == ""
    assert figures(by_backend["eager"]) == figures(by_backend["leaky-chdir"])  # both eager; the leak is after compile


def test_state_that_cannot_be_restored_recycles_the_worker() -> None:
    """Inference mode entered and never left has no setter: the worker ends after that pair's verdict."""
    with WorkerPool() as pool:
        leaked = pool.run("mlp-s-infer", LEAKY + "InferenceModeBackend", timeout_s=300)
        after = pool.run("mlp-s-train", "eager", timeout_s=300)
        assert pool.spawn_count == 2
    assert "cannot be restored: torch inference mode (False -> True); the worker was recycled" in state_note(leaked)
    assert after.status == "pass", after.reason


def test_a_decomposition_one_backend_registers_never_reaches_the_next() -> None:
    """``import openvino.torch`` registers a wrong ``convolution_backward`` decomposition in torch's global table;
    the next backend in the worker that asks torch for that decomposition must get what a clean process gives
    (none), so its verdict is its verdict alone, and the pair that registered it is named in its own record."""
    victim, vendor = "mod-Conv2d-train", LEAKY + "DecomposingVendorBackend"
    with WorkerPool() as pool:
        alone = pool.run(victim, vendor, timeout_s=300)
        leaked = pool.run("mlp-s-infer", LEAKY + "ConvDecompositionBackend", timeout_s=300)
        after = pool.run(victim, vendor, timeout_s=300)
        assert pool.spawn_count == 1  # a table is put back in place: the worker goes on
    assert alone.status == "pass", alone.reason
    assert figures(after) == figures(alone), (after.status, after.reason, after.notes)
    said = state_note(leaked)
    assert "torch._decomp.global_decomposition_table['post_autograd'][aten.convolution_backward.default]" in said
    assert "tests.leaky_backends._wrong_convolution_backward" in said and "restored" in said, said
    assert state_note(after) == ""


def test_an_operator_registered_through_torch_library_recycles_the_worker() -> None:
    with WorkerPool() as pool:
        leaked = pool.run("mlp-s-infer", LEAKY + "OpRegisteringBackend", timeout_s=300)
        after = pool.run("mlp-s-infer", "eager", timeout_s=300)
        assert pool.spawn_count == 2
    said = state_note(leaked)
    assert "cannot be restored" in said and "leaky_vendor::twice" in said and "the worker was recycled" in said, said
    assert after.status == "pass" and state_note(after) == "", after.notes
