"""Repro: a float64 result of an IREE program fails at run time: its buffer has float32's byte length.

Plain ``python docs/findings/iree-repro-float64-semaphore.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep on both IREE backends: every pair whose step makes a float64 value (``double``,
``float_power``, ``to`` with ``dtype=torch.float64``, ...; 24 pairs on stock ``iree``).  The program
compiles; its call fails in the runtime, with one of two errors from run to run of this same script:
``IndexError: ... buffer_view.c: OUT_OF_RANGE; buffer view byte length 200 exceeds backing buffer byte
length 100`` (the 5x5 result viewed as float64 over a buffer of float32's size: the compiler's input
pipeline demotes float64 to float32 by default, the function's ABI still says float64), or, when the
failed call's fence is signalled again, ``ValueError: signalling fence: .../iree/async/semaphore.c:
INVALID_ARGUMENT; semaphore already signaled past 1``.  It is why the IREE adapters claim no float64
(``Capabilities.dtypes``).  Eager PyTorch and inductor run the same step.
"""

from __future__ import annotations

import torch

import iree.turbine.dynamo.backends.base  # noqa: F401  (backend="turbine_cpu", an entry point of iree-turbine)


def step(x: torch.Tensor) -> torch.Tensor:
    return x.double() * 2


def main() -> int:
    x = torch.randn(5, 5)
    try:
        out = torch.compile(step, backend="turbine_cpu")(x)
    except Exception as e:  # the fault
        print("FAULT:", type(e).__name__, str(e)[:200])
        return 1
    same = out.dtype == torch.float64 and torch.allclose(out, step(x))
    print(f"the float64 step ran; it {'matches' if same else 'DIFFERS from'} eager")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
