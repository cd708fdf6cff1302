"""The op sweep (``op-*``, :mod:`conformance.cases.ops`): ids stable and readable, every step ``op_db``
offers registered or left out with a reason, the family lazy, eager exact on a handful of op cases
through the CLI, the coverage table, and planted faults caught on op cases."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._pytree import tree_flatten

pytest.importorskip("expecttest", reason="the op sweep needs expecttest (pip install 'torch-conformance[ops]')")

from conformance.api.case import LEFT_OUT, id_problem, select_cases
from conformance.api.result import Result
from conformance.api.verdict import Status
from conformance.backends.eager import EagerBackend
from conformance.backends.inductor import InductorBackend
from conformance.cases import ops
from conformance.output.coverage import op_coverage, op_markdown
from conformance.run.engine import run_case
from tests.faults import planted
from tests.planted import LeakyEagerBackend
from tests.planted_backends import PerturbGradBackend

#: ops this torch release leaves out in part or whole, one per kind of reason (uninitialised memory,
#: a Python result, an options object as an argument), with the CI sample, for the accounting test
LEFT_OUT_EXAMPLES = ["new_empty", "equal", "nn.functional.linear_cross_entropy.chunked"]
#: a handful of op cases eager runs exactly (run through the CLI; the nightly recipe's test runs op cases in
#: two shards and merges them, tests/test_nightly_recipe.py)
EAGER_CASES = ["op-abs-0-infer", "op-abs-0-train", "op-cummin-1-train", "op-narrow-0-infer",
               "op-nn.functional.pixel_unshuffle-0-train", "op-new_empty-1-infer",
               # results torch keeps lazy: a zero gradient (autograd's zero tensor, no memory), a conjugate
               # view, a complex32 tensor NumPy has no type for; slopes drawn in training (random values of an
               # op that also writes an argument)
               "op-sgn-0-train", "op-fft.ifft-0-infer", "op-chalf-0-infer", "op-nn.functional.rrelu-1-train"]


def _keys() -> list[str]:
    no_float32 = next(ops.key_of(op) for op in ops.op_db() if not op.supports_dtype(ops.DTYPE, "cpu"))
    present = [k for k in LEFT_OUT_EXAMPLES if k in ops._by_key()]
    return list(dict.fromkeys([*ops.ci_sample(), *present, no_float32]))


def test_ids_are_stable_across_two_builds_and_readable() -> None:
    keys = ops.ci_sample()
    assert len(keys) == 10 and keys == ops.ci_sample()
    first = [ops.screen(ops._by_key()[k]) for k in keys]
    second = [ops.screen(ops._by_key()[k]) for k in keys]  # screened again, not the cached screening
    assert [[c.id for c in s.cases] for s in first] == [[c.id for c in s.cases] for s in second]
    assert [s.left_out for s in first] == [s.left_out for s in second]
    for screened in first:
        for case in screened.cases:
            assert id_problem(case.id) is None
            m = re.fullmatch(rf"op-{re.escape(screened.key)}-(\d)-(infer|train)", case.id)
            assert m is not None, case.id
            assert int(m[1]) < ops.MAX_SAMPLES and case.kind == ("train_step" if m[2] == "train" else "inference")
            assert case.family == "ops" and not case.in_default and case.description.startswith("torch op ")
    assert sum(len(s.cases) for s in first) >= 10
    ci = select_cases(ops.ci_patterns())  # the fixed CI sample selects as patterns, each naming cases
    # the float32 ones: another test in this process may have registered other dtypes' (op-abs-0-float64-*)
    float32 = {c.id for c in ci if not any(f"-{dtype}-" in c.id for dtype in ops.OTHER_DTYPES)}
    assert float32 == {c.id for s in first for c in s.cases}


def test_every_step_op_db_offers_is_registered_or_left_out_with_a_reason() -> None:
    """Nothing silently dropped: census (counted from op_db alone) = cases + what the listing leaves out."""
    keys = _keys()
    screened = ops.sweep(keys)
    census = ops.census(keys)
    listed = ops.left_out(keys)
    assert listed and all(reason.strip() and label.startswith("op-") for label, reason in listed)
    reasons = " ".join(reason for _, reason in listed)
    for kind in ("no float32 samples", "not tensors", "two eager runs", "neither a tensor nor a number"):
        assert kind in reasons, f"no left-out line of the kind {kind!r}: {listed}"

    def left_steps(s: ops.Screened) -> int:
        return sum(1 if lo.label.endswith("-train") else 0 if lo.sample is None else (2 if s.trains else 1)
                   for lo in s.left_out)

    assert census.ops == len(keys)
    assert census.float32_ops == sum(not any(lo.sample is None and "float32" in lo.reason for lo in s.left_out)
                                     for s in screened)
    assert census.samples == sum(s.samples for s in screened)
    assert census.steps == sum(len(s.cases) + left_steps(s) for s in screened)


def test_the_family_is_lazy_and_not_part_of_a_run_that_names_no_case() -> None:
    probe = ("import sys; from conformance.api.case import all_cases, select_cases, LAZY; all_cases(); "
             "select_cases([]); select_cases(['mlp-*']); "
             "print('op-' in LAZY, 'torch.testing._internal.common_methods_invocations' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]  # registered lazily, op_db never imported
    assert not any(c.id.startswith("op-") for c in select_cases([]))
    chosen = select_cases(["op-abs-*", "op-new_empty-*"])
    assert {c.id for c in chosen} >= {"op-abs-0-infer", "op-abs-0-train", "op-new_empty-1-infer"}
    assert all(c.family == "ops" for c in chosen)
    assert "op-new_empty-0" in LEFT_OUT and "uninitialised" in LEFT_OUT["op-new_empty-0"]


def test_a_sample_whose_op_makes_a_sparse_tensor_is_left_out_with_its_layout() -> None:
    """``to_sparse``'s OpInfo densifies the result in ``output_process_fn_grad``; the op's own result is
    sparse, outside the lifetime model: left out, saying so (it was a harness error in the model)."""
    screened = ops.screen(ops._by_key()["to_sparse"])
    assert not screened.cases and screened.left_out
    assert all("sparse_coo tensor" in lo.reason for lo in screened.left_out)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """EAGER_CASES on eager, one ``conformance run`` (``results``)."""
    root = tmp_path_factory.mktemp("op-run")
    done = _cli("run", "--backend", "eager", "--workers", "0", *[a for c in EAGER_CASES for a in ("--case", c)],
                "--out", "results", "--no-report", "--no-history", cwd=root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (path / "results.jsonl").read_text().splitlines()]


def test_eager_is_exact_on_a_handful_of_op_cases(ran: Path) -> None:
    records = _records(ran / "results")
    assert sorted(r["case"] for r in records) == sorted(c.id for c in select_cases(EAGER_CASES))
    for r in records:
        assert r["status"] == "pass", (r["case"], r["status"], r["reason"])
        memory = r["memory"]
        assert isinstance(memory, dict) and memory["measured_peak_bytes"] == memory["model_peak_bytes"], r["case"]


def test_conformance_coverage_gives_op_backend_step_and_the_left_out(ran: Path) -> None:
    done = _cli("coverage", "results", cwd=ran)
    assert done.returncode == 0, done.stderr
    assert "| `abs` | eager | pass | pass |" in done.stdout
    assert "| `narrow` | eager | pass | not run |" in done.stdout  # the sweep has its training step; not run here
    assert f"eager: {len(select_cases(EAGER_CASES))} pass (pairs)" in done.stdout
    assert "| `op-new_empty-0` | two eager runs" in done.stdout  # the run's ops' left-out samples


def test_the_op_table_shows_the_short_reason_of_a_non_pass() -> None:
    results = [Result("op-abs-0-infer", "inductor", Status.PASS, family="ops"),
               Result("op-abs-1-infer", "inductor", Status.FAIL_PARITY, "max abs err 3e-2 on output[0]\nmore",
                      family="ops"),
               Result("op-abs-0-train", "inductor", Status.FAIL_PEAK, "x" * 300, family="ops"),
               Result("mod-ReLU-infer", "eager", Status.PASS, family="modules")]
    table = op_coverage(results, [("op-equal-0", "returns a Python bool, not tensors")])
    assert table is not None and [r.op for r in table.rows] == ["abs"]
    text = op_markdown(table)
    line = next(line for line in text.splitlines() if line.startswith("| `abs` | inductor |"))
    assert "pass/fail-parity: max abs err 3e-2 on output[0] more" in line and "fail-peak: xxx" in line
    assert len(line) < 400 and "\n" not in line
    assert "1: returns a Python bool" in text and "| `op-equal-0` |" in text
    assert op_coverage(results[3:]) is None


def test_planted_faults_are_caught_on_op_cases() -> None:
    """The sweep's verdicts can fail: a leaked intermediate and a wrong gradient, each on one op case."""
    (tanh,) = select_cases(["op-tanh-0-infer"])
    assert run_case(tanh, EagerBackend()).status == Status.PASS
    leaked = run_case(tanh, LeakyEagerBackend())
    assert leaked.status.is_failure, leaked.reason
    (abs_train,) = select_cases(["op-abs-0-train"])
    wrong = run_case(abs_train, PerturbGradBackend())
    assert wrong.status == Status.FAIL_PARITY, (wrong.status, wrong.reason)


def test_a_differentiable_input_the_loss_does_not_reach_gets_no_scale() -> None:
    """cosine_embedding_loss's sample marks its target differentiable; the loss does not use it, and a scale
    on it (no gradient) made the step's ``autograd.grad`` refuse: fail-compile on eager."""
    (case,) = select_cases(["op-nn.functional.cosine_embedding_loss-0-train"])
    workload = case.build()
    assert len(list(workload.model.parameters())) == 2  # the two inputs, not the target
    result = run_case(case, EagerBackend())
    assert result.status == Status.PASS, (result.status, result.reason)


def _draws(case_id: str, seed: int) -> torch.Tensor:
    (case,) = select_cases([case_id])
    workload = case.build()
    torch.manual_seed(seed)
    return workload.model(*(t.clone() for t in workload.inputs)).clone()  # geometric_ updates its input


def test_a_random_op_case_draws_from_the_generator_the_caller_seeds() -> None:
    """OpInfo's ``wrapper_set_seed`` reseeds 42 inside the op and copies the generator's state around it;
    the case's step calls the op itself: its draws follow the seed set outside the step."""
    first, other, again = (_draws("op-geometric-1-infer", seed) for seed in (1, 2, 1))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    op = ops._by_key()["geometric"]
    assert ops.own_call(op.op) is not op.op and ops.own_call(ops._by_key()["abs"].op) is ops._by_key()["abs"].op


@pytest.mark.parametrize("case_id", ["op-bernoulli-0-infer", "op-normal-0-train"])
def test_a_random_op_is_judged_on_its_own_memory_on_inductor(case_id: str) -> None:
    """With the generator's state copied inside the step (5,056 B outside any op), inductor failed the peak
    check and received no graph; the op itself is compiled and held to the received graph's model."""
    (case,) = select_cases([case_id])
    result = run_case(case, InductorBackend())
    assert result.status == Status.PASS, (result.status, result.reason)
    assert result.memory is not None and result.memory.model_source == "received-graphs"
    assert result.memory.measured_peak_bytes < 5056


def test_processes_that_find_no_screening_wait_for_the_first_one_s(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """A cold cache (a fresh CI machine): the run's processes that all need the whole sweep screen it once,
    the others wait on the lock and read its file.  Two callers here, each with its own lock file handle."""
    import threading
    import time

    from conformance.cases import ops

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    screenings: list[int] = []

    def slow_sweep(keys: object = None, dtype: str = ops.FLOAT32) -> list[ops.Screened]:
        screenings.append(1)
        time.sleep(0.5)  # the other caller arrives while this one screens
        return []

    monkeypatch.setattr(ops, "sweep", slow_sweep)
    found: list[object] = []
    callers = [threading.Thread(target=lambda: found.append(ops.whole_sweep.__wrapped__())) for _ in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert len(screenings) == 1 and found == [(), ()]
    assert ops.cache_path().exists()


@pytest.mark.parametrize("key", ["abs", "searchsorted", "bernoulli", "nn.functional.dropout", "histc"])
def test_samples_are_opinfos_own_without_its_test_scaffolding(key: str) -> None:
    """The sweep draws OpInfo's samples without the test-suite lookups it skips (``extract_test_fn``, the
    device generators' seeding): the same tensors, the same random state after, and torch's functions back."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    op = ops._by_key()[key]
    scaffolding = common_utils.extract_test_fn, common_utils.set_rng_seed, core.extract_test_fn

    def opinfos_own() -> list[torch.Tensor]:
        drawn = []
        for n, sample in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd)):
            drawn.append(sample)
            if n + 1 == ops.SCAN:
                break
        return [t for s in drawn for t in tree_flatten((s.input, s.args, s.kwargs))[0] if isinstance(t, torch.Tensor)]

    torch.manual_seed(5)
    expected, after = opinfos_own(), torch.rand(3)
    torch.manual_seed(5)
    with ops._sample_iteration():
        got, got_after = opinfos_own(), torch.rand(3)
    assert (common_utils.extract_test_fn, common_utils.set_rng_seed, core.extract_test_fn) == scaffolding
    assert len(got) == len(expected) > 0
    assert all(torch.equal(a, b) and a.requires_grad == b.requires_grad for a, b in zip(got, expected, strict=True))
    assert torch.equal(got_after, after)


@pytest.mark.parametrize("case_id", ["op-abs-0-infer", "op-searchsorted-0-infer", "op-nn.functional.embedding-0-train"])
def test_every_call_of_an_op_case_gets_fresh_inputs_in_the_ops_domain(case_id: str) -> None:
    """OpInfo seeds each sample with its test suite's fixed seed; a later call draws it from the call's seed:
    other values, the same shapes, the same in every process (drawn again, equal)."""
    (case,) = select_cases([case_id])
    calls = [case.inputs_for(call) for call in range(4)]
    for a, b in itertools.combinations(calls, 2):
        assert [t.shape for t in a] == [t.shape for t in b]
        assert not all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), case_id
    assert all(torch.equal(x, y) for x, y in zip(calls[2], case.inputs_for(2), strict=True))
    if case_id == "op-searchsorted-0-infer":  # its sorted sequence stays sorted: the op's domain
        assert all(bool((inputs[0].diff() >= 0).all()) for inputs in calls)
    if case_id == "op-nn.functional.embedding-0-train":  # indices stay in the table
        assert all(int(inputs[1].max()) < inputs[0].shape[0] for inputs in calls)


def test_stale_results_are_caught_on_an_op_case() -> None:
    """A backend returning its first call's results on every call: caught only where calls' inputs differ."""
    (case,) = select_cases(["op-abs-0-infer"])
    result = run_case(case, planted(EagerBackend, "stale-results")())
    assert result.status == Status.FAIL_PARITY, (result.status, result.reason)


def test_the_first_build_of_a_training_case_is_not_stepped_once_already() -> None:
    """A training case's first build in a process runs one trial step (which inputs the loss reaches); it ran
    on the sample's own tensors, so batch norm's running statistics came out of that build updated once, and
    the pair or reference that built first in a process judged another program (order-dependent verdicts)."""
    build = ops._builder("_batch_norm_with_update", 0, True)
    torch.manual_seed(ops.SAMPLE_SEED)
    first = build(ops.SAMPLE_SEED).inputs  # runs the trial step
    torch.manual_seed(ops.SAMPLE_SEED)
    again = build(ops.SAMPLE_SEED).inputs  # the trial's answer kept: no step
    assert len(first) == len(again) >= 4
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    result = run_case(select_cases(["op-_batch_norm_with_update-0-train"])[0], EagerBackend())
    assert result.status == Status.PASS, (result.status, result.reason)


def test_a_reference_keeps_the_storage_a_partial_view_reads_beyond() -> None:
    """OpInfo's ``as_strided`` partial views pass a view of part of a storage and read past it: the float64
    reference casts the whole storage and takes the same view (a compact copy made it a harness error)."""
    from conformance.api.step import cast

    storage = torch.randn(20)
    view = storage[2:12]
    wide = cast(view, torch.float64)
    assert wide.dtype == torch.float64 and wide.shape == view.shape and wide.storage_offset() == 2
    read_beyond = torch.as_strided(wide, (2, 2), (1, 2), 10)
    assert torch.equal(read_beyond, torch.as_strided(view, (2, 2), (1, 2), 10).double())
    whole = torch.randn(3, 4).t()
    assert torch.equal(cast(whole, torch.float64), whole.double())


@pytest.mark.full(ci="tests/test_op_sweep.py::test_eager_is_exact_on_a_handful_of_op_cases")
def test_later_samples_run_ops_samples_the_default_sweep_never_runs(tmp_path: Path) -> None:
    """``benchmarks/op_sweep.py --later-samples 1`` (``CONFORMANCE_OP_SAMPLES=3``): each op's third sample, under
    its own id, eager exact on it; the default count's ids are unchanged."""
    figures = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "benchmarks" / "op_sweep.py"),
                           "--backend", "eager", "--case", "op-add-*", "--later-samples", "1", "-n", "0",
                           "--out", str(tmp_path / "results"), "--json", str(figures)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = _records(tmp_path / "results")
    assert sorted(r["case"] for r in records) == ["op-add-2-infer", "op-add-2-train"]
    assert all(r["status"] == "pass" for r in records), [(r["case"], r["reason"]) for r in records]
    assert json.loads(figures.read_text())["samples"] == 1
    assert ops.MAX_SAMPLES == 2 and not any(c.id.startswith("op-add-2") for c in select_cases(["op-add-*"]))
