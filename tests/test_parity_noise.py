"""Parity of quantities that are zero in exact arithmetic: judged against their peers, not as noise.

A bias gradient before a normalization, or the running mean of a normalized activation, is zero
in exact arithmetic; float32 computes rounding noise for it, so its relative error is meaningless.
These tests hold the rule to real computations (not made-up numbers) and show it still fails a
wrong value and does not loosen a small tensor that float32 does compute.
"""

from __future__ import annotations

import torch

from conformance.api.case import Tolerance
from conformance.checks.parity import compare, tensor_parity

TOL = Tolerance()


def _bias_grad_before_batchnorm(dtype: torch.dtype, *, recipe: str = "plain") -> dict[str, torch.Tensor]:
    """Gradients of Linear -> BatchNorm1d -> Linear: the first bias's is zero in exact arithmetic (the
    normalization removes any shift of its input), the last layer's weight gradient is well conditioned."""
    torch.manual_seed(0)
    first, norm, last = torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 4)
    x = torch.randn(64, 16)
    first, norm, last, x = first.to(dtype), norm.to(dtype), last.to(dtype), x.to(dtype)
    h = first(x)
    if recipe == "reordered":  # the same function, computed in another order (what another backend does)
        h = (x.unsqueeze(1) * first.weight.unsqueeze(0)).sum(-1) + first.bias
    y = last(norm(h))
    (y.square().mean() + y.mean()).backward()
    return {"grad[first.bias]": first.bias.grad, "grad[last.weight]": last.weight.grad}


def test_a_gradient_zero_in_exact_arithmetic_is_judged_against_its_peers() -> None:
    """Two float32 computations of the same function: each one's noise on the zero gradient is as good
    as the other's.  With the RMSE criterion off (a multiple of 1, and the noisier of the two judged),
    only the peer rule passes it, and without its peers the same tensor fails."""
    ref = _bias_grad_before_batchnorm(torch.float64)
    one = _bias_grad_before_batchnorm(torch.float32)
    other = _bias_grad_before_batchnorm(torch.float32, recipe="reordered")
    assert ref["grad[first.bias]"].abs().max() < 1e-12 < ref["grad[last.weight]"].abs().max()
    noisier, quieter = sorted((one, other), key=lambda g: -(g["grad[first.bias]"].double() - ref["grad[first.bias]"])
                              .norm().item())
    strict = Tolerance(rmse_multiple=1.0)
    alone = tensor_parity("grad[first.bias]", noisier["grad[first.bias]"], ref["grad[first.bias]"],
                          quieter["grad[first.bias]"], strict)
    assert not alone.ok
    judged = {"grad[first.bias]": noisier["grad[first.bias]"], "grad[last.weight]": quieter["grad[last.weight]"]}
    report = compare(judged, ref, quieter, strict)
    assert report.ok, [t.describe() for t in report.tensors]


def test_a_wrong_value_of_a_zero_gradient_still_fails() -> None:
    ref = _bias_grad_before_batchnorm(torch.float64)
    eager = _bias_grad_before_batchnorm(torch.float32)
    wrong = dict(eager)
    wrong["grad[first.bias]"] = eager["grad[first.bias]"] + 1e-3 * ref["grad[last.weight]"].abs().max().float()
    report = compare(wrong, ref, eager, TOL)
    bad = [t for t in report.tensors if not t.ok]
    assert [t.name for t in bad] == ["grad[first.bias]"]
    assert "peers' magnitude" in bad[0].describe()


def test_a_small_gradient_float32_computes_keeps_its_own_scale() -> None:
    """Only a tensor float32 cannot compute is judged against its peers: a small but significant one
    with a 1e-3 relative error still fails, however large its peers are."""
    ref = {"grad[big]": torch.full((4,), 1e3, dtype=torch.float64), "grad[small]": torch.full((4,), 1e-3,
                                                                                               dtype=torch.float64)}
    eager = {name: t.float() for name, t in ref.items()}
    wrong = {"grad[big]": eager["grad[big]"], "grad[small]": eager["grad[small]"] * (1 + 1e-3)}
    report = compare(wrong, ref, eager, TOL)
    assert [t.name for t in report.tensors if not t.ok] == ["grad[small]"]
