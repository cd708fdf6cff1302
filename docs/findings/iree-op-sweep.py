"""Repros: wrong results and refused programs of IREE on single torch ops, found by the op sweep.

Plain ``python docs/findings/iree-op-sweep.py NAME`` (torch + iree-turbine, no harness), NAME one of the
repros below (no NAME: all of them).  Each compiles one op with ``torch.compile(backend="turbine_cpu")`` on
the sweep's sample (OpInfo's, at its shapes) and compares with eager PyTorch.  Exit status 1 while a fault
shows, 0 once every named one is fixed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

import iree.turbine.dynamo.backends.base  # noqa: F401  (backend="turbine_cpu", an entry point of iree-turbine)


def _compare(name: str, fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> bool:
    """Whether IREE's result differs from eager's (or IREE refuses the program): True is the fault."""
    torch._dynamo.reset()
    expected = fn(*args)
    try:
        got = torch.compile(fn, backend="turbine_cpu", fullgraph=True)(*args)
    except Exception as exc:  # the compiler's refusal: its first error line
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        line = next((ln for ln in lines if "Error" in ln and "raised" not in ln), type(exc).__name__)
        print(f"{name}: FAULT: IREE does not compile or run it: {line.strip()[:200]} (diagnostics: stderr)")
        return True
    if got.dtype != expected.dtype or got.shape != expected.shape:
        print(f"{name}: FAULT: {got.dtype} {tuple(got.shape)} where eager gives {expected.dtype} {tuple(expected.shape)}")
        return True
    if not torch.allclose(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True):
        worst = (got - expected).abs().nan_to_num(float("inf")).max().item()
        print(f"{name}: FAULT: values differ from eager's (max abs difference {worst:.4g})")
        return True
    print(f"{name}: no fault")
    return False


def fmax_0d() -> bool:
    """fmax of a vector and a 0-d tensor: 'tensor.cast' op operand type 'tensor<i1>' and result type
    'tensor<5xi1>' are cast incompatible (fmin the same)."""
    torch.manual_seed(0)
    return _compare("fmax-0d", torch.fmax, torch.randn(5), torch.randn(()))


def pad_replicate_negative() -> bool:
    """Replicate padding with a negative pad (a crop on that side): 'tensor.cast' op operand type
    'tensor<5x3x4x9xf32>' and result type 'tensor<5x3x4x5xf32>' are cast incompatible."""
    torch.manual_seed(0)
    return _compare("pad-replicate-negative", lambda x: F.pad(x, (-4, 5, 0, 0), mode="replicate"),
                    torch.randn(5, 3, 4, 4))


def logcumsumexp() -> bool:
    """logcumsumexp of large values (OpInfo's sample holds 10000.0): inf, where eager's stable form gives
    10000 + log(k); the lowering exponentiates before it takes the running sum."""
    return _compare("logcumsumexp", lambda x: torch.logcumsumexp(x, 0), torch.full((5, 5, 5), 10000.0))


def interpolate_nearest_exact() -> bool:
    """interpolate with mode='nearest-exact' (3 columns from 4): other source columns than eager's."""
    torch.manual_seed(0)
    return _compare("interpolate-nearest-exact", lambda x: F.interpolate(x, size=3, mode="nearest-exact"),
                    torch.randn(2, 3, 4))


def max_unpool1d() -> bool:
    """max_unpool1d into an output of 3 (OpInfo's sample): the value whose index is the last position (2) is
    lost (0 where eager writes it)."""
    pooled, indices = torch.tensor([[[-1.765825867652893], [3.611605167388916]]]), torch.tensor([[[1], [2]]])
    return _compare("max-unpool1d", lambda x, i: F.max_unpool1d(x, i, 3, 2, 0, output_size=(1, 2, 3)),
                    pooled, indices)


def embedding_bag_weighted_sum() -> bool:
    """embedding_bag in sum mode with per-sample weights: other sums than eager's."""
    torch.manual_seed(0)
    weight, idx, offsets, psw = torch.randn(10, 5), torch.tensor([1, 7, 3, 9, 0]), torch.tensor([0, 2]), torch.randn(5)
    return _compare("embedding-bag-weighted-sum",
                    lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
                    weight, idx, offsets, psw)


def renorm_last_dim() -> bool:
    """renorm over the last dimension (dim=-1): other values than eager's (dim=1 matches)."""
    torch.manual_seed(0)
    return _compare("renorm-last-dim", lambda x: torch.renorm(x, 2, -1, 0.5), torch.randn(5, 5, 5))


def max_unpool2d_padded() -> bool:
    """max_unpool2d (kernel 3, stride 2, padding 1) into a (3, 6) output, OpInfo's second sample, whose
    indices repeat: IREE refuses the program, "slice along dimension 2 runs out-of-bounds: 3 >= 3"."""
    values = torch.tensor([[[[8.53, 8.53, 4.37, -0.72], [8.53, 8.62, 4.37, 1.95]],
                            [[2.20, 6.72, 5.94, 0.80], [6.89, 6.89, 5.94, -1.83]]]])
    indices = torch.tensor([[[[7, 7, 10, 11], [7, 14, 10, 17]], [[6, 2, 9, 5], [13, 13, 9, 17]]]])
    return _compare("max-unpool2d-padded", lambda x, i: F.max_unpool2d(x, i, 3, 2, 1, output_size=(3, 6)),
                    values, indices)


def polar_0d_angle() -> bool:
    """polar of a vector of magnitudes and a 0-d angle: "'linalg.generic' op expected operand #1 rank (0) to
    match the result rank of indexing_map (1)" (the 0-d operand is not broadcast)."""
    torch.manual_seed(0)
    return _compare("polar-0d-angle", torch.polar, torch.rand(5) + 0.5, torch.tensor(0.3))


def chalf() -> bool:
    """Tensor.chalf() (complex32 result): the compiled call fails handing the result back (KeyError in
    turbine's _export_torch_tensor: no torch dtype for IREE's complex<f16> element type)."""
    return _compare("chalf", lambda x: x.chalf(), torch.tensor(0.25))


REPROS = {f.__name__.replace("_", "-"): f for f in (fmax_0d, pad_replicate_negative, logcumsumexp,
                                                     interpolate_nearest_exact, max_unpool1d,
                                                     embedding_bag_weighted_sum, renorm_last_dim,
                                                     max_unpool2d_padded, polar_0d_angle, chalf)}


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in REPROS]
    if unknown:
        print(f"unknown repro {unknown[0]!r}; one of: {', '.join(REPROS)}")
        return 2
    faults = [n for n in (names or list(REPROS)) if REPROS[n]()]
    return 1 if faults else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
