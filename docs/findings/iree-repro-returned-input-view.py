"""Repro: a compiled function that returns a view of its input fails in iree-turbine: "expected 0 outputs, got 1".

Plain ``python docs/findings/iree-repro-returned-input-view.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep on stock ``iree``: the views ``T``, ``H``, ``mT`` and ``mH`` (8 pairs).  AOTAutograd
hands the backend a graph that returns nothing of its own (the transposed view is regenerated from the
input outside the graph), so the compiled module has no results; the call path then asserts on the output
count it expected from Dynamo's view: ``AssertionError: expected 0 outputs, got 1``.
"""

from __future__ import annotations

import torch

import iree.turbine.dynamo.backends.base  # noqa: F401  (backend="turbine_cpu", an entry point of iree-turbine)


def step(x: torch.Tensor) -> torch.Tensor:
    return x.T


def main() -> int:
    x = torch.randn(5, 5)
    try:
        out = torch.compile(step, backend="turbine_cpu")(x)
    except AssertionError as e:  # the fault
        print("FAULT: AssertionError", str(e)[:200])
        return 1
    same = torch.equal(out, x.T)
    print(f"the view came back; it {'matches' if same else 'DIFFERS from'} eager")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
