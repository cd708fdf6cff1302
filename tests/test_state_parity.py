"""Parity over the whole state a step leaves, on every call: the harness sees what a step changes beyond its results.

The faults here are planted in the real eager backend (the fault x backend table over eager, inductor
and the example vendor is ``tests/test_fault_matrix.py``); a pass would be a miss.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance.api.case import Case, CaseError, Workload, all_cases, register, select_cases
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend
from conformance.run.engine import run_case
from conformance.run.options import DEFAULT_STEPS, RunOptions
from conformance.run.repro import failing_check, failing_state, write_repro
from tests.faults import MIDDLE_CALL, backend_classes, planted
from tests.planted_repro_backends import FAULT_OFF, ToggleLostBufferBackend
from tests.sweep_sample import swept

EAGER = backend_classes()["eager"]


def _case(case_id: str) -> Case:
    (case,) = select_cases([case_id])
    return case


def _build(seed: int) -> Workload:
    return Workload(torch.nn.Linear(2, 2), (torch.randn(1, 2),))


def test_train_step_means_training_and_a_contradiction_is_refused_at_registration() -> None:
    assert Case("t-default", "train_step", "t", 0, _build).trains is True
    assert Case("i-default", "inference", "t", 0, _build).trains is False
    with pytest.raises(CaseError, match=r"train_step.*trains=False"):
        register(Case("t-not-training", "train_step", "t", 0, _build, trains=False))
    with pytest.raises(CaseError, match=r"inference.*trains=True.*train_step"):
        register(Case("i-training", "inference", "t", 0, _build, trains=True))
    assert Case("l-train", "loop", "t", 0, _build, trains=True).kind_problem() is None  # a loop says itself


def test_every_call_checks_results_inputs_buffers_and_parameters() -> None:
    result = run_case(_case("bn-mlp-s-train"), EagerBackend())
    assert result.status == Status.PASS, result.reason
    assert set(result.parity["calls"]) == {str(c) for c in range(2 + DEFAULT_STEPS)}
    compared = result.parity["calls"][str(1 + DEFAULT_STEPS)]["compared"]
    for piece in (
        "output[0]",
        "grad[bn.weight]",
        "input[0]",
        "buffer[bn.running_mean]",
        "buffer[bn.running_var]",
        "buffer[bn.num_batches_tracked]",
        "param[fc1.weight]",
    ):
        assert piece in compared, compared
    assert result.memory is not None and result.memory.measured_peak_bytes == result.memory.model_peak_bytes


@pytest.mark.parametrize(
    ("fault", "case_id", "names"),
    [
        ("inputs-overwritten", "mlp-s-infer", "call 0: input[0]:"),
        ("inputs-overwritten", "customop-early-late-s", "call 0: input["),
        (f"corrupt-call-{MIDDLE_CALL}-only", "mlp-s-infer", f"call {MIDDLE_CALL}: output[0]:"),
        (f"corrupt-call-{MIDDLE_CALL}-only", "loop-rnn-t3-train", f"call {MIDDLE_CALL}: "),
        ("lost-buffer-update", "bn-mlp-s-train", "call 0: buffer[bn."),
    ],
)
def test_state_fault_is_caught_naming_the_call_and_the_piece_of_state(fault: str, case_id: str, names: str) -> None:
    result = run_case(_case(case_id), planted(EAGER, fault)())
    assert result.status == Status.FAIL_PARITY, f"{fault} on {case_id}: {result.status} {result.reason}"
    assert result.reason.startswith(names), result.reason
    # the state was copied outside the probes: memory is judged as on the clean backend
    assert all(not c.failed for c in result.checks if c.name.value != "parity"), [c.to_json() for c in result.checks]


def test_middle_call_fault_is_missed_when_no_middle_call_is_made() -> None:
    """With one probed step (calls 0..2) call 3 never runs: the check is per call, not a guess."""
    result = run_case(_case("mlp-s-infer"), planted(EAGER, f"corrupt-call-{MIDDLE_CALL}-only")(), RunOptions(steps=1))
    assert result.status == Status.PASS, result.reason


def test_repro_of_a_lost_buffer_update_names_the_call_and_the_state(tmp_path: Path) -> None:
    case = _case("bn-mlp-s-train")
    result = run_case(case, ToggleLostBufferBackend())
    assert result.status == Status.FAIL_PARITY and failing_check(result) == "parity", result.reason
    state = failing_state(result)
    assert state is not None and state[0] == "call 0" and state[1].startswith("buffer[bn."), state
    repro = write_repro(case, ToggleLostBufferBackend(), result, tmp_path / "r.py")
    text = repro.read_text()
    assert f"FAILED_STATE = {state!r}" in text and "FAILED_CHECK = 'parity'" in text
    assert f"Failed state: call 0: {state[1]}" in text

    def script(fault_off: bool) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != FAULT_OFF}
        if fault_off:
            env[FAULT_OFF] = "1"
        return subprocess.run(
            [sys.executable, str(repro)], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
        )

    with_fault, without = script(False), script(True)
    assert with_fault.returncode == 1, with_fault.stdout + with_fault.stderr
    assert f"FAULT: check parity (call 0: {state[1]}) still fails" in with_fault.stdout
    assert without.returncode == 0, without.stdout + without.stderr


def test_optimizer_contradictions_are_refused_at_registration() -> None:
    assert Case("t-opt", "train_step", "t", 0, _build).optimizer == "sgd-momentum"
    with pytest.raises(CaseError, match=r"optimizer 'adam' on a case that does not train"):
        register(Case("i-opt", "inference", "t", 0, _build, optimizer="adam"))
    with pytest.raises(CaseError, match=r"unknown optimizer 'lbfgs'"):
        register(Case("t-lbfgs", "train_step", "t", 0, _build, optimizer="lbfgs"))
    assert Case("t-none", "train_step", "t", 0, _build, optimizer="none").build().optimizer is None
    with pytest.raises(CaseError, match=r"compile_optimizer=True with no optimizer"):
        register(Case("t-none-compiled", "train_step", "t", 0, _build, optimizer="none", compile_optimizer=True))


@pytest.mark.parametrize(
    ("fault", "names"),
    [
        ("wrong-optimizer-state", "call 0: optim[fc1.weight].exp_avg:"),
        ("optimizer-skips-a-parameter", "call 0: param[fc3.bias]:"),
        ("weights-frozen-at-first-call", "call 1: "),
    ],
)
def test_optimizer_faults_are_caught_under_adam(fault: str, names: str) -> None:
    result = run_case(_case("adam-mlp-s-train"), planted(EAGER, fault)())
    assert result.status == Status.FAIL_PARITY, f"{fault}: {result.status} {result.reason}"
    assert result.reason.startswith(names), result.reason


def test_parameters_and_optimizer_state_change_every_call_and_are_checked() -> None:
    result = run_case(_case("adam-mlp-s-train"), EagerBackend())
    assert result.status == Status.PASS, result.reason
    compared = result.parity["calls"]["0"]["compared"]
    assert {
        "param[fc1.weight]",
        "optim[fc1.weight].exp_avg",
        "optim[fc1.weight].exp_avg_sq",
        "optim[fc1.weight].step",
    } <= set(compared), compared


#: every training case with CONFORMANCE_TESTS_FULL=1; CI: a fixed sample of mod-* and zoo-* (tests/sweep_sample.py)
TRAINING = swept(c for c in all_cases() if c.trains and not EagerBackend.capabilities.missing_for(c))


@pytest.mark.parametrize("optimizer", ["adam"])  # SGD-momentum, the default: tests/test_backends_clean.py
@pytest.mark.parametrize("case", TRAINING, ids=lambda c: c.id)
def test_eager_is_byte_exact_on_every_training_case_with_adam(case: Case, optimizer: str) -> None:
    result = run_case(dataclasses.replace(case, optimizer=optimizer), EagerBackend())
    assert result.status == Status.PASS, result.reason
    assert result.memory is not None and result.memory.measured_peak_bytes == result.memory.model_peak_bytes


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["none", "wrong-optimizer-state", "optimizer-skips-a-parameter",
                                   "optimizer-holds-gradients", "optimizer-leaks-per-step"])
def test_inductor_with_the_optimizer_step_compiled_too(fault: str) -> None:
    """torch.compile(opt.step) with inductor: clean, it passes (parameters and Adam state equal to the
    eager references on every call) with the compiled optimizer in the probed window, held to the
    wrapper inductor generated for it (the program check's timeline exact); a fault in the step it
    compiled is caught, by parity or, for memory it keeps, by the residual."""
    backend = planted(backend_classes()["inductor"], fault)()
    result = run_case(_case("adam-compiled-mlp-s-train"), backend)
    if fault == "none":
        assert result.status == Status.PASS, result.reason
        assert not any("ran eagerly" in n or "outside the probes' window" in n for n in result.notes), result.notes
        memory = result.memory
        assert memory is not None and memory.model_source == "received-graphs"
        assert memory.residual_per_step == [0] * DEFAULT_STEPS  # zero_grad freed the gradients in the window
        program = memory.program_timeline or []
        assert any(e.startswith("optimizer:") and "args.clear()" in e for e, _ in program), program[-5:]
        check = result.check("program")
        assert check is not None and check.figures["timeline"] == "exact"
    elif fault.startswith("optimizer-") and fault != "optimizer-skips-a-parameter":
        assert result.status == Status.FAIL_RESIDUAL, result.reason
    else:
        assert result.status == Status.FAIL_PARITY and result.reason.startswith("call 0: "), result.reason


class _MakesItsCarry(torch.nn.Module):
    """A user's loop whose initial carry the program makes itself with the default dtype (float32)."""

    def __init__(self) -> None:
        super().__init__()
        self.alpha = torch.nn.Parameter(torch.tensor(0.3))

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        from torch._higher_order_ops.while_loop import while_loop

        def body(i: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = seq.index_select(0, i.reshape(1)).squeeze(0)
            return i + 1, self.alpha * x + (1 - self.alpha) * m

        start = (torch.zeros((), dtype=torch.int64), torch.zeros(seq.shape[1:]))
        return while_loop(lambda i, m: i < seq.shape[0], body, start)[1]


def test_the_float64_reference_makes_the_programs_own_tensors_in_float64() -> None:
    """The float64 reference runs the program with float64 inputs and parameters; a float32 tensor it makes
    itself (``torch.zeros(n)``) would be a loop carry of another dtype than the body returns, which while_loop
    refuses: the reference makes it float64 too, and the default dtype is put back."""
    case = Case("user-ema-loop", "loop", "loop", 0, lambda seed: Workload(_MakesItsCarry(), (torch.randn(5, 3),)),
                requires=frozenset({"while_loop"}))
    r = run_case(case, EagerBackend())
    assert r.status == Status.PASS, r.reason
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("case_id", ["mlp-s-train", "adam-mlp-s-train", "bn-mlp-s-train"])
def test_a_learning_rate_off_by_a_thousandth_fails_on_the_first_call_by_the_update(case_id: str) -> None:
    """SGD-momentum and Adam stepping with ``lr * (1 - 1e-3)`` (a learning rate stored in bfloat16): the weights'
    values are within their allowance (rtol at the weights' own scale), their updates are not (a parameter that
    starts at 0, batch norm's bias, is its first update and fails by its value too)."""
    result = run_case(_case(case_id), planted(EAGER, "lr-off-by-1e-3")(), RunOptions(steps=1))
    assert result.status == Status.FAIL_PARITY, f"{case_id}: {result.status} {result.reason}"
    assert result.reason.startswith("call 0: param[") and "update on this call" in result.reason, result.reason
    first = result.parity["calls"]["0"]
    failing = first["failures"]
    updates = {f["name"] for f in failing if f.get("update")}
    values = {f["name"] for f in failing if not f.get("update")}
    assert "param[fc1.weight]" in updates and "param[fc1.weight]" not in values, failing  # its value alone passes
    assert all(f["miss"] == "wrong value" for f in failing), failing
    assert set(first["updates"]) >= {n for n in first["compared"] if n.startswith("param[")}
