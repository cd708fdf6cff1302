"""Repro: iree-turbine's FX importer cannot lower a ``while_loop`` whose body reads a tensor from outside.

Plain ``python docs/findings/iree-repro-while-loop-additional-inputs.py`` (torch + iree-turbine, no
harness).  Exit status 1 while the fault shows, 0 once it is fixed.

The loop ``h <- tanh(h @ w)`` reads ``w`` (a parameter) from outside, so Dynamo/AOTAutograd pass it
to ``torch.ops.higher_order.while_loop`` as an *additional input*.  The importer
(``iree.compiler.extras.fx_importer.FxImporter._import_hop_while_loop``) gives the emitted
``torch.prim.Loop`` all carried and additional inputs as carries, but takes its result and block
types from the carried ones only, so the op fails verification ("region branch point has N
operands, but region successor needs M inputs"); turbine's in-process compile
(``Launchable.jit_compile``) then crashes with SIGSEGV.  Each attempt runs in a child process
because of that crash.

Second part: the same loop with ``w`` carried through the loop unchanged (no additional input)
compiles, runs and matches eager: the workaround the harness's ``iree-boxed`` applies to every
``while_loop`` (conformance/backends/iree_loops.py).  This is not part of the fault; it shows that
the additional inputs are the whole problem.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = r'''
import sys
import torch
from torch._higher_order_ops.while_loop import while_loop

# "iree_turbine": iree-turbine's own torch.compile backend (an entry point of the package)

torch.manual_seed(0)
w = torch.randn(16, 16) / 4


def closure_loop(h, steps):  # the body reads w from outside: an additional input
    def cond(i, h):
        return i < steps

    def body(i, h):
        return i + 1, torch.tanh(h @ w)

    return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h))[1]


def carried_only(h, steps, w0):
    def cond(i, h, w, n):
        return i < n

    def body(i, h, w, n):
        return i + 1, torch.tanh(h @ w), w.clone(), n.clone()  # clones: a body may not return its inputs

    return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h, w0, steps))[1]


h, steps = torch.randn(4, 16), torch.tensor(5)
if sys.argv[1] == "closure":
    fn, args = closure_loop, (h, steps)
else:
    fn, args = carried_only, (h, steps, w)
with torch.no_grad():
    expected = fn(*args)
    got = torch.compile(fn, backend="iree_turbine", fullgraph=True)(*args)
err = (got - expected).abs().max().item()
print(f"max abs err vs eager: {err:.3g}")
sys.exit(0 if err < 1e-5 else 3)
'''


def attempt(which: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, which], capture_output=True, text=True, timeout=600)


def main() -> int:
    closure = attempt("closure")
    verifier = [ln.strip() for ln in closure.stderr.splitlines() if "region branch point" in ln or "error:" in ln]
    print(f"while_loop with an additional input: exit status {closure.returncode}"
          + (" (SIGSEGV)" if closure.returncode == -11 else ""))
    for line in verifier[:3]:
        print(f"  {line[:300]}")
    carried = attempt("carried")
    print(f"the same loop, the outer tensors carried through unchanged: exit status {carried.returncode}; "
          f"{carried.stdout.strip()}")
    return 0 if closure.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
