"""Repro: IREE cannot compile a ``while_loop`` nested in another ``while_loop``'s body.

Plain ``python docs/findings/iree-repro-while-loop-nested.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

Neither loop reads anything from outside (so the importer's additional-inputs fault,
iree-repro-while-loop-additional-inputs.py, stays out of the way), and the inner condition is a
plain ``j < 2``.  ``torch.compile(backend="iree_turbine")`` fails in iree-compile with "failed to
legalize unresolved target materialization from ('i1') to ('!stream.resource<*>', 'index')", at the
inner condition's function.  Controls, each in a child process (a failed in-process compile may take
the process with it):

- ``flat``: the same arithmetic with the inner loop unrolled compiles and matches eager;
- ``guarded``: the inner loop rewritten so that its first condition is ``(k == 0) | (j < 2)`` and its
  body selects (``torch.where``) still fails: the entry condition is not folded before the stream
  conversion;
- the imported MLIR (``iree.turbine.aot.export``) compiled with ``iree.compiler`` fails the same way,
  and compiles once the inner loop's *entry* condition (the ``torch.aten.Bool.Tensor`` of the
  ``func.call @cond`` before the inner ``torch.prim.Loop``) is replaced by ``torch.constant.bool true``;
  replacing the outer loop's entry condition instead does not help.  The missing piece is the
  lowering of the device-to-host read of a loop's entry condition inside another loop (the same
  error as a top-level entry condition reducing with ``amax``:
  iree-repro-while-loop-amax-cond.py).
"""

from __future__ import annotations

import subprocess
import sys

CHILD = r'''
import re
import sys
import torch
from torch._higher_order_ops.while_loop import while_loop

VARIANT = sys.argv[1]


def nested(x):
    def outer_cond(i, h):
        return i < 3

    def outer_body(i, h):
        def inner_cond(j, g):
            return j < 2

        def inner_body(j, g):
            return j + 1, torch.tanh(g * 2)

        z = torch.zeros((), dtype=torch.int64)
        if VARIANT == "flat":
            return i + 1, torch.tanh(torch.tanh(h * 0.5 * 2) * 2)
        if VARIANT == "guarded":
            def g_cond(k, j, g):
                return (k == 0) | inner_cond(j, g)

            def g_body(k, j, g):
                go = inner_cond(j, g)
                j2, g2 = inner_body(j, g)
                return k + 1, torch.where(go, j2, j), torch.where(go, g2, g)

            return i + 1, while_loop(g_cond, g_body, (z, z.clone(), h * 0.5))[2]
        return i + 1, while_loop(inner_cond, inner_body, (z, h * 0.5))[1]

    return while_loop(outer_cond, outer_body, (torch.zeros((), dtype=torch.int64), x))[1]


if VARIANT == "mlir":  # the imported module, compiled as is and with one entry condition made constant
    from iree.compiler.tools import compile_str
    from iree.turbine import aot

    class M(torch.nn.Module):
        def forward(self, x):
            return nested(x)

    text = str(aot.export(M(), args=(torch.randn(4, 8),)).mlir_module)
    entry = r"(%\w+) = torch\.aten\.Bool\.Tensor (%\w+) : [^\n]*\n(?=[^\n]*\n\s*%\S+ = torch\.prim\.Loop)"
    entries = re.findall(entry, text)
    print(f"entry conditions before a torch.prim.Loop: {len(entries)} (outer, inner)")

    def constant(k):
        name, value = entries[k]
        return text.replace(f"{name} = torch.aten.Bool.Tensor {value}", f"{name} = torch.constant.bool true //")

    for name, text_variant in [("as imported", text), ("outer entry constant", constant(0)),
                               ("inner entry constant", constant(1))]:
        try:
            compile_str(text_variant, input_type="torch", target_backends=["llvm-cpu"])
            print(f"{name}: compiles")
        except Exception as exc:
            first = next((ln for ln in str(exc).splitlines() if "error:" in ln), str(exc)[:200])
            print(f"{name}: fails: {first.strip()[:200]}")
    sys.exit(0)

x = torch.randn(4, 8)
with torch.no_grad():
    expected = nested(x)
    got = torch.compile(nested, backend="iree_turbine", fullgraph=True)(x)  # iree-turbine's own backend
err = (got - expected).abs().max().item()
print(f"max abs err vs eager: {err:.3g}")
sys.exit(0 if err < 1e-5 else 3)
'''


def attempt(variant: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, variant], capture_output=True, text=True, timeout=600)


def main() -> int:
    results = {}
    for variant in ("nested", "flat", "guarded"):
        run = results[variant] = attempt(variant)
        errors = [ln.strip() for ln in (run.stdout + run.stderr).splitlines() if "error:" in ln]
        print(f"{variant}: exit status {run.returncode}; {errors[0][:300] if errors else run.stdout.strip()}")
    mlir = attempt("mlir")
    print(mlir.stdout.strip() or mlir.stderr.strip()[-500:])
    return 0 if results["nested"].returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
