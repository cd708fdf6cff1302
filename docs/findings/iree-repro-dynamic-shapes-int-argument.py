"""Repro: iree-turbine's own ``torch.compile`` backend cannot call a graph with dynamic dims.

Plain ``python docs/findings/iree-repro-dynamic-shapes-int-argument.py`` (torch + iree-turbine, no
harness).  Exit status 1 while the fault shows, 0 once it is fixed.

With dynamic dims (``dynamic=True``, ``mark_dynamic``, or Dynamo's automatic dynamic after a second
batch size) the graph AOTAutograd hands the backend takes the symbolic sizes as ``int`` arguments.
IREE compiles it (dynamic dims), but turbine's ``_backend`` calls it with
``launch(*[arg.data for arg in args])``, which fails on the first ``int``:
``AttributeError: 'int' object has no attribute 'data'``.  The harness's ``iree-boxed`` pushes
ints into the VM argument list as such and runs these graphs (shape-* cases pass or fail on memory only).
"""

from __future__ import annotations

import sys

import torch


def main() -> int:
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU())
    compiled = torch.compile(model, backend="iree_turbine", dynamic=True)  # iree-turbine's own backend
    failures = 0
    with torch.no_grad():
        for batch in (4, 7):
            x = torch.randn(batch, 16)
            try:
                err = (compiled(x) - model(x)).abs().max().item()
                print(f"batch {batch}: max abs err vs eager {err:.3g}")
            except Exception as exc:  # the fault: the launcher dereferences .data on an int size
                failures += 1
                print(f"batch {batch}: {type(exc).__name__}: {str(exc).splitlines()[-1][:200]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
