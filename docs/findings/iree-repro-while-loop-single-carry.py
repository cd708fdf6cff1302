"""Repro: IREE's FX importer cannot import a ``while_loop`` with a single carry.

Plain ``python docs/findings/iree-repro-while-loop-single-carry.py`` (torch + iree-turbine, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

A loop of one carry, the body written as a user writes it (returning ``(h,)``, ``[h]`` or ``h``),
fails in ``torch.compile(..., backend="iree_turbine")`` with "Could not deduce type from value info:
tensor_meta=None, val=(FakeTensor(..., size=(6, 10)),) <class 'tuple'>". The cause is in
iree-base-compiler 3.13's ``iree.compiler.extras.fx_importer`` (``_import_hop_while_loop``): the
node's value is taken as a list of results only when ``len(node_val) > 1``, so a 1-tuple goes whole
to ``node_val_to_type``. The same loop with a second carry (a trip counter) imports, compiles and runs.
``iree-boxed``'s loop route lifts a loop's outer reads into carries, so a single-carry loop that
reads a parameter imports there (and then meets iree-repro-while-loop-additional-inputs.py's entry
condition fault). Each attempt runs in a child process (a failed compile may take the process with it).
"""

from __future__ import annotations

import subprocess
import sys

CHILD = r'''
import sys
import torch
from torch._higher_order_ops.while_loop import while_loop

FORM = sys.argv[1]


def step(h):
    return h * 1.5 + torch.tanh(h)


def cond(h):
    return h.abs().max() < 1000.0


def counted_cond(i, h):
    return (i < 50) & (h.abs().max() < 1000.0)


BODIES = {"tuple": lambda h: (step(h),), "list": lambda h: [step(h)], "bare": step}


def loop(x):
    if FORM == "two carries":
        return while_loop(counted_cond, lambda i, h: (i + 1, step(h)), (torch.zeros((), dtype=torch.int64), x))[1]
    return while_loop(cond, BODIES[FORM], (x,))[0]


x = torch.randn(6, 10)
with torch.no_grad():
    expected = loop(x)
    got = torch.compile(loop, backend="iree_turbine", fullgraph=True)(x)  # iree-turbine's own backend
err = ((got - expected).abs().max() / expected.abs().max()).item()  # the carry grows to about 1e3
print(f"max abs err vs eager, relative to the result's largest: {err:.3g}")
sys.exit(0 if err < 1e-5 else 3)
'''

FORMS = ("tuple", "list", "bare", "two carries")


def attempt(form: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, form], capture_output=True, text=True, timeout=600)


def main() -> int:
    results = {}
    for form in FORMS:
        run = results[form] = attempt(form)
        said = [ln.strip() for ln in (run.stdout + run.stderr).splitlines()
                if "Could not deduce" in ln or "error:" in ln or "max abs err" in ln]
        print(f"body returning {form}: exit status {run.returncode}; {said[0][:300] if said else '(no output)'}")
    single = [results[form].returncode for form in FORMS[:3]]
    return 0 if all(code == 0 for code in single) else 1


if __name__ == "__main__":
    sys.exit(main())
