"""Numerical parity against the float64 reference, scaled to each tensor's magnitude.

A tensor passes when its largest error, divided by the reference's largest
magnitude, is within the case's ``rtol`` (so a 1e-3 relative error fails at
float32 whatever the tensor's scale: small gradients get no absolute-tolerance
free pass), or when the backend's RMSE to float64 is within a small multiple of
eager float32's RMSE (the dynamo benchmark harness's criterion, for noisy ops
whose float32 error is large in eager too).  A reference that is all zeros is
held to ``atol``.  Integer and boolean results must be equal.

A quantity that is zero in exact arithmetic (a bias gradient before a normalization, the running
mean of a normalized activation, their optimizer state) has no significant digit at float32: eager
float32's own error is as large as the reference itself, and any relative error is rounding noise.
Such a tensor (eager float32's relative error at least 1) is held to ``rtol`` against the magnitude
of its peers instead: the largest reference of the same kind in the same call (every gradient,
every buffer, every optimizer state entry of the same key), so a wrong value of the peers' size
still fails.  A small tensor that float32 does compute keeps its own scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.api.case import Tolerance


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

    def describe(self) -> str:
        why = self.note or ("outside tolerance" if not self.ok else "ok")
        return (f"{self.name}: relative error {self.rel_err:.3g} (max abs {self.max_abs_err:.3g}), rmse "
                f"{self.rmse:.3g} vs eager-fp32 rmse {self.eager_rmse:.3g} ({why})")


@dataclass
class ParityReport:
    tensors: list[TensorParity] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tensors)

    @property
    def worst(self) -> TensorParity | None:
        bad = [t for t in self.tensors if not t.ok] or self.tensors
        return max(bad, key=lambda t: (t.rel_err, t.max_abs_err), default=None)

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        ratio = [t.rmse / t.eager_rmse for t in self.tensors if t.eager_rmse > 0 and math.isfinite(t.rmse)]
        return {
            "ok": self.ok,
            "max_abs_err": max((t.max_abs_err for t in self.tensors), default=0.0),
            "max_rel_err": max((t.rel_err for t in self.tensors), default=0.0),
            "rmse_ratio": max(ratio, default=0.0),
            "compared": [t.name for t in self.tensors],
            "worst": worst.name if worst else None,
            "failures": [
                {"name": t.name, "max_abs_err": t.max_abs_err, "rel_err": t.rel_err, "rmse": t.rmse,
                 "eager_rmse": t.eager_rmse, "note": t.note}
                for t in self.tensors if not t.ok
            ],
        }


def _rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    return torch.sqrt(torch.mean((a.double() - ref) ** 2)).item() if ref.numel() else 0.0


def peer_kind(name: str) -> str:
    """What a state's name says it is (``grad``, ``buffer``, ``optim.momentum_buffer``), for :func:`peer_scales`."""
    kind = name.split("[", 1)[0]
    if kind == "optim" and "]." in name:
        return f"optim.{name.rsplit('].', 1)[1]}"
    return kind


def peer_scales(reference: dict[str, torch.Tensor]) -> dict[str, float]:
    """The largest magnitude among each kind of floating reference tensor (see :func:`peer_kind`)."""
    scales: dict[str, float] = {}
    for name, ref in reference.items():
        if ref.is_floating_point() and ref.numel():
            finite = ref.detach()[torch.isfinite(ref.detach())]
            if finite.numel():
                kind = peer_kind(name)
                scales[kind] = max(scales.get(kind, 0.0), finite.abs().max().item())
    return scales


def tensor_parity(name: str, got: torch.Tensor, ref: torch.Tensor, eager: torch.Tensor | None,
                  tol: Tolerance, peer_scale: float = 0.0) -> TensorParity:
    """One tensor against its reference (pure); ``peer_scale``: the largest reference of its kind."""
    if tuple(got.shape) != tuple(ref.shape):
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False,
                            f"shape {tuple(got.shape)} != {tuple(ref.shape)}")
    got64 = got.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    if not ref.is_floating_point() and not got.is_floating_point():
        equal = bool(torch.equal(got64, ref))
        return TensorParity(name, 0.0 if equal else math.inf, 0.0 if equal else math.inf, 0.0, 0.0, equal, equal,
                            "" if equal else "integer results differ")
    if not ref.numel():
        return TensorParity(name, 0.0, 0.0, 0.0, 0.0, True, True)
    nan_ref, nan_got = torch.isnan(ref), torch.isnan(got64)
    if not torch.equal(nan_ref, nan_got):
        return TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False, "NaN where the reference has none")
    eager64 = eager.detach().to("cpu", torch.float64) if eager is not None else None
    if bool(nan_ref.any()):  # compare the finite elements only (masking copies: only when there is a NaN)
        finite = ~nan_ref
        got64, ref = got64[finite], ref[finite]
        eager64 = eager64[finite] if eager64 is not None else None
    diff = got64 - ref
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    scale = ref.abs().max().item() if diff.numel() else 0.0
    if scale > 0:
        rel = max_abs / scale
        within = rel <= tol.rtol
    else:  # an all-zero reference: there is no magnitude to scale by
        rel = 0.0 if max_abs == 0 else math.inf
        within = max_abs <= tol.atol
    rmse = math.sqrt(torch.mean(diff * diff).item()) if diff.numel() else 0.0
    eager_rmse = _rmse(eager64, ref) if eager64 is not None else 0.0
    by_rmse = eager_rmse > 0 and rmse <= tol.rmse_multiple * eager_rmse
    note = ""
    if not (within or by_rmse) and eager64 is not None and peer_scale > scale:
        eager_err = (eager64 - ref).abs().max().item() if diff.numel() else 0.0
        if eager_err >= scale:  # float32 has no significant digit of it: zero up to rounding
            within = max_abs / peer_scale <= tol.rtol
            note = ("zero up to float32 rounding (eager float32's error is as large as the reference); "
                    f"error relative to its peers' magnitude {peer_scale:.3g}: {max_abs / peer_scale:.3g}")
    return TensorParity(name, max_abs, rel, rmse, eager_rmse, within, within or by_rmse,
                        "" if within or by_rmse else note)


def compare(
    actual: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    eager: dict[str, torch.Tensor],
    tol: Tolerance,
) -> ParityReport:
    """Compare every reference tensor with the backend's; a missing one fails."""
    report = ParityReport()
    scales = peer_scales(reference)
    for name, ref in reference.items():
        got = actual.get(name)
        if got is None:
            report.tensors.append(TensorParity(name, math.inf, math.inf, math.inf, 0.0, False, False, "missing"))
            continue
        report.tensors.append(tensor_parity(name, got, ref, eager.get(name), tol, scales.get(peer_kind(name), 0.0)))
    return report
