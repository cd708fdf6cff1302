"""Repros: single ops whose IREE program kills the process (SIGSEGV or SIGABRT), or whose compile never ends,
found by the op sweep.

Plain ``python docs/findings/iree-op-sweep-crashes.py NAME`` (torch + iree-turbine, no harness), NAME one
of the repros below (no NAME: all of them).  Each runs in a child process, compiled with
``torch.compile(backend="turbine_cpu")`` on the sweep's sample; a training repro also runs the backward
(the sweep's step: the mean square of the op's floating output).  Exit status 1 while a child is killed
by a signal or a compile hangs (no result within ``HANG_SECONDS``), 0 once none does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile

import torch

import iree.turbine.dynamo.backends.base  # noqa: F401  (backend="turbine_cpu", an entry point of iree-turbine)


def _step(fn, x: torch.Tensor, train: bool) -> None:  # type: ignore[no-untyped-def]
    compiled = torch.compile(fn, backend="turbine_cpu")
    if not train:
        compiled(x)
        return
    x = x.clone().requires_grad_()
    compiled(x).square().mean().backward()


def sort_train() -> None:
    """sort of 8000 values, with its backward (the sweep's op-sort-0-train; inference passes)."""
    torch.manual_seed(0)
    _step(lambda x: torch.sort(x).values, torch.randn(8000), train=True)


def topk_train() -> None:
    """topk(x, 3) of a (5, 10, 5) tensor, with its backward (op-topk-0-train)."""
    torch.manual_seed(0)
    _step(lambda x: torch.topk(x, 3).values, torch.randn(5, 10, 5), train=True)


def quantile_train() -> None:
    """quantile(x, 0.5) of a 0-d tensor, with its backward (op-quantile-*-train, nanquantile the same)."""
    _step(lambda x: torch.quantile(x, 0.5), torch.tensor(0.25), train=True)


def count_nonzero_0d() -> None:
    """count_nonzero(x, dim=0) of a 0-d tensor (op-count_nonzero-1-infer)."""
    _step(lambda x: torch.count_nonzero(x, 0), torch.tensor(0.25), train=False)


def count_nonzero_0d_last_dim() -> None:
    """count_nonzero(x, dim=-1) of a 0-d tensor (op-count_nonzero-2-infer, a later sample)."""
    _step(lambda x: torch.count_nonzero(x, -1), torch.tensor(0.25), train=False)


def scatter_add_last_dim() -> None:
    """scatter_add of a (5, 5) source into a (10, 5) tensor along dim -1 (op-scatter_add-2-infer; the same along
    dim 1, the same dim positively, runs)."""
    torch.manual_seed(0)
    index = torch.randint(0, 5, (5, 5))
    src = torch.randn(5, 5)
    _step(lambda x: torch.scatter_add(x, -1, index, src), torch.randn(10, 5), train=False)


def scatter_add_dim_1() -> None:
    """The same scatter_add along dim 1: no fault (the control of scatter-add-last-dim)."""
    torch.manual_seed(0)
    index = torch.randint(0, 5, (5, 5))
    src = torch.randn(5, 5)
    _step(lambda x: torch.scatter_add(x, 1, index, src), torch.randn(10, 5), train=False)


def topk_dim_minus_2_train() -> None:
    """topk(x, 3, dim=-2) of a (5, 10, 5) tensor, with its backward (op-topk-2-train; dim=1, the same dim
    positively, runs: op-topk-1-train)."""
    torch.manual_seed(0)
    _step(lambda x: torch.topk(x, 3, dim=-2).values, torch.randn(5, 10, 5), train=True)


def index_put_empty_mask() -> None:
    """index_put(x, (mask,), values, accumulate=True) with a boolean row mask that selects no row
    (op-index_put-3-infer: all five entries False, values of shape (5,))."""
    mask = torch.zeros(5, dtype=torch.bool)
    values = torch.randn(5)
    _step(lambda x: torch.index_put(x, (mask,), values, accumulate=True), torch.randn(5, 5), train=False)


def softmax_0d() -> None:
    """softmax of a 0-d tensor (op-softmax-5-infer, a later sample; softmin and the with_dtype variants, and the
    training steps, the same): the compiler never returns, printing "failed to get softmax result" over and over
    (a rewrite pattern that fails and is retried without end)."""
    _step(lambda x: torch.softmax(x, -1), torch.tensor(0.25), train=False)


def softmax_1d() -> None:
    """softmax of a 1-d tensor of one value: compiles and runs (the control of softmax-0d)."""
    _step(lambda x: torch.softmax(x, -1), torch.tensor([0.25]), train=False)


#: a compile that has not returned in this long is a hang (the 1-d control compiles in seconds)
HANG_SECONDS = 120

REPROS = {f.__name__.replace("_", "-"): f for f in (sort_train, topk_train, quantile_train, count_nonzero_0d,
                                                     count_nonzero_0d_last_dim,
                                                     scatter_add_last_dim, topk_dim_minus_2_train,
                                                     index_put_empty_mask, softmax_0d)}
CONTROLS = {f.__name__.replace("_", "-"): f for f in (scatter_add_dim_1, softmax_1d)}


def main(names: list[str]) -> int:
    if len(names) == 2 and names[0] == "--child":
        {**REPROS, **CONTROLS}[names[1]]()
        return 0
    unknown = [n for n in names if n not in REPROS and n not in CONTROLS]
    if unknown:
        print(f"unknown repro {unknown[0]!r}; one of: {', '.join(REPROS)}")
        return 2
    killed = 0
    for name in names or list(REPROS):
        with tempfile.TemporaryFile() as err:  # a file, not a pipe: a looping compiler prints without end
            try:
                child = subprocess.run([sys.executable, __file__, "--child", name], stdout=subprocess.DEVNULL,
                                       stderr=err, timeout=HANG_SECONDS)
            except subprocess.TimeoutExpired:  # (the child is killed)
                killed += 1
                print(f"{name}: FAULT: no result in {HANG_SECONDS} s (the compile does not end)")
                continue
            err.seek(max(0, err.seek(0, 2) - 4096))
            last = (err.read().decode(errors="replace").strip().splitlines() or [""])[-1][:200]
        if child.returncode < 0:
            killed += 1
            print(f"{name}: FAULT: killed by {signal.Signals(-child.returncode).name}")
        elif child.returncode:
            print(f"{name}: exit {child.returncode}: {last}")
        else:
            print(f"{name}: no fault")
    return 1 if killed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
