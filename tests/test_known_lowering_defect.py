"""A parity failure that is a backend lowering known to be wrong, told from any other wrong kernel by running the
pair again with only that lowering's ops on ATen's kernels.

Inductor's avg_pool backward lowering divides a ceil_mode window that overhangs the padded input by the whole
kernel (pytorch/pytorch#198119): a wrong gradient.  The engine runs a pair that fails parity again, compiled
afresh, with the ops of each known defect whose ops the step's graphs call falling back to ATen
(:meth:`conformance.api.adapter.CompiledStep.lowering_fallbacks`); only where every call then matches is the
failure ``known-lowering-defect``.  A user's own model meeting the defect is recognised (no id names it); a
planted wrong gradient on the same step fails the second run too and stays unexpected.
"""

from __future__ import annotations

import pytest
import torch

from conformance.api.case import Case, Workload
from conformance.api.verdict import Status
from conformance.backends.inductor import KNOWN_LOWERING_DEFECTS, InductorBackend, aten_kernels_for
from conformance.checks.manifest import apply, load_manifest
from conformance.checks.mechanism import LOWERING_FALLBACK
from conformance.run.engine import RunOptions, run_case
from tests.faults import planted


class Pooled(torch.nn.Module):
    """A user's model: a linear layer, then AvgPool1d with ceil_mode whose last window overhangs the padding."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(9, 9)
        self.pool = torch.nn.AvgPool1d(6, stride=3, padding=2, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.proj(x)).square().mean()


def _build(seed: int) -> Workload:
    torch.manual_seed(seed)
    return Workload(Pooled(), (torch.randn(2, 3, 9),))


CASE = Case("user-avgpool-ceil-train", "train_step", "user", 0, _build)


@pytest.mark.slow
def test_a_users_avg_pool_with_an_overhanging_window_is_the_known_lowering_defect() -> None:
    raw = run_case(CASE, InductorBackend(), RunOptions())
    assert raw.status == Status.FAIL_PARITY, raw.reason
    seen = raw.parity[LOWERING_FALLBACK] if raw.parity else None
    assert seen is not None and seen["outcome"] == "pass" and "pytorch/pytorch#198119" in seen["lowering"], raw.parity
    judged = apply(raw, load_manifest("inductor"))
    assert judged.status == Status.XFAIL and judged.cause_parts == ["parity: known-lowering-defect"], judged.reason


@pytest.mark.slow
def test_a_wrong_gradient_on_the_same_step_is_not_the_known_defect() -> None:
    raw = run_case(CASE, planted(InductorBackend, "grad-rel-1e-3")(), RunOptions())
    assert raw.status == Status.FAIL_PARITY, raw.reason
    assert raw.parity is not None and raw.parity[LOWERING_FALLBACK]["outcome"] == "fail", raw.parity
    judged = apply(raw, load_manifest("inductor"))
    assert judged.status == Status.FAIL_PARITY and "parity: known-lowering-defect" not in judged.cause_parts, \
        judged.cause_parts


def test_the_fallback_puts_the_lowerings_back() -> None:
    from torch._inductor import lowering

    ops = next(iter(KNOWN_LOWERING_DEFECTS.values()))
    before = {op: lowering.lowerings[getattr(torch.ops.aten, op).default] for op in ops}
    with aten_kernels_for(ops):
        assert all(lowering.lowerings[getattr(torch.ops.aten, op).default] is not before[op] for op in ops)
    assert all(lowering.lowerings[getattr(torch.ops.aten, op).default] is before[op] for op in ops)
