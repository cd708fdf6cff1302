"""A reference for any program plain PyTorch runs (issue 34), and the harness's own errors as verdicts.

Users' programs read their tensors' values in Python (``.item()``, ``float(t)``, an ``if`` on a
tensor), make sizes from values (``nonzero``, ``unique_consecutive``, ``masked_select``), hold
tensors outside their registered state, take lists of tensors, and break Dynamo's graphs.  Each
pattern is registered here as users register cases (``--cases FILE``, the public case API), and
eager must be ``pass`` and exact on every one: its measured peak and residual equal to the model's,
byte for byte.  On inductor (slow: compiles) no such case may get a verdict the harness made
itself.  A harness stage that raises (here, the user-level model of a step that refuses to be
traced) is a ``fail-run`` that names the stage and carries its traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from conformance.api.adapter import Backend, Capabilities, CompiledStep
from conformance.api.case import Case, Workload, load_source, resolve
from conformance.api.step import StepOutput, run_module_step, to_dtype
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend
from conformance.run.engine import run_case
from tests.conftest import case_registry_saver

CONFORMANCE = str(Path(sys.executable).parent / "conformance")

CASES = '''
import torch
from torch import nn

from conformance.case import Case, Workload, register


class BatchNormCumulative(nn.Module):
    """BatchNorm2d with momentum=None: a cumulative average, ``1 / float(num_batches_tracked)``."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(3, momentum=None)

    def forward(self, x):
        return self.bn(x).square().mean()


class CheckedLoss(nn.Module):
    """A loss that checks its input in a Python ``if`` on a tensor (GaussianNLLLoss does)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        var = self.lin(x).exp()
        if torch.any(var < 0):
            raise ValueError("var has negative entries")
        return (x.square() / var + var.log()).mean()


class ItemScale(nn.Module):
    """``.item()`` in Python arithmetic: the scale is a Python float each call."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        scale = 1.0 + abs(y.mean().item())
        return (y * scale).square().mean()


class PlainAttribute(nn.Module):
    """A float tensor held as a plain attribute (neither buffer nor parameter), and in a list."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.offset = torch.linspace(0.0, 1.0, 4)
        self.scales = [torch.tensor(2.0), torch.tensor(0.5)]

    def forward(self, x):
        return (self.lin(x) + self.offset) * self.scales[0] + self.scales[1]


class ListInput(nn.Module):
    """A module that takes a list of tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, xs):
        return self.lin(torch.cat(list(xs), dim=0))


class DynamicShapes(nn.Module):
    """Ops whose output sizes follow the values."""

    def forward(self, x):
        runs = torch.unique_consecutive(torch.round(x * 2)) * 2
        return runs, torch.nonzero(x > 0), torch.masked_select(x, x > 0.5)


class GraphBreak(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(y).square().mean()


class PreluAttribute(nn.Module):
    """prelu's weight as a plain float32 attribute: the float64 reference must convert it too."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.full((4,), 0.25)

    def forward(self, x):
        return nn.functional.prelu(x, self.weight)


class CTC(nn.Module):
    """CTCLoss: its backward's log_beta, and sizes a fake trace cannot say."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 5)
        self.loss = nn.CTCLoss()

    def forward(self, x, targets):
        lengths = torch.full((2,), 6, dtype=torch.long), torch.full((2,), 3, dtype=torch.long)
        return self.loss(self.lin(x).log_softmax(-1), targets, *lengths)


class CTCIntLengths(nn.Module):
    """CTCLoss with its lengths as int lists: ``ctc_loss`` makes the target lengths a tensor in native code
    (``empty``, filled by ``memcpy`` outside the dispatcher) and divides by them; a trace records the
    ``empty`` alone."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 5)
        self.loss = nn.CTCLoss()

    def forward(self, x, targets):
        return self.loss(self.lin(x).log_softmax(-1), targets, [6, 6], [3, 2])


class RefusesTracing(nn.Module):
    """Runs as plain PyTorch and under torch.compile, but raises under the harness's own tracer."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        from torch.fx.experimental.proxy_tensor import get_proxy_mode

        if get_proxy_mode() is not None:
            raise RuntimeError("planted: this module refuses the harness's tracer")
        return self.lin(x)


def _register(case_id, kind, module, *inputs):
    register(Case(case_id, kind, "anyprog", 0, lambda seed: Workload(module(), tuple(f() for f in inputs))))


_register("anyprog-batchnorm-cumulative-train", "train_step", BatchNormCumulative, lambda: torch.randn(2, 3, 4, 4))
_register("anyprog-checked-loss-train", "train_step", CheckedLoss, lambda: torch.randn(3, 4))
_register("anyprog-item-train", "train_step", ItemScale, lambda: torch.randn(3, 4))
_register("anyprog-plain-attribute-infer", "inference", PlainAttribute, lambda: torch.randn(3, 4))
_register("anyprog-list-input-infer", "inference", ListInput, lambda: [torch.randn(2, 4), torch.randn(3, 4)])
_register("anyprog-dynamic-shapes-infer", "inference", DynamicShapes, lambda: torch.randn(16))
_register("anyprog-graph-break-train", "train_step", GraphBreak, lambda: torch.randn(3, 4))
_register("anyprog-prelu-infer", "inference", lambda: nn.PReLU(4), lambda: torch.randn(3, 4))
_register("anyprog-prelu-attribute-infer", "inference", PreluAttribute, lambda: torch.randn(3, 4))
_register("anyprog-ctc-train", "train_step", CTC, lambda: torch.randn(6, 2, 5), lambda: torch.randint(1, 5, (2, 3)))
_register("anyprog-ctc-int-lengths-train", "train_step", CTCIntLengths, lambda: torch.randn(6, 2, 5),
          lambda: torch.randint(1, 5, (2, 3)))
_register("anyprog-refuses-tracing-infer", "inference", RefusesTracing, lambda: torch.randn(3, 4))
'''

#: every pattern eager must be exact on (the planted tracer-refusing case is the harness-error test's)
PATTERNS = [
    "anyprog-batchnorm-cumulative-train", "anyprog-checked-loss-train", "anyprog-item-train",
    "anyprog-plain-attribute-infer", "anyprog-list-input-infer", "anyprog-dynamic-shapes-infer",
    "anyprog-graph-break-train", "anyprog-prelu-infer", "anyprog-prelu-attribute-infer", "anyprog-ctc-train",
    "anyprog-ctc-int-lengths-train",
]


@pytest.fixture(scope="module")
def cases_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cases, registered from a file as ``--cases FILE`` does; the registry is put back after."""
    path = tmp_path_factory.mktemp("anyprog") / "anyprog_cases.py"
    path.write_text(CASES)
    restore = case_registry_saver()
    load_source(str(path))
    try:
        yield path
    finally:
        restore()


def _case(case_id: str) -> Case:
    case = resolve(case_id)
    assert case is not None, case_id
    return case


@pytest.mark.parametrize("case_id", PATTERNS)
def test_eager_is_exact_on_programs_plain_pytorch_runs(cases_file: Path, case_id: str) -> None:
    result = run_case(_case(case_id), EagerBackend())
    assert result.status == Status.PASS, f"{result.status}: {result.reason}\n{result.notes}"
    memory = result.memory
    assert memory is not None
    assert memory.measured_peak_bytes == memory.model_peak_bytes > 0
    assert memory.measured_residual_bytes == memory.model_residual_bytes
    assert result.parity["ok"], result.parity


def test_each_call_is_traced_on_its_own_values(cases_file: Path) -> None:
    """The cumulative BatchNorm's factor is ``1 / k`` on the k-th call: one graph traced once would
    keep the first call's and leave the running statistics wrong from the second call on (the state
    check compares them with the float64 reference on every call)."""
    result = run_case(_case("anyprog-batchnorm-cumulative-train"), EagerBackend())
    calls = result.parity["calls"]
    assert len(calls) >= 4 and all(c["ok"] for c in calls.values())
    assert all("buffer[bn.running_mean]" in c["compared"] for c in calls.values())


def test_the_float64_reference_converts_plain_tensors(cases_file: Path) -> None:
    """Plain attributes and tensors in lists become float64 in the reference's copy, the original untouched
    (prelu refuses a float32 weight beside a float64 input)."""
    workload = _case("anyprog-plain-attribute-infer").build()
    ref = to_dtype(workload, torch.float64)
    model: object = ref.model
    assert model.offset.dtype == torch.float64 and all(s.dtype == torch.float64 for s in model.scales)  # type: ignore[attr-defined]
    assert workload.model.offset.dtype == torch.float32
    prelu = to_dtype(_case("anyprog-prelu-attribute-infer").build(), torch.float64)
    out = run_module_step(prelu.model, prelu, False)
    assert out.outputs[0].dtype == torch.float64


class PlainEagerStep(CompiledStep):
    """The module called as it is, as a user's eager script calls it: compiles and runs anything."""

    def __init__(self, case: Case, workload: Workload) -> None:
        self.case, self.workload = case, workload

    def run(self) -> StepOutput:
        return run_module_step(self.workload.model, self.workload, self.case.trains)


class PlainEagerBackend(Backend):
    """A real adapter held to the user-level model (``<=``): the harness builds that model itself."""

    name = "plain-eager"
    capabilities = Capabilities()

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return PlainEagerStep(case, workload)


def test_a_harness_error_is_a_verdict_naming_its_stage_with_its_traceback(cases_file: Path) -> None:
    """The step compiles and runs (plain PyTorch runs it); the harness's user-level model cannot trace it."""
    result = run_case(_case("anyprog-refuses-tracing-infer"), PlainEagerBackend())
    assert result.status == Status.FAIL_RUN
    assert result.reason.startswith("harness error in model: user-level trace: RuntimeError: planted"), result.reason
    # the traceback, its end kept (where the error is): the frames down to the module's raise
    # paths read from the import roots (the same on every machine), cut between whole lines
    note = next(n for n in result.notes if n.rstrip().endswith("refuses the harness's tracer"))
    assert 'File "conformance/api/step.py", line ' in note, note
    assert "/site-packages/" not in note and "^^^" not in note, note
    assert all(not line or line.startswith((" ", "…", "Traceback", "RuntimeError", "The above", "During"))
               for line in note.splitlines()), note
    assert result.parity["ok"]  # the backend's own results were checked before the model stage failed


def test_the_isolation_worker_reports_its_own_errors_with_a_traceback() -> None:
    """An error outside the engine (here: a case the worker cannot resolve) is a verdict with its traceback."""
    from conformance.run.isolation import WorkerPool

    with WorkerPool() as pool:
        result = pool.run("anyprog-no-such-case", "eager", 120)
    assert result.status == Status.FAIL_RUN
    assert result.reason.startswith("harness error in the worker, outside the engine: CaseError"), result.reason
    assert any("Traceback (most recent call last)" in n for n in result.notes), result.notes


@pytest.mark.slow
def test_inductor_gets_no_verdict_made_by_the_harness(cases_file: Path, tmp_path: Path) -> None:
    """Through the CLI with ``--cases``, isolated: data-dependent Python, sizes from values and a graph
    break on inductor get the backend's own verdicts, never a harness error or a crash."""
    out = tmp_path / "out"
    picked = ["anyprog-batchnorm-cumulative-train", "anyprog-dynamic-shapes-infer", "anyprog-checked-loss-train"]
    proc = subprocess.run(
        [CONFORMANCE, "run", "--backend", "inductor", "--cases", str(cases_file), *[a for c in picked
                                                                                   for a in ("--case", c)],
         "--out", str(out), "--no-report"],
        capture_output=True, text=True, timeout=900)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["case"] for r in records) == sorted(picked), proc.stdout + proc.stderr
    for r in records:
        assert r["status"] not in ("fail-run", "crash", "timeout", "fail-compile", "fail-parity"), r["reason"]
        assert "harness error" not in r["reason"]


class _IntCountedLoop(torch.nn.Module):
    """A ``while_loop`` counting with a Python int, trained: torch itself refuses it under autograd."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch._higher_order_ops.while_loop import while_loop

        h = while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, torch.tanh(h @ self.w)), (0, x))[1]
        return h.square().mean()


def test_a_step_plain_pytorch_refuses_is_said_as_the_program_s_own_error() -> None:
    """Not the tracer's words (a dispatch mode without a rule for ``while_loop``, a ``u0 < 4`` condition):
    what plain PyTorch says when a user runs the step, which no backend can change."""
    from conformance.api.step import ProgramError, plain_failure, trace_step

    workload = Workload(_IntCountedLoop(), (torch.randn(2, 8),))
    with pytest.raises(ProgramError) as caught:
        trace_step(workload, trains=True)
    text = str(caught.value)
    assert text.startswith("the step fails in plain PyTorch, without any compiler: ")
    assert "all carried_inputs must be tensors" in text and "_NativeFills" not in text, text
    assert plain_failure(workload, trains=False) is None  # inference runs: the loop itself is fine
    gm, _, _ = trace_step(workload, trains=False)  # and traces, through the native-fill watch too
    assert any("while_loop" in str(n.target) for n in gm.graph.nodes)
