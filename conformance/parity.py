"""Numerical parity against the float64 reference.

Pass if ``allclose`` at the case's tolerance, or if the backend's RMSE to fp64 is
within a small multiple of eager-fp32's RMSE to fp64 (the criterion of PyTorch's
dynamo benchmark harness).  Outputs and gradients are all checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.case import Tolerance


@dataclass
class TensorParity:
    name: str
    max_abs_err: float
    rmse: float
    eager_rmse: float
    allclose: bool
    ok: bool
    note: str = ""


@dataclass
class ParityReport:
    tensors: list[TensorParity] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tensors)

    @property
    def worst(self) -> TensorParity | None:
        bad = [t for t in self.tensors if not t.ok] or self.tensors
        return max(bad, key=lambda t: t.max_abs_err, default=None)

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        ratio = [t.rmse / t.eager_rmse for t in self.tensors if t.eager_rmse > 0]
        return {
            "ok": self.ok,
            "max_abs_err": max((t.max_abs_err for t in self.tensors), default=0.0),
            "rmse_ratio": max(ratio, default=0.0),
            "compared": [t.name for t in self.tensors],
            "worst": worst.name if worst else None,
            "failures": [
                {"name": t.name, "max_abs_err": t.max_abs_err, "rmse": t.rmse,
                 "eager_rmse": t.eager_rmse, "note": t.note}
                for t in self.tensors if not t.ok
            ],
        }


def _rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    return torch.sqrt(torch.mean((a.double() - ref) ** 2)).item() if ref.numel() else 0.0


def compare(
    actual: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    eager: dict[str, torch.Tensor],
    tol: Tolerance,
) -> ParityReport:
    """Compare every reference tensor with the backend's; a missing one fails."""
    report = ParityReport()
    for name, ref in reference.items():
        got = actual.get(name)
        if got is None or tuple(got.shape) != tuple(ref.shape):
            note = "missing" if got is None else f"shape {tuple(got.shape)} != {tuple(ref.shape)}"
            report.tensors.append(TensorParity(name, float("inf"), float("inf"), 0.0, False, False, note))
            continue
        got64 = got.detach().to("cpu", torch.float64)
        ref = ref.to(torch.float64)
        if not ref.is_floating_point():
            equal = bool(torch.equal(got64, ref))
            report.tensors.append(TensorParity(name, 0.0 if equal else float("inf"), 0.0, 0.0, equal, equal))
            continue
        max_abs = (got64 - ref).abs().max().item() if ref.numel() else 0.0
        close = torch.allclose(got64, ref, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        rmse = _rmse(got64, ref)
        eager_rmse = _rmse(eager[name], ref) if name in eager else 0.0
        by_rmse = eager_rmse > 0 and rmse <= tol.rmse_multiple * eager_rmse
        report.tensors.append(TensorParity(name, max_abs, rmse, eager_rmse, close, close or by_rmse))
    return report
