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
from enum import Enum
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
    #: how far each carried state tensor's change on the call moved in the perturbed runs, beyond the one-ulp move
    #: of the value written (its storage rounding, which :func:`update_parity` allows per element)
    update_spread: dict[str, float] = field(default_factory=dict)


class Miss(str, Enum):
    """What kind of miss a failing tensor is: the parity finding's typed evidence, which causes and triage group
    by (a near miss of the noise floor is never one group with a wrong value)."""

    MISSING = "missing"
    SHAPE = "wrong shape"
    DTYPE = "wrong dtype"
    NON_FINITE = "non-finite values differ"
    INTEGERS = "integer values differ"
    #: the allowance was the noise floor (the reference is below its own rounding noise: zero, or a sum that
    #: cancels, in exact arithmetic) and the error is near it (:func:`miss_of`)
    NEAR_NOISE_FLOOR = "near the noise floor"
    WRONG_VALUE = "wrong value"


#: an error beyond the floor within this many floors is near it (a decade: the floor is a sampled estimate)
NEAR_FLOOR = 10.0


def miss_of(max_abs_err: float, noise_floor: float, allowed: float, rtol: float, eps: float) -> Miss:
    """A finite error outside ``allowed``: near the noise floor where the floor was the allowance and the error is
    within :data:`NEAR_FLOOR` floors of it, or within ``rtol`` of the magnitude the floor's roundings happen at
    (``noise_floor / eps``); a wrong value otherwise (outside ``rtol`` of a reference above its noise, or far
    beyond the noise of one that is not)."""
    if noise_floor <= 0 or noise_floor < allowed:
        return Miss.WRONG_VALUE
    near = noise_floor * max(NEAR_FLOOR, rtol / eps if eps > 0 else 0.0)
    return Miss.NEAR_NOISE_FLOOR if max_abs_err <= near else Miss.WRONG_VALUE


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
    miss: Miss | None = None  # what kind of miss a failing tensor is (None: it passed)
    update: bool = False  # the tensor's change on the call (state it carries), not its value

    @property
    def over_floor(self) -> float:
        """How many noise floors the error is (``inf`` with no floor and an error)."""
        if self.noise_floor > 0:
            return self.max_abs_err / self.noise_floor
        return 0.0 if self.max_abs_err == 0 else math.inf

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
        what = f"{self.name}: update on this call, relative error" if self.update else f"{self.name}: relative error"
        return (f"{what} {self.rel_err:.3g} (max abs {self.max_abs_err:.3g}, allowed "
                f"{self.allowed:.3g}, noise floor {self.noise_floor:.3g}), rmse {self.rmse:.3g} vs eager-fp32 rmse "
                f"{self.eager_rmse:.3g} ({why})")

    def figures(self) -> dict[str, Any]:
        figures = {"name": self.name, "max_abs_err": self.max_abs_err, "rel_err": self.rel_err, "rmse": self.rmse,
                   "eager_rmse": self.eager_rmse, "scale": self.scale, "noise_floor": self.noise_floor,
                   "allowed": self.allowed, "note": self.note}
        if self.miss is not None:
            figures.update(miss=self.miss.value, over_floor=self.over_floor)
        if self.update:
            figures["update"] = True
        return figures


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
            "compared": [t.name for t in self.tensors if not t.update],
            "updates": [t.name for t in self.tensors if t.update],
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
                            f"shape {tuple(got.shape)} != {tuple(ref.shape)}", random=True, miss=Miss.SHAPE)
    if got.is_floating_point() and ref.is_floating_point():
        finite = torch.isfinite(ref.detach().cpu())
        if not bool(torch.isfinite(got.detach().cpu())[finite].all()):
            return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False,
                                "not finite where the reference is", random=True, miss=Miss.NON_FINITE)
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
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False, kind, miss=Miss.DTYPE)
    if random:
        return _random_parity(name, got, ref)
    if tuple(got.shape) != tuple(ref.shape):
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False,
                            f"shape {tuple(got.shape)} != {tuple(ref.shape)}", miss=Miss.SHAPE)
    if eps is None:
        eps = torch.finfo(got.dtype).eps if got.is_floating_point() else 0.0
    got64 = got.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    if not ref.is_floating_point() and not got.is_floating_point():
        equal = bool(torch.equal(got64, ref))
        return TensorParity(name, 0.0 if equal else math.inf, 0.0 if equal else math.inf, 0.0, 0.0, equal, equal,
                            "" if equal else "integer results differ", miss=None if equal else Miss.INTEGERS)
    if not ref.numel():
        return TensorParity(name, 0.0, 0.0, 0.0, 0.0, True, True)
    problem = nonfinite_problem(got, ref)
    if problem is not None:
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False, problem, miss=Miss.NON_FINITE)
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
    ok = within or by_rmse
    return TensorParity(name, max_abs, rel, rmse, eager_rmse, within, ok, note, scale=scale, noise_floor=floor,
                        allowed=allowed, miss=None if ok else miss_of(max_abs, floor, allowed, tol.rtol, eps))


@dataclass(frozen=True)
class Before:
    """The state a call started from (the carried state only: parameters, buffers, optimizer state), as the
    backend, the float64 reference and eager had it: what each one's change on the call is measured from."""

    got: dict[str, torch.Tensor]
    ref: dict[str, torch.Tensor]
    eager: dict[str, torch.Tensor]


def update_parity(name: str, got: torch.Tensor, ref: torch.Tensor, eager: torch.Tensor | None, before: Before,
                  tol: Tolerance, spread: float, eps: float) -> TensorParity | None:
    """A carried state tensor's change on the call against the reference's change, at the change's own scale
    (``None`` where there is no change to compare: not floating, another shape, non-finite values).

    ``d = (got - got_before) - (ref - ref_before)``; element ``i`` passes when
    ``|d_i| <= max(rtol * max|dref|, floor) + eps * |ref_i|``: the update's noise floor
    (``floor = eps * max|dref| + 2 * spread``, the perturbed runs' updates) and the rounding of storing the new
    value (one ulp of the element itself: what the backend's own store of ``got_i`` rounds away).  So a
    learning rate 0.1% off fails where a parameter's value, held at its own far larger scale, cannot show it.
    The figures (``max_abs_err``, ``allowed``) are the element's nearest its allowance."""
    got_before, ref_before = before.got.get(name), before.ref.get(name)
    if got_before is None or ref_before is None or not (got.is_floating_point() and ref.is_floating_point()):
        return None
    tensors = [got, ref, got_before, ref_before]
    if len({tuple(t.shape) for t in tensors}) != 1 or not ref.numel():
        return None
    got64, ref64, gotb, refb = (t.detach().to("cpu", torch.float64) for t in tensors)
    d_got, d_ref = got64 - gotb, ref64 - refb
    if not bool(torch.isfinite(d_got).all() and torch.isfinite(d_ref).all()):
        return None  # the value's own check judges non-finite elements
    diff = (d_got - d_ref).abs()
    scale = d_ref.abs().max().item()
    floor = noise_floor(eps, scale, spread)
    allowed = max(tol.rtol * scale if scale > 0 else tol.atol, floor) + eps * ref64.abs()
    ratio = diff / allowed.clamp_min(torch.finfo(torch.float64).tiny)
    worst = int(ratio.argmax())  # the element nearest its allowance: the figures are its own
    max_abs = diff.reshape(-1)[worst].item()
    within = bool((diff <= allowed).all())
    rmse = math.sqrt(torch.mean(diff * diff).item())
    eager_before = before.eager.get(name)
    eager_rmse = 0.0
    if eager is not None and eager_before is not None and eager.shape == ref.shape == eager_before.shape:
        d_eager = eager.detach().to("cpu", torch.float64) - eager_before.detach().to("cpu", torch.float64)
        eager_rmse = _rmse(d_eager, d_ref) if bool(torch.isfinite(d_eager).all()) else 0.0
    by_rmse = 0 < eager_rmse < math.inf and rmse <= tol.rmse_multiple * eager_rmse
    ok = within or by_rmse
    at_worst = allowed.reshape(-1)[worst].item()
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    return TensorParity(name, max_abs, rel, rmse, eager_rmse, within, ok, scale=scale, noise_floor=floor,
                        allowed=at_worst, update=True,
                        miss=None if ok else miss_of(max_abs, floor + eps * abs(ref64.reshape(-1)[worst].item()),
                                                     at_worst, tol.rtol, eps))


def compare(
    actual: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    eager: dict[str, torch.Tensor],
    tol: Tolerance,
    noise: Noise | None = None,
    before: Before | None = None,
) -> ParityReport:
    """Compare every reference tensor with the backend's; a missing one fails.  ``noise``: the perturbed
    references' figures (:class:`Noise`; without them a tensor's floor is its own resolution only); ``before``:
    the state the call started from, whose change on the call is compared too (:func:`update_parity`)."""
    noise = noise or Noise()
    report = ParityReport(eps=noise.eps)
    for name, ref in reference.items():
        got = actual.get(name)
        if got is None:
            report.tensors.append(TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False, "missing",
                                               miss=Miss.MISSING))
            continue
        report.tensors.append(tensor_parity(name, got, ref, eager.get(name), tol, noise.spread.get(name, 0.0),
                                            name in noise.random, noise.eps or None))
        if before is not None and name not in noise.random:
            eps = noise.eps or (torch.finfo(got.dtype).eps if got.is_floating_point() else 0.0)
            update = update_parity(name, got, ref, eager.get(name), before, tol, noise.update_spread.get(name, 0.0),
                                   eps)
            if update is not None:
                report.tensors.append(update)
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
