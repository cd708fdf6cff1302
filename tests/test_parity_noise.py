"""Parity above rounding noise: the noise floor from the backend's dtype and the reference's own computation.

Each test drives the real references (:class:`conformance.checks.state.StateReferences`: float64, eager
float32 and the float64 runs with every computed value moved by one ulp) on real programs, and judges real
tensors: rounding noise passes, a fault of any size above it fails.  Each noise test also shows the same
tensors failing without the floor (``compare`` with no noise figures), so it tests the floor itself.
"""

from __future__ import annotations

import math

import pytest
import torch

from conformance.api.case import Case, Tolerance, Workload, select_cases
from conformance.checks.parity import ParityReport, compare
from conformance.checks.state import ReferenceRun, StateReferences, compare_calls

TOL = Tolerance()


def _case(build, *, trains: bool = False, tolerance: Tolerance = TOL, case_id: str = "t-noise") -> Case:
    return Case(case_id, "train_step" if trains else "inference", "t", 0, build, tolerance=tolerance)


def _judged(case: Case, actual: dict[str, torch.Tensor]) -> ParityReport:
    """``actual`` as the first call of ``case`` against its references."""
    return StateReferences(case).compare(0, actual)


def _linear_bf16(seed: int) -> Workload:
    torch.manual_seed(seed)
    return Workload(torch.nn.Linear(16, 8).to(torch.bfloat16), (torch.randn(4, 16).to(torch.bfloat16),))


def _reference_in(case: Case, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return ReferenceRun(case, dtype).call(0)


def _rounded(ref: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The float64 reference rounded to the backend's dtype: the best a backend can return."""
    return {n: t.to(dtype) if t.is_floating_point() else t.clone() for n, t in ref.items()}


def _ulps_off(t: torch.Tensor, ulps: int) -> torch.Tensor:
    """``t`` with its largest element moved ``ulps`` units in the last place of its dtype, away from zero."""
    flat = t.clone().reshape(-1)
    i = int(flat.float().abs().argmax())
    up = torch.tensor(math.inf, dtype=t.dtype)
    for _ in range(ulps):
        flat[i] = torch.nextafter(flat[i], up if flat[i] >= 0 else -up)
    return flat.reshape(t.shape)


def test_a_one_ulp_bfloat16_difference_passes_and_several_ulps_fail() -> None:
    """The largest output of a bfloat16 Linear, one bf16 ulp off the rounded reference: noise, even against the
    default float32 ``rtol`` (1e-4, below one bf16 ulp); eight ulps off: a fault."""
    case = _case(_linear_bf16)
    ref = _reference_in(case, torch.float64)
    one = _rounded(ref, torch.bfloat16)
    one["output[0]"] = _ulps_off(one["output[0]"], 1)
    report = _judged(case, one)
    assert report.ok
    (out,) = [t for t in report.tensors if t.name == "output[0]"]
    assert out.max_abs_err > TOL.rtol * out.scale  # outside rtol: the floor passes it
    several = _rounded(ref, torch.bfloat16)
    several["output[0]"] = _ulps_off(several["output[0]"], 8)
    report = _judged(case, several)
    (bad,) = [t for t in report.tensors if not t.ok]
    assert bad.name == "output[0]" and bad.max_abs_err > bad.noise_floor > 0


def _cancelling_sum(seed: int) -> Workload:
    """A bfloat16 sum of unit-sized terms that nearly cancels: its rounding happens at the terms' magnitude,
    far above the result's (the gen-dag programs eager failed on)."""

    class Sums(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return (x - x.mean(1, keepdim=True)).sum(1) + 1e-2 * x[:, 0], torch.tanh(x)

    torch.manual_seed(seed)
    return Workload(Sums().to(torch.bfloat16), (torch.randn(4, 64).to(torch.bfloat16) * 4,))


def test_a_real_bfloat16_program_in_eager_is_within_its_noise_floor() -> None:
    """Eager bfloat16 on a sum that cancels, every call: noise far above ``rtol`` at the result's own scale, within
    the floor; the same tensors without the floor fail.  The record's figures say why it passes."""
    case = _case(_cancelling_sum, tolerance=Tolerance(rtol=3e-2, atol=3e-2))
    eager = ReferenceRun(case, torch.bfloat16)
    calls = {c: eager.call(c) for c in range(3)}
    reports = compare_calls(case, calls)
    assert all(r.ok for r in reports.values()), [t.describe() for r in reports.values() for t in r.tensors]
    noisy = [t for r in reports.values() for t in r.tensors if t.max_abs_err > case.tolerance.rtol * t.scale]
    assert noisy, "the program must have noise above rtol, or it tests nothing"
    assert all("noise floor" in t.note for t in noisy)
    closest = reports[0].to_json()["closest"]
    assert closest["noise_floor"] > 0 and closest["max_abs_err"] <= closest["allowed"]
    ref = _reference_in(case, torch.float64)
    assert not compare(calls[0], ref, _reference_in(case, torch.float32), case.tolerance).ok


def _zero_gradients(seed: int) -> Workload:
    """A loss that does not depend on the parameters in exact arithmetic (a normalization without affine
    summed over the normalized dimension): every gradient of the step is rounding noise around zero."""

    class Flat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return torch.nn.functional.layer_norm(h, (16,)).sum() + 0.3 * h.softmax(-1).sum() + x.square().sum()

    torch.manual_seed(seed)
    return Workload(Flat(), (torch.randn(32, 8),))


def test_noise_on_gradients_zero_in_exact_arithmetic_passes_and_a_wrong_one_fails() -> None:
    case = _case(_zero_gradients, trains=True)
    ref = _reference_in(case, torch.float64)
    grads = [n for n in ref if n.startswith("grad[")]
    assert grads and all(ref[n].abs().max() < 1e-12 for n in grads), "every gradient is zero in exact arithmetic"
    torch.manual_seed(1)
    noisy = {n: t.float() + (1e-9 * torch.randn(t.shape) if n in grads else 0) for n, t in ref.items()}
    report = _judged(case, noisy)
    assert report.ok, [t.describe() for t in report.tensors if not t.ok]
    assert not compare(noisy, ref, {}, TOL).ok  # without the floor (nor eager's RMSE to lean on): a failure
    wrong = dict(noisy)
    wrong["grad[fc.bias]"] = noisy["grad[fc.bias]"] + 1e-3  # a real error of a gradient of size 1e-3
    (bad,) = [t for t in _judged(case, wrong).tensors if not t.ok]
    assert bad.name == "grad[fc.bias]" and bad.max_abs_err > 10 * bad.noise_floor


def test_a_gradient_off_by_a_relative_1e3_in_float32_fails() -> None:
    """The planted fault of the fault matrix, on a real training step: far above float32's noise floor."""
    (case,) = select_cases(["mlp-s-train"])
    eager = _reference_in(case, torch.float32)
    wrong = dict(eager)
    wrong["grad[fc1.weight]"] = eager["grad[fc1.weight]"] * (1 + 1e-3)
    report = _judged(case, wrong)
    assert [t.name for t in report.tensors if not t.ok] == ["grad[fc1.weight]"]
    (bad,) = [t for t in report.tensors if not t.ok]
    assert bad.noise_floor < bad.max_abs_err / 100  # the floor is float32 noise, not a tolerance
    assert _judged(case, eager).ok


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_output_doubled_on_one_call_fails(dtype: torch.dtype) -> None:
    def build(seed: int) -> Workload:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
        return Workload(model.to(dtype), (torch.randn(4, 16).to(dtype),))

    case = _case(build, tolerance=Tolerance(rtol=3e-2, atol=3e-2) if dtype == torch.bfloat16 else TOL)
    eager = ReferenceRun(case, dtype)
    calls = {c: eager.call(c) for c in range(3)}
    calls[1] = {**calls[1], "output[0]": calls[1]["output[0]"] * 2}
    reports = compare_calls(case, calls)
    assert reports[0].ok and reports[2].ok
    assert [t.name for t in reports[1].tensors if not t.ok] == ["output[0]"]


class _Random(torch.nn.Module):
    """A program with random ops (dropout in training, randn, geometric_, empty) and parts that have none
    (a dropout with ``p=0``: tagged random, but every draw keeps every value)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        noisy = torch.nn.functional.dropout(self.fc(x), 0.5, training=True) + torch.randn_like(x)
        drawn = torch.empty(3, 4).geometric_(0.3)
        undefined = torch.empty_like(x)
        kept = torch.nn.functional.dropout(self.fc(x), 0.0, training=True)  # draws, but nothing it draws matters
        return noisy, drawn, undefined.shape[0] * torch.tanh(x), torch.tanh(self.fc(x)), kept


def _random_program(seed: int) -> Workload:
    torch.manual_seed(seed)
    return Workload(_Random(), (torch.randn(2, 8),))


def test_random_values_are_checked_for_shape_and_finiteness_only() -> None:
    """Another draw of the random values passes (no run need reproduce them), named in the figures; a random
    output that is not finite, or of the wrong shape, fails; the deterministic outputs keep their value check."""
    case = _case(_random_program)
    other_draw = ReferenceRun(case, torch.float32)
    torch.manual_seed(12345)
    actual = other_draw.call(0)
    report = _judged(case, actual)
    assert report.ok, [t.describe() for t in report.tensors if not t.ok]
    assert report.to_json()["random"] == ["output[0]", "output[1]"]
    assert not compare(actual, _reference_in(case, torch.float64), actual, Tolerance(rmse_multiple=0)).ok
    for broken in ({"output[0]": actual["output[0]"].clone().fill_(math.nan)},
                   {"output[1]": actual["output[1]"][:2]},
                   {"output[3]": actual["output[3]"] * 2},
                   {"output[4]": actual["output[4]"] * 2}):
        bad = [t.name for t in _judged(case, {**actual, **broken}).tensors if not t.ok]
        assert bad == list(broken), bad


def test_a_while_loop_under_the_references_modes_leaves_plain_eager_loops_working() -> None:
    """torch runs an eager ``while_loop`` through ``torch.compile``; run under a dispatch mode that does not ignore
    compile internals, the loop's code is skipped from then on, and the next plain eager loop fails (torch 2.13).
    The references' modes reach the loop as one op, perturbed (its results) and followed (random values)."""
    from torch._higher_order_ops.while_loop import while_loop

    from conformance.checks.noise import RandomValues, RoundingNoise

    def cond(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return (i < 3) & (x.abs().amax() < 1e4)

    def body(i: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return i + 1, x.tanh() * 2

    x = torch.randn(4, dtype=torch.float64)
    _, plain = while_loop(cond, body, (torch.tensor(0), x))
    with RandomValues():
        _, followed = while_loop(cond, body, (torch.tensor(0), x))
    with RoundingNoise(1e-3, 0):
        _, moved = while_loop(cond, body, (torch.tensor(0), x))
    _, again = while_loop(cond, body, (torch.tensor(0), x))
    assert torch.equal(followed, plain) and torch.equal(again, plain)
    assert not torch.equal(moved, plain) and torch.allclose(moved, plain, rtol=1e-2)


def test_a_float32_program_computed_in_bfloat16_fails() -> None:
    """The floor is made at the case's dtype, not at the dtype the backend returns: bfloat16 results of a float32
    program, however well rounded, are a fault."""
    (case,) = select_cases(["mlp-s-infer"])
    downcast = _rounded(_reference_in(case, torch.float64), torch.bfloat16)
    report = _judged(case, downcast)
    assert "output[0]" in [t.name for t in report.tensors if not t.ok]
    assert report.eps == torch.finfo(torch.float32).eps


@pytest.mark.parametrize("case_id", ["gen-dag-86", "gen-dag-135", "gen-dag-288"])
def test_eager_passes_on_low_precision_programs_it_failed_on(case_id: str) -> None:
    """Generated bfloat16/float16 programs (a sum that cancels, a matmul of a split sum, a mean) on which eager
    failed parity with one ulp at the scale of its terms: now within their noise floor, on every call."""
    (case,) = select_cases([case_id])
    dtype = torch.float16 if "float16" in case.description and "bfloat16" not in case.description else torch.bfloat16
    eager = ReferenceRun(case, dtype)
    calls = {c: eager.call(c) for c in range(5)}
    reports = compare_calls(case, calls)
    assert all(r.ok for r in reports.values()), [t.describe() for r in reports.values() for t in r.tensors if not t.ok]
    assert any("noise floor" in t.note for r in reports.values() for t in r.tensors)


class _Overflow(torch.nn.Module):
    """Outputs with infinities: ``log`` of zeros (-inf in every dtype) and an ``exp`` that overflows float32's
    range (above 3.4e38) where float64's holds it."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.log(torch.relu(x)), torch.exp(x * 60 + 40), torch.tanh(x)


def _overflow_program(seed: int) -> Workload:
    torch.manual_seed(seed)
    return Workload(_Overflow(), (torch.randn(4, 8),))


def test_infinities_where_the_reference_has_them_pass_and_finite_faults_beside_them_fail() -> None:
    """Eager float32 is exact on a program with infinities: the reference's -inf (log 0) and its float64 values
    beyond float32's range (the infinity float32 rounds them to).  An infinite reference makes no allowance
    infinite: a finite element doubled beside it fails, as does an infinity lost, turned around or made up."""
    case = _case(_overflow_program)
    ref = _reference_in(case, torch.float64)
    assert bool(torch.isinf(ref["output[0]"]).any()) and bool(torch.isfinite(ref["output[1]"]).all())
    eager = ReferenceRun(case, torch.float32)
    calls = {c: eager.call(c) for c in range(3)}
    assert bool(torch.isinf(calls[0]["output[1]"]).any())  # float32 overflows where float64 does not
    reports = compare_calls(case, calls)
    assert all(r.ok for r in reports.values()), [t.describe() for r in reports.values() for t in r.tensors if not t.ok]
    actual = calls[0]
    log, big = actual["output[0]"], actual["output[1]"]
    finite, inf = torch.isfinite(log), torch.isinf(big)
    faults = {
        "finite doubled beside -inf": {"output[0]": torch.where(finite, log * 2, log)},
        "-inf made +inf": {"output[0]": torch.where(finite, log, -log)},
        "-inf made finite": {"output[0]": torch.where(finite, log, torch.zeros_like(log))},
        "overflow made finite": {"output[1]": torch.where(inf, torch.finfo(torch.float32).max, big)},
        "inf made up": {"output[2]": torch.where(actual["output[2]"] > 0, math.inf, actual["output[2]"])},
    }
    for what, broken in faults.items():
        bad = [t.name for t in _judged(case, {**actual, **broken}).tensors if not t.ok]
        assert bad == list(broken), (what, bad)


class _CTC(torch.nn.Module):
    """``nn.CTCLoss`` with the lengths as int lists: ``ctc_loss`` makes them a tensor in native code (``empty``,
    then filled by ``memcpy``, outside the dispatcher) before it reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(12, 2, 6))
        self.loss = torch.nn.CTCLoss()

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.loss((x * self.scale).log_softmax(-1), targets, [12, 12], [5, 4])


def _ctc_program(seed: int) -> Workload:
    torch.manual_seed(seed)
    return Workload(_CTC(), (torch.randn(12, 2, 6), torch.randint(1, 6, (2, 5))))


def test_values_native_code_writes_into_an_empty_tensor_are_not_random() -> None:
    """The lengths ``ctc_loss`` fills into an ``empty`` tensor outside the dispatcher are defined: the loss and its
    gradient keep their value check (a wrong gradient fails), where they were taken for random values (shape and
    finiteness only); an ``empty`` tensor read as it was made still is random."""
    case = _case(_ctc_program, trains=True)
    eager = ReferenceRun(case, torch.float32)
    calls = {c: eager.call(c) for c in range(2)}
    reports = compare_calls(case, calls)
    assert all(r.ok for r in reports.values()), [t.describe() for r in reports.values() for t in r.tensors if not t.ok]
    assert reports[0].to_json()["random"] == []
    wrong = {**calls[0], "grad[scale]": calls[0]["grad[scale]"] * (1 + 1e-3)}
    assert [t.name for t in _judged(case, wrong).tensors if not t.ok] == ["grad[scale]"]


def test_an_integer_result_in_another_dtype_fails_even_where_its_values_match() -> None:
    """IREE returns ``x.byte()`` as int8 (docs/findings/iree-repro-uint8-result-signed.py): 7 reads the same in
    both, 205 reads -51.  The dtype is the fault on every call, not only where a value shows it."""
    from conformance.checks.parity import tensor_parity

    ref = torch.tensor([7, 100], dtype=torch.uint8)
    same_values = tensor_parity("output[0]", ref.to(torch.int8), ref, ref, TOL)
    assert not same_values.ok and "dtype int8 where the reference's is uint8" in same_values.note
    assert tensor_parity("output[0]", ref.clone(), ref, ref, TOL).ok
    wide = tensor_parity("output[0]", torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 2]), None, TOL)
    assert not wide.ok  # int32 for an int64 result
    floats = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert tensor_parity("output[0]", floats.float(), floats, floats.float(), TOL).ok  # precision is the case's
    assert not tensor_parity("output[0]", torch.tensor([1, 2]), floats, None, TOL).ok  # integer for floating
    assert not tensor_parity("x", torch.tensor([True]), torch.tensor([1]), None, TOL, random=True).ok


def test_values_a_step_computes_in_a_coarser_dtype_move_by_that_dtypes_ulp() -> None:
    """A float32 case whose step casts to bfloat16 (``op-bfloat16-*``) rounds there at bfloat16's ulp in the
    reference too: the noise moves such values by that ulp, whole numbers included (bfloat16 holds few
    others); a 0/1 mask stays as it is."""
    from conformance.checks.noise import RoundingNoise

    x = torch.randn(256, dtype=torch.float64) * 4
    plain = x.bfloat16().square()
    whole = torch.full((64,), 3.0, dtype=torch.bfloat16)
    mask = (x > 0).to(torch.bfloat16)
    with RoundingNoise(float(torch.finfo(torch.float32).eps), 0):
        moved = x.bfloat16().square()
        moved_whole = whole * 2
        moved_mask = mask * 1
    changed = (moved != plain).float().mean().item()
    assert changed > 0.5, changed  # float32's ulp would round back to the same bfloat16 values
    assert torch.allclose(moved.double(), plain.double(), rtol=2 * torch.finfo(torch.bfloat16).eps)
    assert not torch.equal(moved_whole, whole * 2)
    assert torch.equal(moved_mask, mask)


class _Sums(torch.nn.Module):
    """A sum of 600 terms, and one that is 0 in exact arithmetic: the mean's rounding, 600 times over."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sum(), (x - x.mean()).sum()


def _sequential_float32(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What a backend that sums in order in float32 returns (numpy's accumulate: one rounding per partial sum)."""
    import numpy as np

    terms = x.numpy()
    total = np.add.accumulate(terms, dtype=np.float32)[-1]
    mean = np.float32(total / np.float32(terms.size))
    cancelled = np.add.accumulate((terms - mean).astype(np.float32), dtype=np.float32)[-1]
    return {"output[0]": torch.tensor(total), "output[1]": torch.tensor(cancelled), "input[0]": x}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("shift", [0.0, 3.0])
def test_a_float32_sum_in_order_is_within_the_floor_of_its_terms_and_a_fault_is_not(seed: int, shift: float) -> None:
    """A float32 sum of 600 terms, in order: each partial sum rounds at its own magnitude, so the error grows as a
    random walk of those roundings (2.5e-7 against a floor of 1.2e-7 from one-ulp moves of the terms before); and a
    sum that cancels to 0 exactly. Both within the floor the terms' walk makes; a fault of twice ``rtol`` of the
    terms' total magnitude, on either, fails."""

    def build(s: int) -> Workload:
        torch.manual_seed(seed)
        return Workload(_Sums(), (torch.rand(600) + shift,))

    case = _case(build)
    x = case.build().inputs[0]
    sequential = _sequential_float32(x)
    report = _judged(case, sequential)
    assert report.ok, [t.describe() for t in report.tensors if not t.ok]
    cancelled = next(t for t in report.tensors if t.name == "output[1]")
    assert cancelled.scale < 1e-9 < cancelled.max_abs_err  # zero in exact arithmetic, not in float32
    assert not compare(sequential, _reference_in(case, torch.float64), {}, TOL).ok  # no floor: a failure
    wrong = {**sequential, "output[0]": sequential["output[0]"] * (1 + 2 * TOL.rtol)}
    assert [t.name for t in _judged(case, wrong).tensors if not t.ok] == ["output[0]"]
    off = {**sequential, "output[1]": sequential["output[1]"] + 2 * TOL.rtol * float(x.abs().sum())}
    (bad,) = [t for t in _judged(case, off).tensors if not t.ok]
    assert bad.name == "output[1]"


def test_a_convolutions_backward_moves_its_bias_and_weight_gradients_by_the_walk_of_their_sums() -> None:
    """The bias gradient of a convolution sums ``grad_output`` over batch and positions: with a ``grad_output`` that
    cancels on each channel (a convolution before a batch norm) it is 0 in exact arithmetic, and a float32 backend's
    is the rounding of that sum's partial sums, ``eps * sqrt(sum_k S_k**2)`` on average.  The noise mode moves it by
    that walk, not by one ulp of its float64 value (1e-15: what it did while the walked call was never made)."""
    from conformance.checks.noise import RoundingNoise

    torch.manual_seed(0)
    grad_out = torch.randn(2, 8, 16, 16, dtype=torch.float64)
    grad_out -= grad_out.mean((0, 2, 3), keepdim=True)
    x, w = torch.randn(2, 3, 16, 16, dtype=torch.float64), torch.randn(8, 3, 3, 3, dtype=torch.float64)
    args = (grad_out, x, w, [8], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, True])
    _, grad_w, grad_b = torch.ops.aten.convolution_backward.default(*args)
    eps = torch.finfo(torch.float32).eps
    partial = grad_out.transpose(0, 1).reshape(8, -1).cumsum(1)  # each channel's sum in row-major order
    walk = eps * partial.square().sum(1).sqrt()
    moves_b, moves_w = [], []
    for seed in range(8):
        with RoundingNoise(eps, seed):
            _, noisy_w, noisy_b = torch.ops.aten.convolution_backward.default(*args)
        moves_b.append(noisy_b - grad_b)
        moves_w.append(noisy_w - grad_w)
    rms_b = torch.stack(moves_b).square().mean(0).sqrt()
    assert bool(((rms_b > walk / 3) & (rms_b < 3 * walk)).all()), (rms_b, walk)
    assert float(grad_b.abs().max()) < 1e-12  # one ulp of it would be below 1e-19
    assert float(torch.stack(moves_w).abs().max()) > 10 * eps * float(grad_w.abs().max())  # a walk, not one ulp
