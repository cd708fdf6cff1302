"""What the float64 reference says about a step's rounding noise and its random values.

Two dispatch modes run around the reference's calls (:class:`conformance.checks.state.ReferenceRun`):

* :class:`RoundingNoise` moves every value the step computes by one unit in the last place of the
  case's dtype, with a seeded random sign (Monte Carlo arithmetic, Parker 1997): each op's result
  (its own rounding) and, for an op that is not elementwise, the roundings inside it.  A sum of ``n``
  terms computed in order rounds each partial sum ``S_k``; to first order its error is
  ``sum_k e_k S_k = sum_i x_i R_i`` with ``R_i = e_i + ... + e_n`` (Wilkinson's analysis of recursive
  summation): every term moved by a random walk of its own, at the partial sums' magnitude, not the
  term's.  So an op that sums terms (:data:`SUMS`: ``sum``, ``mean``, a variance, a matmul, a
  convolution and its backward) has the operand that holds its terms moved by that walk along the
  axes it sums; an op that sums inside a fused kernel (a norm, a softmax, a loss, their backwards)
  runs as its ATen decomposition, the ops a compiler lowers it to, so its inner sums are seen as
  sums; any other op that is not elementwise has its operands moved by one ulp.  How far a tensor
  moves from the unperturbed reference is the rounding noise of the computation that feeds it, at
  that computation's own scale: a long sum whose terms cancel, a gradient that is zero in exact
  arithmetic after a normalisation, a product of small and large factors, each moves by what
  rounding moves it.  Values that are only moved, never computed (copies, views, concatenations,
  indexing), are not perturbed.
* :class:`RandomValues` follows the values of ops tagged ``nondeterministic_seeded`` (``randn``,
  ``dropout``, ``bernoulli_``, ``geometric_``) and of ``empty``-like ops (undefined contents) through
  the step: every tensor computed from one of them, or written by an op that reads one, has values no
  other run need reproduce.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch._decomp import decomposition_table
from torch._ops import HigherOrderOperator
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from conformance.checks.exact_kernels import exact_op

#: ops that only move values (no arithmetic, so no rounding): their values are perturbed upstream
MOVES = frozenset({
    "clone", "copy_", "_to_copy", "cat", "stack", "contiguous", "lift_fresh_copy", "constant_pad_nd", "index",
    "index_select", "gather", "masked_fill", "masked_fill_", "repeat", "flip", "roll", "index_put", "index_put_",
    "scatter", "scatter_", "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter", "embedding",
    "_unsafe_index", "narrow_copy", "permute_copy", "transpose_copy", "expand_copy", "view_copy", "unfold_copy",
    "squeeze_copy", "unsqueeze_copy", "t_copy", "split_copy", "alias_copy", "detach_copy",
})
#: ops whose result has undefined contents
UNDEFINED = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})
#: ops that overwrite the tensor they write whatever it held
OVERWRITES = frozenset({"fill_", "zero_", "copy_"})


def _name(func: Any) -> str:
    return str(func.overloadpacket.__name__)


def _tensors(tree: Any) -> Iterator[torch.Tensor]:
    return (t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors an op writes in place (``self`` of ``add_``, ``out=``, each list of a ``_foreach_`` op)."""
    written: list[torch.Tensor] = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else args[i]
            written.extend(_tensors(value))
    return written


def _fresh(func: Any, out: Any, written: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors an op made, apart from those it wrote in place: all its results where none aliases an
    operand (``rrelu_with_noise`` writes ``noise`` and returns a new tensor), none where one does."""
    if _aliases(func):
        return []
    return [t for t in _tensors(out) if not any(t is w for w in written)]


def _aliases(func: Any) -> bool:
    """Whether the op's results alias its operands (a view, or an in-place op's result)."""
    return any(r.alias_info is not None for r in func._schema.returns)


def run_eagerly(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A higher-order op, in eager, out of any compile: torch runs one under ``torch.compile`` (skipped while a
    dispatch mode is on), and this mode is off inside its own handler."""
    return torch._dynamo.disable(func, reason="a reference's dispatch mode runs it eagerly")(*args, **kwargs)


def is_random(func: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in func.tags or _name(func) in UNDEFINED


class _StepMode(TorchDispatchMode):
    """A mode that sees a step's ops, a ``while_loop`` as one op."""

    supports_higher_order_operators = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Off while torch compiles: torch runs an eager ``while_loop`` through ``torch.compile``, which skips a
        frame run under a mode that does not ignore compile internals and remembers to skip that code on every
        later call, mode or not (torch 2.13: the next plain eager loop then fails); on when the compiled loop
        runs, so the loop reaches the handler as one op."""
        return True


def _dims(t: torch.Tensor, dim: Any) -> list[int]:
    """The axes of ``t`` a reduction's ``dim`` argument names (none, ``[]`` or a flag: all of them)."""
    if dim is None or isinstance(dim, bool) or (isinstance(dim, (list, tuple)) and not dim):
        return list(range(t.dim()))
    named = [dim] if isinstance(dim, int) else list(dim)
    return sorted({int(d) % t.dim() for d in named}) if t.dim() else []


def _reduction(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, list[int]] | None:
    """``sum``, ``mean``, a variance: the terms are ``self``, summed along ``dim``."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    return 0, _dims(args[0], args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("dims")))


def _convolution(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, list[int]] | None:
    """A convolution's output sums ``weight`` times input over the weight's input channels and kernel: the axes
    of the weight other than its output channels (dim 0; dim 1 of a transposed convolution's)."""
    weight, transposed = args[1], bool(args[6]) if len(args) > 6 else False
    return 1, [d for d in range(weight.dim()) if d != (1 if transposed else 0)]


def _terms(index: int, *dims: int) -> Any:
    """An op whose terms are operand ``index``'s elements along ``dims`` (negative: from the end)."""
    def spec(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, list[int]] | None:
        t = args[index] if len(args) > index else None
        if not isinstance(t, torch.Tensor) or not t.dim():
            return None
        return index, sorted({d % t.dim() for d in dims})
    return spec


#: ops that sum terms, by name: which positional operand holds the terms and the axes they are summed along
#: (a matmul's first operand along its inner dimension: each output sums its row's products)
SUMS: dict[str, Any] = {
    **dict.fromkeys(("sum", "mean", "nansum", "var", "std", "var_mean", "std_mean"), _reduction),
    "mm": _terms(0, 1), "bmm": _terms(0, 2), "mv": _terms(0, 1), "dot": _terms(0, 0), "vdot": _terms(0, 0),
    "addmm": _terms(1, 1), "_addmm_activation": _terms(1, 1), "baddbmm": _terms(1, 2), "addbmm": _terms(1, 0, 2),
    "addmv": _terms(1, 1), "convolution": _convolution,
}


#: the coarsest dtype a sum's partial sums are held in: a bfloat16 or float16 sum accumulates in float32 (eager's
#: CPU kernels, inductor's reductions and matmuls), so only the result rounds to the coarser dtype
ACCUMULATES_IN = torch.float32


class RoundingNoise(_StepMode):
    """Every computed floating value moved by one ulp (``eps`` relative) with a seeded random sign; the terms of a
    sum by the random walk of its partial sums' roundings."""

    def __init__(self, eps: float, seed: int) -> None:
        super().__init__()
        self.eps = eps
        self.generator = torch.Generator().manual_seed(seed)

    def _eps(self, t: torch.Tensor) -> float:
        """The ulp ``t``'s values round to: the case's dtype's, or ``t``'s own where the step computes in a
        coarser dtype than the case's (an op that casts to bfloat16 or float16: the reference computes
        there too, and its rounding is that dtype's)."""
        return max(self.eps, float(torch.finfo(t.dtype).eps))

    def _signs(self, t: torch.Tensor, eps: float) -> torch.Tensor:
        """``+-eps`` for each element of ``t``, on the CPU."""
        sign = torch.randint(0, 2, t.shape, generator=self.generator, dtype=t.dtype)
        return eps * (2 * sign - 1)

    def _move(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` times ``1 +- eps`` (a new tensor), on its own device."""
        return t * (1 + self._signs(t, self._eps(t)).to(t.device))

    def _walk(self, t: torch.Tensor, dims: list[int]) -> torch.Tensor:
        """``t``'s elements, the terms of a sum along ``dims`` (row-major order), each times ``1 + d_i + R_i``:
        ``d_i = +-eps``, the term's own rounding (as every operand of an op that is not elementwise), and
        ``R_i = e_i + ... + e_n`` with ``e_k = +-eps``, the roundings of the partial sums that include term ``i``
        (independently for each sum along the other axes).  Partial sums are held at float32's resolution at
        least (:data:`ACCUMULATES_IN`: what eager's kernels and compilers accumulate a bfloat16 sum in)."""
        if not dims or t.dim() == 0:
            return self._move(t)
        rest = [d for d in range(t.dim()) if d not in dims]
        order = rest + dims
        steps = self._signs(t, min(self._eps(t), float(torch.finfo(ACCUMULATES_IN).eps))).permute(order)
        flat = steps.reshape(*steps.shape[:len(rest)], -1)
        walk = flat.flip(-1).cumsum(-1).flip(-1).reshape(steps.shape).permute(torch.argsort(
            torch.tensor(order)).tolist())
        return t * (1 + (self._signs(t, self._eps(t)) + walk).to(t.device))

    def _moves(self, t: Any) -> bool:
        """Whether ``t`` holds values rounding would move: floating, and not all small integers (exact in the
        backend's dtype; a float tensor of 0s and 1s is often a mask an op reads as such)."""
        if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0 and t.device.type != "meta"):
            return False
        if self._eps(t) > self.eps:  # a coarser dtype than the case's: computed values are often whole numbers
            return not bool(((t == 0) | (t == 1)).all())
        return not bool(((t == t.round()) & (t.abs() <= 1 / self._eps(t))).all())

    def _operands(self, args: tuple[Any, ...], kwargs: dict[str, Any], written: list[torch.Tensor],
                  terms: tuple[int, list[int]] | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The operands moved: the terms of a sum (``terms``: operand index and axes) by their walk, every other
        one by one ulp; what the op writes is left as it is."""
        ids = {id(t) for t in written}

        def move(t: Any) -> Any:
            return self._move(t) if self._moves(t) and id(t) not in ids else t

        moved = [self._walk(a, terms[1]) if terms is not None and i == terms[0] and self._moves(a)
                 and id(a) not in ids else tree_map(move, a) for i, a in enumerate(args)]
        return tuple(moved), tree_map(move, kwargs)

    def _convolution_backward(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A convolution's backward sums three ways: the weight's and bias's gradients sum ``grad_output`` over
        the batch and every output position (its axes other than 1), the input's gradient sums the weight over
        its output channels and kernel (the axes other than the input channels'): one call per way."""
        grad_out, weight = args[0], args[2]
        transposed = bool(args[7]) if len(args) > 7 else False
        grad_args, grad_kwargs = self._operands(args, kwargs, [], (0, [d for d in range(grad_out.dim()) if d != 1]))
        by_grad = func(*grad_args, **grad_kwargs)
        weight_args, weight_kwargs = self._operands(args, kwargs, [], (2, [d for d in range(weight.dim())
                                                                           if d != (0 if transposed else 1)]))
        by_weight = func(*weight_args, **weight_kwargs)
        return (by_weight[0], by_grad[1], by_grad[2])

    def _decomposed(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``func`` run as its ATen decomposition under this mode, in the kernel's layout; ``None`` where it has
        none, the decomposition fails, or it departs from the kernel by more than one ulp of the case's dtype at
        the result's magnitude (what the floor already allows: a decomposition never widens it further)."""
        decomposition = DECOMPOSITIONS.get(func)
        if decomposition is None:
            return None

        def copies() -> tuple[Any, Any]:  # some kernels write operands their schema does not say (running stats)
            return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))

        try:
            kernel, plain = func(*copies()[0], **copies()[1]), decomposition(*copies()[0], **copies()[1])
            pairs = list(zip(_tensors(kernel), _tensors(plain), strict=True))
            if any(k.shape != d.shape or not _agrees(k, d, self._eps(k)) for k, d in pairs):
                return None
            with self:  # on the real operands: what it writes (running statistics) is written once, moved
                noisy = decomposition(*args, **kwargs)
        except Exception:  # no decomposition for these operands: the op as a whole
            return None
        with torch.no_grad():
            for t, value in zip(_tensors(kernel), list(_tensors(noisy)), strict=True):
                t.copy_(value)
        return kernel

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        func = exact_op(func, args, kwargs)  # an eager kernel below float64 precision: its formula
        if isinstance(func, HigherOrderOperator):  # its bodies' ops run without this mode: only its results move
            return tree_map(lambda t: self._move(t) if self._moves(t) else t, run_eagerly(func, args, kwargs))
        name = _name(func)
        written = _written(func, args, kwargs)
        if (name in MOVES or is_random(func) or (_aliases(func) and not written)
                or not any(True for _ in _tensors((args, kwargs)))):
            return func(*args, **kwargs)
        out = None
        if not (name.startswith("_foreach_") or torch.Tag.pointwise in func.tags or _elementwise_prim(func)):
            # not elementwise: the roundings inside it
            spec = SUMS.get(name)
            terms = spec(args, kwargs) if spec is not None else None
            try:
                if name == "convolution_backward" and not written:
                    out = self._convolution_backward(func, args, kwargs)
                elif terms is None and not written and (decomposed := self._decomposed(func, args, kwargs)) is not None:
                    return decomposed  # its own ops moved what they computed
                else:
                    out = func(*(moved := self._operands(args, kwargs, written, terms))[0], **moved[1])
            except RuntimeError:  # an operand it reads as discrete values: its result only is moved
                out = None
        if out is None:
            out = func(*args, **kwargs)
        if written:  # in place: move what it wrote, in place, and what it made besides (batch norm's outputs)
            with torch.no_grad():
                for t in written:
                    if self._moves(t):
                        t.copy_(self._move(t))
            fresh = {id(t) for t in _fresh(func, out, written)}
            return tree_map(lambda t: self._move(t) if id(t) in fresh and self._moves(t) else t, out)
        return tree_map(lambda t: self._move(t) if self._moves(t) else t, out)


#: the ATen decompositions (what a compiler lowers an op to) of the ops that are neither elementwise nor sums
DECOMPOSITIONS: dict[Any, Any] = dict(decomposition_table)


def _agrees(kernel: torch.Tensor, decomposed: torch.Tensor, eps: float) -> bool:
    """Whether a decomposition's values are the kernel's: the same non-finite elements, the others within one
    ``eps`` ulp at the kernel's magnitude."""
    if not kernel.is_floating_point() or not kernel.numel():
        return bool(torch.equal(kernel, decomposed.to(kernel.dtype)))
    k, d = kernel.double(), decomposed.double()
    finite = torch.isfinite(k)
    if not torch.equal(finite, torch.isfinite(d)) or not torch.equal(k.isnan(), d.isnan()) \
            or not torch.equal(k[finite.logical_not() & ~k.isnan()], d[finite.logical_not() & ~d.isnan()]):
        return False
    k, d = k[finite], d[finite]
    return not k.numel() or bool((k - d).abs().max() <= eps * k.abs().max())


def _elementwise_prim(func: Any) -> bool:
    """A ``prims`` op (a decomposition's) that is neither a reduction nor a sum: elementwise, or a view."""
    return getattr(func, "namespace", "") == "prims" and torch.Tag.reduction not in func.tags \
        and _name(func) not in SUMS


def _key(t: torch.Tensor) -> int | None:
    """The storage a tensor's values live in (views share it); ``None`` for a tensor with none."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return ptr or None


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of the whole storage ``t`` lives in (any layout, any dtype; NaN compares as its bits)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


#: how many other draws a random op's values are compared with before it is taken for deterministic
DRAWS = 8


def _other_draws(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[list[torch.Tensor]]:
    """What a random op makes from other seeds (on copies of what it writes; the generator's state is kept)."""
    for draw in range(1, DRAWS + 1):
        copies = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
        with torch.random.fork_rng():
            torch.manual_seed(torch.initial_seed() + draw)
            out = func(*copies[0], **copies[1])
        written = _written(func, *copies)
        yield written if written else list(_tensors(out))


class RandomValues(_StepMode):
    """Which storages hold values made from random (or undefined) values; persists across calls."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: set[int] = set()
        #: storages an ``empty``-like op made, no op has written yet: their bytes as made.  Native code may
        #: fill one outside the dispatcher (``at::tensor(int_list)`` is ``empty`` and a ``memcpy``: the
        #: lengths ``ctc_loss`` reads); bytes changed by the time an op reads them are defined values.
        self.undefined: dict[int, torch.Tensor] = {}

    def keep_only(self, kept: Iterable[torch.Tensor]) -> None:
        """Forget every storage but those of ``kept`` (what lives on between calls; other storages are freed
        and their addresses may be reused by fresh values made outside this mode)."""
        keys = {_key(t) for t in kept}
        self.storages &= {k for k in keys if k is not None}
        self.undefined = {k: v for k, v in self.undefined.items() if k in self.storages}

    def _filled_outside(self, read: Iterable[torch.Tensor]) -> None:
        """Take for defined the undefined storages among ``read`` whose bytes changed since they were made."""
        for t in read:
            key = _key(t)
            made = self.undefined.pop(key, None) if key is not None else None
            if made is not None and not torch.equal(_storage_bytes(t), made):
                self.storages.discard(key)  # type: ignore[arg-type]

    def holds_random(self, t: torch.Tensor) -> bool:
        key = _key(t)
        return key is not None and key in self.storages

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        func = exact_op(func, args, kwargs)  # an eager kernel below float64 precision: its formula
        if isinstance(func, HigherOrderOperator):  # its bodies run without this mode: random if it reads random
            out = run_eagerly(func, args, kwargs)
            if any(self.holds_random(t) for t in _tensors((args, kwargs))):
                self.storages.update(k for k in map(_key, _tensors(out)) if k is not None)
            return out
        written = _written(func, args, kwargs)
        read = list(_tensors((args, kwargs)))
        if _name(func) in OVERWRITES and written:
            read = [t for t in read if t is not written[0]]
        elif written:  # an out= argument is not read
            outs = {id(t) for i, a in enumerate(func._schema.arguments) if a.kwarg_only and a.alias_info is not None
                    and a.alias_info.is_write for t in _tensors(kwargs.get(a.name))}
            read = [t for t in read if id(t) not in outs]
        if self.undefined:
            self._filled_outside(read)
        random = any(self.holds_random(t) for t in read)
        drawn = is_random(func) and not random and _name(func) not in UNDEFINED
        before = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs)) if drawn else None
        out = func(*args, **kwargs)
        made = written + _fresh(func, out, written)
        if drawn:  # random unless no other draw changes its values (dropout with p=0, bernoulli of ones)
            assert before is not None
            random = any(not torch.equal(a, b) for other in _other_draws(func, *before)
                         for a, b in zip(made, other, strict=True))
        else:
            random = random or is_random(func)
        for t in made:
            key = _key(t)
            if key is None:
                continue
            self.undefined.pop(key, None)
            if _name(func) in UNDEFINED and not written:
                self.undefined[key] = _storage_bytes(t).clone()
            if random:
                self.storages.add(key)
            else:  # fresh values (a storage freed and reused, or overwritten): not random
                self.storages.discard(key)
        return out
