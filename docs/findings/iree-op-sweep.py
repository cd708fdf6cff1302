"""Repros: wrong results and refused programs of IREE on single torch ops, found by the op sweep.

Plain ``python docs/findings/iree-op-sweep.py NAME`` (torch + iree-turbine, no harness), NAME one of the
repros below (no NAME: all of them).  Each compiles one op with ``torch.compile(backend="turbine_cpu")`` on
the sweep's sample (OpInfo's, at its shapes) and compares with eager PyTorch.  Exit status 1 while a fault
shows, 0 once every named one is fixed.
"""

from __future__ import annotations

import os
import sys
import tempfile
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
    """max_unpool1d into an output of 3 (OpInfo's sample): IREE reads output position o from pooled position
    o // stride, as if the windows (kernel 3, stride 2) did not overlap, so the value whose index is 2 at
    position 0 is lost (0 where eager writes it)."""
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


def _compare_grads(name: str, fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> bool:
    """Whether the gradients of ``fn``'s scalar result, compiled by IREE (forward and backward), differ from eager's
    (or IREE refuses the backward): True is the fault.  Every argument requires a gradient, so AOTAutograd's
    backward returns no None (which turbine's importer refuses on its own: '!torch.none')."""
    torch._dynamo.reset()
    eager = [a.clone().requires_grad_() for a in args]
    fn(*eager).backward()
    compiled = [a.clone().requires_grad_() for a in args]
    with tempfile.TemporaryFile() as err:  # the compiler prints its diagnostics on fd 2: keep them to name the fault
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            torch.compile(fn, backend="turbine_cpu", fullgraph=True)(*compiled).backward()
            failure = None
        except Exception as exc:
            failure = exc
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            err.seek(0)
            diagnostics = err.read().decode("utf-8", errors="replace")
            sys.stderr.write(diagnostics)
    if failure is not None:
        lines = [ln for ln in f"{diagnostics}\n{failure}".splitlines() if ln.strip()]
        line = next((ln for ln in lines if "error:" in ln), type(failure).__name__)
        print(f"{name}: FAULT: IREE does not compile or run the backward: {line.strip()[:200]} (diagnostics: stderr)")
        return True
    worst = max(float((c.grad - e.grad).abs().max()) for c, e in zip(compiled, eager, strict=True)
                if c.grad is not None and e.grad is not None)
    if worst > 1e-4:
        print(f"{name}: FAULT: gradients differ from eager's (max abs difference {worst:.4g})")
        return True
    print(f"{name}: no fault")
    return False


def fill_sum() -> bool:
    """The sum of ``fill``'s result counts one element per 8-lane vector (20 ones sum to 3, 100 to 13; the mean
    of 20 is 0.15): ``fill`` alone, and the sum of ``ones_like``, are right.  op-fill-0-train's loss (the
    mean square plus the mean of ``fill(x, True)``: 0.3 where eager gives 2)."""
    torch.manual_seed(0)
    return _compare("fill-sum", lambda x: torch.fill(x, 1.0).sum(), torch.randn(20))


def leaky_relu_backward() -> bool:
    """The gradient of ``leaky_relu`` (slope 0.01): where the input is negative IREE gives 1 + 0.01 * x instead of
    0.01 (``aten.leaky_relu_backward``, which torch-mlir decomposes, is wrong on its own too).
    op-nn.functional.leaky_relu-*-train."""
    torch.manual_seed(0)
    return _compare_grads("leaky-relu-backward", lambda x: F.leaky_relu(x).sum(), torch.randn(10))


def scatter_negative_dim() -> bool:
    """``scatter`` along a negative dim (-3 of a 3-d tensor) writes other places than along dim 0 (the same dim,
    which IREE gets right): the backward of ``sort(x, -3, descending=True)`` is that scatter.  op-sort-1-train."""
    torch.manual_seed(0)
    x = torch.randn(5, 5, 5)
    indices = torch.sort(x, -3, True)[1]
    forward = _compare("scatter-negative-dim", lambda s, i: torch.zeros(5, 5, 5).scatter(-3, i, s),
                       torch.randn(5, 5, 5), indices)
    backward = _compare_grads("scatter-negative-dim (sort's backward)",
                              lambda v: torch.sort(v, -3, True)[0].square().sum(), x)
    return forward or backward


def pad_constant_backward() -> bool:
    """The backward of a constant pad is a constant pad by the negated amounts (a crop): IREE refuses it, 'expected
    offsets to be non-negative, but got -2'.  op-constant_pad_nd-*-train, op-nn.functional.pad.constant-*-train."""
    torch.manual_seed(0)
    return _compare_grads("pad-constant-backward", lambda x: F.pad(x, (2, 2)).square().sum(), torch.randn(1, 3, 3))


def as_strided_backward() -> bool:
    """The backward of ``as_strided`` is an ``as_strided_scatter`` into zeros, which IREE does not lower: with its
    zeros folded into a constant the first error names that constant, "failed to legalize operation
    'torch.vtensor.literal'" (with its base an input, a 'torch.constant.int' of its sizes).
    op-as_strided-*-train, op-as_strided.partial_views-*-train."""
    torch.manual_seed(0)
    return _compare_grads("as-strided-backward", lambda x: x.as_strided((1,), (1,), 0).square().sum(), torch.randn(1))


def as_strided_outside_view() -> bool:
    """``as_strided`` with ``storage_offset=0`` of an input that is a view starting 5 elements into its storage
    (OpInfo's partial_views sample) reads storage before the view, as torch defines it; IREE gets the input as a
    dense copy of the view, and its as_strided lowering refuses: 'aten.as_strided.default indexes outside the
    base tensor'.  op-as_strided.partial_views-1-infer (without storage_offset, -0-, it passes)."""
    torch.manual_seed(0)
    view = torch.randn(20)[5:15]
    return _compare("as-strided-outside-view", lambda x: x.as_strided((2, 2), (1, 2), 0), view)


def bfloat16_rounding() -> bool:
    """Arithmetic on a bfloat16 cast, returned as float32: IREE rounds neither the cast's operand nor the result to
    bfloat16 (``x.to(bfloat16).square().float()`` of 7.4 is 54.76, 7.4 squared in float32, where eager gives
    54.75; ``b * b`` gives 7.40625 squared unrounded).  op-bfloat16-1-train's loss, off at its call 4."""
    return _compare("bfloat16-rounding", lambda x: x.to(torch.bfloat16).square().float(),
                    torch.tensor([7.4, 1.1, -3.3]))


def tan_near_pole() -> bool:
    """``tan`` near pi/2 is off by |tan(x)| * 7e-8 relative (float32 argument reduction: ~0.6 ulp of pi/2 in the
    reduced argument): 2365 ulp at 1.5706383 (tan 6328, OpInfo's sample: max abs 1.16), 117 ulp at 1.57, 4.5 at
    1.5, where eager is within 1 ulp everywhere.  op-tan-0-infer."""
    x = torch.tensor([1.5, 1.56, 1.57, 1.5706383])
    torch._dynamo.reset()
    exact = torch.tan(x.double())
    ulp = torch.finfo(torch.float32).eps * torch.exp2(torch.floor(torch.log2(exact.abs())))
    got = torch.compile(torch.tan, backend="turbine_cpu", fullgraph=True)(x).double()
    eager = torch.tan(x).double()
    iree_ulp, eager_ulp = ((got - exact).abs() / ulp).max().item(), ((eager - exact).abs() / ulp).max().item()
    if iree_ulp > 16 * max(eager_ulp, 1.0):
        print(f"tan-near-pole: FAULT: {iree_ulp:.0f} ulp from tan of the float32 input (eager: {eager_ulp:.2f} ulp)")
        return True
    print(f"tan-near-pole: no fault ({iree_ulp:.2f} ulp)")
    return False


def fmax_size_1() -> bool:
    """fmax of a (5, 1) and a (5,) tensor (OpInfo's third sample): the same refused 'tensor.cast' as fmax-0d, of the
    size-1 operand's NaN mask, 'tensor<5x1xi1>' to the broadcast 'tensor<5x5xi1>' instead of a broadcast."""
    torch.manual_seed(0)
    return _compare("fmax-size-1", torch.fmax, torch.randn(5, 1), torch.randn(5))


def pad_constant_backward_right() -> bool:
    """The backward of a constant pad on the right only (``(0, 1)`` of a (1, 3) tensor, OpInfo's third sample): the
    crop is refused, "slice along dimension 0 runs out-of-bounds: 3 >= 3" (pad-constant-backward's other form)."""
    torch.manual_seed(0)
    return _compare_grads("pad-constant-backward-right", lambda x: F.pad(x, (0, 1), value=1.0).square().sum(),
                          torch.randn(1, 3))


def select_scatter_last_index() -> bool:
    """``select_scatter`` at index -1 writes nothing there (index -2 is right): its decomposition into a
    ``slice_scatter`` from -1 to -1 + 1 = 0 is empty.  ``select``'s backward is that scatter into zeros, so the
    gradient of ``x.select(-1, -1)`` is all zeros (OpInfo's select and select_scatter samples 2)."""
    torch.manual_seed(0)
    scatter = _compare("select-scatter-last-index", lambda x, s: torch.select_scatter(x, s, -1, -1),
                       torch.randn(5, 5, 5), torch.randn(5, 5))
    backward = _compare_grads("select-last-index-backward", lambda x: torch.select(x, -1, -1).square().sum(),
                              torch.randn(5, 5, 5))
    return scatter or backward


def trapezoid_backward() -> bool:
    """The gradient of ``trapezoid(y)`` (unit spacing, OpInfo's fourth sample): other values than eager's (max abs
    difference about 1 on six values); ``slice_scatter`` of its two shifted slices alone is right."""
    torch.manual_seed(0)
    return _compare_grads("trapezoid-backward", lambda y: torch.trapezoid(y).square().sum(), torch.randn(6))


def interpolate_nearest_size_6() -> bool:
    """interpolate(mode='nearest') of 4 columns to 6 (OpInfo's fifth sample, scale_factor 1.7 recomputed): other
    source columns than eager's; 3, 5 and 8 columns match."""
    torch.manual_seed(0)
    return _compare("interpolate-nearest-size-6", lambda x: F.interpolate(x, size=6, mode="nearest"),
                    torch.randn(2, 3, 4))


def sort_dim_minus_3_backward() -> bool:
    """The gradient of ``sort(x, dim=-3)`` of a (5, 5, 5) tensor of distinct values (OpInfo's sixth sample): other
    values than eager's while the sorted values match (op-sort-5-infer passes)."""
    torch.manual_seed(0)
    x, w = torch.randperm(125).float().reshape(5, 5, 5), torch.randn(5, 5, 5)
    return _compare_grads("sort-dim-minus-3-backward", lambda x, w: (torch.sort(x, -3).values * w).sum(), x, w)


def sort_dim_0_backward() -> bool:
    """The same sort along dim 0, the same dimension positively (the control of sort-dim-minus-3-backward)."""
    torch.manual_seed(0)
    x, w = torch.randperm(125).float().reshape(5, 5, 5), torch.randn(5, 5, 5)
    return _compare_grads("sort-dim-0-backward", lambda x, w: (torch.sort(x, 0).values * w).sum(), x, w)


def dropout_p1() -> bool:
    """dropout with p=1 in training mode (OpInfo's fifth sample): eager gives zeros, IREE NaN (0 times 1/(1-p))."""
    torch.manual_seed(0)
    return _compare("dropout-p1", lambda x: F.dropout(x, p=1.0, training=True), torch.randn(5, 5))


def masked_scatter_broadcast_input() -> bool:
    """masked_scatter of a (5,) tensor with a (5, 5) mask (the result broadcast to (5, 5), OpInfo's fourth sample):
    IREE refuses the program, "'tensor.cast' op operand type 'tensor<5x5xi64>' and result type 'tensor<5xi64>' are
    cast incompatible" (the same masked_scatter of a (5, 5) tensor compiles)."""
    torch.manual_seed(0)
    mask = torch.rand(5, 5) > 0.5
    source = torch.randn(5, 5)
    return _compare("masked-scatter-broadcast-input", lambda x: torch.masked_scatter(x, mask, source), torch.randn(5))


REPROS = {f.__name__.replace("_", "-"): f for f in (fmax_0d, pad_replicate_negative, logcumsumexp,
                                                     interpolate_nearest_exact, max_unpool1d,
                                                     embedding_bag_weighted_sum, renorm_last_dim,
                                                     max_unpool2d_padded, polar_0d_angle, chalf, fill_sum,
                                                     leaky_relu_backward, scatter_negative_dim,
                                                     pad_constant_backward, as_strided_backward,
                                                     as_strided_outside_view, bfloat16_rounding, tan_near_pole,
                                                     fmax_size_1, pad_constant_backward_right,
                                                     select_scatter_last_index, trapezoid_backward,
                                                     masked_scatter_broadcast_input, sort_dim_minus_3_backward,
                                                     dropout_p1, interpolate_nearest_size_6)}


#: the same op in a form IREE gets right, named beside a repro (run only when named)
CONTROLS = {f.__name__.replace("_", "-"): f for f in (sort_dim_0_backward,)}


def main(names: list[str]) -> int:
    known = {**REPROS, **CONTROLS}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown repro {unknown[0]!r}; one of: {', '.join(REPROS)}")
        return 2
    faults = [n for n in (names or list(REPROS)) if known[n]()]
    return 1 if faults else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
