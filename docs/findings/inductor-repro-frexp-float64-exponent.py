"""Repro: inductor's C++ code for ``torch.frexp`` of a float64 tensor, its exponent cast to float32, does not compile.

Plain ``python docs/findings/inductor-repro-frexp-float64-exponent.py`` (torch only, no harness, CPU).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep in float64 (``op-frexp-0-float64-train`` on ``inductor``: ``fail-compile``,
``CppCompileError``).  The training step's loss reads the int32 exponent as a float; inductor fuses the
``frexp`` and the cast into one vectorized kernel over float64 lanes, where the exponent is a
``VectorizedN<int, 2>``, and emits ``at::vec::convert<float>(tmp)`` on it, an overload that does not exist
(g++: "no matching function for call to 'convert<float>(VectorizedN<int, 2>&)'").  No autograd is needed:
the two-line program below fails the same way.  float32 (one int vector per float vector) compiles, so does
a float64 tensor cast to int32 and then to float32 without ``frexp``, and so does a tensor too short to be
vectorized (the sweep's sample 1).  torch 2.13.0+cpu.
"""

from __future__ import annotations

import torch


def mantissa_and_exponent(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mantissa, exponent = torch.frexp(x)
    return mantissa, exponent.float()


def main() -> int:
    torch.manual_seed(0)
    failed = False
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(20, dtype=dtype)
        expected = mantissa_and_exponent(x)
        torch._dynamo.reset()
        try:
            got = torch.compile(mantissa_and_exponent, backend="inductor", fullgraph=True)(x)
        except Exception as exc:  # torch._inductor.exc.InductorError wrapping CppCompileError
            failed = failed or dtype == torch.float64
            print(f"{dtype}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            detail = next((line.strip() for line in str(exc).splitlines() if "error:" in line), "")
            print(f"    {detail[:200]}")
            continue
        same = all(torch.equal(a, b) for a, b in zip(got, expected))
        print(f"{dtype}: compiles, {'equal to' if same else 'DIFFERENT from'} eager")
        failed = failed or not same
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
