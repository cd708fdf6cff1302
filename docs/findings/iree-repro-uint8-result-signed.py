"""Repro: a float32 -> uint8 conversion (``Tensor.byte()``) gives values 128..255 back 256 less on IREE.

Plain ``python docs/findings/iree-repro-uint8-result-signed.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep on both IREE backends (``byte``), on a later call: OpInfo's first sample of ``byte``
holds 7.39, in range and under 128, and passes; the call's fresh sample holds 205.75, in range for
uint8, and comes back as 205 - 256 (the signless 8-bit result read as signed).  Eager gives 205, as
float64 does; a value under 128 matches.
"""

from __future__ import annotations

import torch

import iree.turbine.dynamo.backends.base  # noqa: F401  (backend="turbine_cpu", an entry point of iree-turbine)


def main() -> int:
    x = torch.tensor([7.39, 100.5, 128.0, 205.75, 255.0])
    expected = x.byte()
    out = torch.compile(lambda t: t.byte(), backend="turbine_cpu")(x)
    print("eager:", expected.tolist(), "iree:", out.tolist(), "dtype", out.dtype)
    if out.dtype != torch.uint8 or not torch.equal(out.to(torch.int64), expected.to(torch.int64)):
        print("FAULT: IREE's uint8 result differs from eager's")
        return 1
    print("no fault: IREE's uint8 result matches eager's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
