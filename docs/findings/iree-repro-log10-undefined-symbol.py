"""Repro: IREE's llvm-cpu target cannot link ``torch.log10``: ``undefined symbol: log10f``.

Plain ``python docs/findings/iree-repro-log10-undefined-symbol.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Found by the op sweep on both IREE backends (``log10``, inference and training, every sample).  The
dispatch's ``math.log10`` is lowered to a call of libm's ``log10f``, which the embedded ELF the llvm-cpu
target links has no definition for: ``iree-lld: error: undefined symbol: log10f``, then "failed to link
executable and generate target dylib".  ``log``, ``log2`` and ``log1p`` compile and match eager.
"""

from __future__ import annotations

import torch

import iree.turbine.dynamo.backends.base  # noqa: F401  (backend="turbine_cpu", an entry point of iree-turbine)


def main() -> int:
    x = torch.rand(5, 5) + 0.5
    try:
        out = torch.compile(torch.log10, backend="turbine_cpu")(x)
    except Exception as e:  # the fault (the linker's own line is on stderr)
        print("FAULT:", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        return 1
    same = torch.allclose(out, torch.log10(x), atol=1e-6)
    print(f"log10 compiled and ran; it {'matches' if same else 'DIFFERS from'} eager")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
