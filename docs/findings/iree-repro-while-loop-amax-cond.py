"""Repro: IREE cannot compile a ``while_loop`` whose condition is ``amax`` over all dims compared with a float.

Plain ``python docs/findings/iree-repro-while-loop-amax-cond.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Everything the loop reads is carried (no additional inputs, so the importer's other ``while_loop``
fault, iree-repro-while-loop-additional-inputs.py, stays out of the way).  The condition
``(i < n) & (h.abs().amax() < 1e4)`` makes iree-compile fail with "failed to legalize unresolved
target materialization from ('i1') to ('!stream.resource<*>', 'index')".  The same condition with
``h.abs().max()`` compiles and runs; so does the ``amax`` condition outside a loop.  Seen on the
generated case gen-loop-663 (iree-boxed, whose loop route carries the outer reads) and
every generated loop with a data-dependent condition; the same error shows for the inner condition
(a plain ``j < n``) of a nested loop.  Each attempt
runs in a child process (a failed in-process compile may take the process with it).
"""

from __future__ import annotations

import subprocess
import sys

CHILD = r'''
import sys
import torch
from torch._higher_order_ops.while_loop import while_loop

REDUCE = {"amax": lambda t: t.amax(), "max": lambda t: t.max()}[sys.argv[1]]


def loop(h, n):
    def cond(i, h, n):
        return (i < n) & (REDUCE(h.abs()) < 1e4)

    def body(i, h, n):
        return i + 1, torch.tanh(h + h), n.clone()

    return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h, n))[1]


args = (torch.randn(4, 8), torch.tensor(3))
with torch.no_grad():
    expected = loop(*args)
    got = torch.compile(loop, backend="iree_turbine", fullgraph=True)(*args)  # iree-turbine's own backend
err = (got - expected).abs().max().item()
print(f"max abs err vs eager: {err:.3g}")
sys.exit(0 if err < 1e-5 else 3)
'''


def attempt(reduce: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, reduce], capture_output=True, text=True, timeout=600)


def main() -> int:
    results = {}
    for reduce in ("amax", "max"):
        run = results[reduce] = attempt(reduce)
        errors = [ln.strip() for ln in (run.stdout + run.stderr).splitlines() if "error:" in ln]
        print(f"condition with {reduce}: exit status {run.returncode}; "
              f"{errors[0][:300] if errors else run.stdout.strip()}")
    return 0 if results["amax"].returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
