"""Repro: in a training step, each ONNX Runtime session keeps 24 bytes it allocates in its third ``run``, for good.

``python docs/findings/onnxrt-repro-third-run-state.py`` (torch + onnxruntime + onnxscript; the ``onnxrt``
adapter's export and call, and the harness's native heap observer only to count the bytes: the script starts
itself again with it preloaded).  Exit status 1 while the behaviour shows, 0 once a session keeps nothing.

A small MLP's training step through ``aot_autograd``, its forward and backward graphs each exported with
``torch.onnx.export(..., dynamo=True)`` and run in a session as the ``onnxrt`` adapter does (CPU execution
provider, arena off, one intra-op thread), runs seven times, each step in a window of the observer
(``LD_PRELOAD``; it counts every library's malloc/new/mmap, not the interpreter's or torch's).  Step 1
compiles; steps 2, 4, 5, 6 and 7 leave nothing; step 3 leaves 2 x 24 bytes allocated inside ONNX Runtime
(onnxruntime_pybind11_state, which links it), one per session, which no later run frees (onnxruntime
1.32.0).  A session of a plain ``nn.Linear`` run on its own does not show it.  The harness sees the same
24-byte blocks in the first probed call (call 2, the third run) of every ``onnxrt`` training step.
"""

from __future__ import annotations

import os
import subprocess
import sys

if os.environ.get("CONFORMANCE_REPRO_PRELOADED") != "1":
    from conformance.probes.native_heap import worker_environment

    env = worker_environment({**os.environ, "CONFORMANCE_REPRO_PRELOADED": "1"})
    sys.exit(subprocess.run([sys.executable, __file__], env=env).returncode)

from conformance.probes import native_heap  # noqa: E402

native_heap.start_tracking()
import torch  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402

from conformance.backends.onnxrt import export_session, session_call  # noqa: E402


def compiler(gm, example_inputs):  # type: ignore[no-untyped-def]
    return session_call(export_session(gm, example_inputs), gm)


model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
compiled = torch.compile(model, backend=aot_autograd(fw_compiler=compiler))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
kept = []
for _ in range(7):
    x = torch.randn(8, 8)
    with native_heap.NativeHeapProbe() as probe:
        loss = compiled(x).square().mean()
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    kept.append(probe.trace.residual_bytes)
print("bytes each step left allocated:", kept)
sys.exit(1 if kept[2] > 0 and not any(kept[3:]) else 0)
