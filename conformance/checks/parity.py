"""Numerical parity against the float64 reference, scaled to each tensor's magnitude, above rounding noise.

A tensor passes when its largest error is within what the case allows, the larger of

* ``rtol`` times the reference's largest magnitude (so a 1e-3 relative error fails at float32
  whatever the tensor's scale: small gradients get no absolute-tolerance free pass); ``atol`` for a
  reference that is all zeros;
* the **noise floor**: one ulp of the case's dtype at the reference's largest magnitude (the result's own
  rounding), plus twice how far the tensor moves when every value the step computes is moved by one ulp of
  that dtype (:class:`conformance.checks.noise.RoundingNoise`, the float64 reference run
  again with seeded random signs).  That is the rounding noise of the computation feeding the tensor, at
  that computation's scale: a bfloat16 sum of large terms that cancels, a gradient that is zero in exact
  arithmetic (a bias before a normalization, every gradient of a loss that does not depend on the
  parameters) are noise up to that floor, and a tensor float32 computes well keeps a floor of a few
  float32 ulps of its own magnitude, far below any real fault.  The case's dtype is the coarsest among its
  inputs, parameters and buffers (what its author wrote it in): a backend that computes a float32 program in
  bfloat16 gets no bfloat16 floor;

or when the backend's RMSE to float64 is within a small multiple of eager float32's RMSE (the dynamo
benchmark harness's criterion, for noisy ops whose float32 error is large in eager too).  Integer and
boolean results must be equal.  A tensor computed from random values (an op tagged
``nondeterministic_seeded``, or ``empty``'s undefined contents; :class:`conformance.checks.noise.RandomValues`)
is checked for its shape and for finite values only: no other run need reproduce its values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.api.case import Tolerance
from conformance.api.verdict import Check, CheckName, Status, passed


@dataclass(frozen=True)
class Noise:
    """What the reference's perturbed runs say about one call: the resolution ``eps`` the backend computes
    at, how far each tensor moved (``spread``, by name), and the tensors computed from random values."""

    eps: float = 0.0
    spread: dict[str, float] = field(default_factory=dict)
    random: frozenset[str] | set[str] = frozenset()


@dataclass
class TensorParity:
    name: str
    max_abs_err: float
    rel_err: float  # max |actual - ref| / max |ref|
    rmse: float
    eager_rmse: float
    within_rtol: bool
    ok: bool
    note: str = ""
    scale: float = 0.0  # max |ref|
    noise_floor: float = 0.0  # rounding noise allowed: one ulp of its dtype at ``scale`` + the perturbed spread
    allowed: float = 0.0  # the larger of rtol * scale (atol for an all-zero reference) and ``noise_floor``
    random: bool = False  # computed from random values: shape and finiteness checked only

    @property
    def margin(self) -> float:
        """The error as a fraction of what is allowed (above 1: outside; ``inf`` for a structural failure)."""
        if self.allowed > 0:
            return self.max_abs_err / self.allowed
        return 0.0 if self.max_abs_err == 0 else math.inf

    def describe(self) -> str:
        why = self.note or ("outside tolerance" if not self.ok else "ok")
        if self.random:
            return f"{self.name}: computed from random values, shape and finiteness checked ({why})"
        return (f"{self.name}: relative error {self.rel_err:.3g} (max abs {self.max_abs_err:.3g}, allowed "
                f"{self.allowed:.3g}, noise floor {self.noise_floor:.3g}), rmse {self.rmse:.3g} vs eager-fp32 rmse "
                f"{self.eager_rmse:.3g} ({why})")

    def figures(self) -> dict[str, Any]:
        return {"name": self.name, "max_abs_err": self.max_abs_err, "rel_err": self.rel_err, "rmse": self.rmse,
                "eager_rmse": self.eager_rmse, "scale": self.scale, "noise_floor": self.noise_floor,
                "allowed": self.allowed, "note": self.note}


@dataclass
class ParityReport:
    tensors: list[TensorParity] = field(default_factory=list)
    eps: float = 0.0  # the resolution of the dtype the case computes in, which the noise floors are made at

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tensors)

    @property
    def worst(self) -> TensorParity | None:
        bad = [t for t in self.tensors if not t.ok] or self.tensors
        return max(bad, key=lambda t: (t.rel_err, t.max_abs_err), default=None)

    @property
    def closest(self) -> TensorParity | None:
        """The tensor nearest its allowance (a failing one first): the one a reader checks the contract on."""
        valued = [t for t in self.tensors if not t.random]
        return max(valued, key=lambda t: (not t.ok, t.margin), default=None)

    def to_json(self) -> dict[str, Any]:
        worst, closest = self.worst, self.closest
        ratio = [t.rmse / t.eager_rmse for t in self.tensors if t.eager_rmse > 0 and math.isfinite(t.rmse)]
        return {
            "ok": self.ok,
            "max_abs_err": max((t.max_abs_err for t in self.tensors), default=0.0),
            "max_rel_err": max((t.rel_err for t in self.tensors), default=0.0),
            "rmse_ratio": max(ratio, default=0.0),
            "compared": [t.name for t in self.tensors],
            "worst": worst.name if worst else None,
            "failures": [t.figures() for t in self.tensors if not t.ok],
            "closest": {**closest.figures(), "margin": closest.margin} if closest else None,
            "random": [t.name for t in self.tensors if t.random],
            "noise_eps": self.eps,
        }


def _rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    return torch.sqrt(torch.mean((a.double() - ref) ** 2)).item() if ref.numel() else 0.0


def _random_parity(name: str, got: torch.Tensor, ref: torch.Tensor) -> TensorParity:
    """A tensor computed from random values: its shape, and finite values where the reference's are."""
    if tuple(got.shape) != tuple(ref.shape):
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False,
                            f"shape {tuple(got.shape)} != {tuple(ref.shape)}", random=True)
    if got.is_floating_point() and ref.is_floating_point():
        finite = torch.isfinite(ref.detach().cpu())
        if not bool(torch.isfinite(got.detach().cpu())[finite].all()):
            return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False,
                                "not finite where the reference is", random=True)
    return TensorParity(name, 0.0, 0.0, 0.0, 0.0, True, True, "computed from random values", random=True)


def nonfinite_problem(got: torch.Tensor, ref: torch.Tensor) -> str | None:
    """Why ``got``'s non-finite elements are not the reference's, or ``None``.

    The reference is taken in ``got``'s dtype first: a float64 value beyond that dtype's range is the infinity
    the dtype rounds it to (float32 overflows above 3.4e38), which any backend computing in it returns.  NaN
    must be where the reference's is, and each infinity the reference's, sign included; every other element
    is finite in both and compared by its magnitude (an infinite reference would make the allowance infinite
    and an infinity minus itself NaN)."""
    ref = ref.detach().cpu()
    got = got.detach().cpu()
    if got.is_floating_point() and ref.is_floating_point():
        ref = ref.to(got.dtype)
    ref, got = ref.to(torch.float64), got.to(torch.float64)
    nan_ref, nan_got = torch.isnan(ref), torch.isnan(got)
    if bool((nan_got & ~nan_ref).any()):
        return "NaN where the reference has none"
    if bool((nan_ref & ~nan_got).any()):
        return "a number where the reference is NaN"
    inf_ref, inf_got = torch.isinf(ref), torch.isinf(got)
    if bool((inf_got & ~inf_ref).any()):
        return "infinite where the reference is finite"
    if not torch.equal(got[inf_ref], ref[inf_ref]):
        return "finite, or the other infinity, where the reference is infinite"
    return None


#: the floor holds this many times the largest move the perturbed runs make: they are samples (two, with random
#: signs) of the noise, and a backend rounds in its own order (fused, reordered, at another precision)
NOISE_MULTIPLE = 2.0


def noise_floor(eps: float, scale: float, spread: float) -> float:
    """One ulp (``eps``: the case's dtype's) at ``scale`` (the result's own rounding) plus :data:`NOISE_MULTIPLE`
    times the perturbed runs' ``spread``."""
    return eps * scale + NOISE_MULTIPLE * spread


def dtype_problem(got: torch.Tensor, ref: torch.Tensor) -> str | None:
    """Why ``got`` is not of the reference's dtype, or ``None``.  An integer or boolean result must have
    the reference's dtype exactly: another one reads its values otherwise (a uint8 result returned as
    int8 reads 205 as -51, and equal values on one call hide it).  A floating (or complex) result only
    needs to be floating (complex): its precision is the case's, and the float64 reference's is not."""
    if got.dtype == ref.dtype:
        return None
    if (got.is_floating_point() and ref.is_floating_point()) or (got.is_complex() and ref.is_complex()):
        return None
    named = [str(d).removeprefix("torch.") for d in (got.dtype, ref.dtype)]
    return f"dtype {named[0]} where the reference's is {named[1]}"


def tensor_parity(name: str, got: torch.Tensor, ref: torch.Tensor, eager: torch.Tensor | None,
                  tol: Tolerance, spread: float = 0.0, random: bool = False, eps: float | None = None) -> TensorParity:
    """One tensor against its reference (pure); ``spread``: how far the perturbed references moved it
    (:class:`Noise`); ``random``: computed from random values; ``eps``: the resolution of the dtype the case
    computes in (default: ``got``'s dtype's)."""
    if (kind := dtype_problem(got, ref)) is not None:
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False, kind)
    if random:
        return _random_parity(name, got, ref)
    if tuple(got.shape) != tuple(ref.shape):
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False,
                            f"shape {tuple(got.shape)} != {tuple(ref.shape)}")
    if eps is None:
        eps = torch.finfo(got.dtype).eps if got.is_floating_point() else 0.0
    got64 = got.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    if not ref.is_floating_point() and not got.is_floating_point():
        equal = bool(torch.equal(got64, ref))
        return TensorParity(name, 0.0 if equal else math.inf, 0.0 if equal else math.inf, 0.0, 0.0, equal, equal,
                            "" if equal else "integer results differ")
    if not ref.numel():
        return TensorParity(name, 0.0, 0.0, 0.0, 0.0, True, True)
    problem = nonfinite_problem(got, ref)
    if problem is not None:
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False, problem)
    eager64 = eager.detach().to("cpu", torch.float64) if eager is not None else None
    finite = torch.isfinite(got64)  # where the reference is finite in ``got``'s dtype, as nonfinite_problem holds
    if not bool(finite.all()):  # compare the finite elements only (masking copies: only when there is one)
        got64, ref = got64[finite], ref[finite]
        eager64 = eager64[finite] if eager64 is not None else None
    diff = got64 - ref
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    scale = ref.abs().max().item() if diff.numel() else 0.0
    floor = noise_floor(eps, scale, spread)
    if scale > 0:
        rel = max_abs / scale
        allowed = max(tol.rtol * scale, floor)
    else:  # an all-zero reference: there is no magnitude to scale by
        rel = 0.0 if max_abs == 0 else math.inf
        allowed = max(tol.atol, floor)
    within = max_abs <= allowed
    rmse = math.sqrt(torch.mean(diff * diff).item()) if diff.numel() else 0.0
    eager_rmse = _rmse(eager64, ref) if eager64 is not None else 0.0
    by_rmse = 0 < eager_rmse < math.inf and rmse <= tol.rmse_multiple * eager_rmse
    note = ""
    if within and floor > tol.rtol * scale and max_abs > tol.rtol * scale:
        note = f"within the noise floor {floor:.3g} (relative error {rel:.3g} is rounding noise at this scale)"
    return TensorParity(name, max_abs, rel, rmse, eager_rmse, within, within or by_rmse, note,
                        scale=scale, noise_floor=floor, allowed=allowed)


def compare(
    actual: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    eager: dict[str, torch.Tensor],
    tol: Tolerance,
    noise: Noise | None = None,
) -> ParityReport:
    """Compare every reference tensor with the backend's; a missing one fails.  ``noise``: the perturbed
    references' figures (:class:`Noise`; without them a tensor's floor is its own resolution only)."""
    noise = noise or Noise()
    report = ParityReport(eps=noise.eps)
    for name, ref in reference.items():
        got = actual.get(name)
        if got is None:
            report.tensors.append(TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False, "missing"))
            continue
        report.tensors.append(tensor_parity(name, got, ref, eager.get(name), tol, noise.spread.get(name, 0.0),
                                            name in noise.random, noise.eps or None))
    return report


def parity_check(reports: Mapping[int, ParityReport]) -> Check:
    """The parity check: the first checked call whose outputs are off fails it; every call's figures."""
    figures = {f"call {call}": report.to_json() for call, report in reports.items()}
    for call, report in reports.items():
        if not report.ok:
            worst = report.worst
            assert worst is not None
            return Check(CheckName.PARITY, Status.FAIL_PARITY, f"call {call}: {worst.describe()}", figures)
    return passed(CheckName.PARITY, **figures)
