"""Repro: OpenVINO's ``torch.compile`` backend returns every call's result in one buffer of its own.

Plain ``python docs/findings/openvino-repro-shared-output-buffer.py`` (torch + openvino, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

``openvino.torch``'s executor runs each partition with ``req.infer(..., share_inputs=True,
share_outputs=True)`` on an infer request it caches per partition, and hands back
``torch.from_numpy`` of the request's output tensors.  The next call writes its result into the same
memory, so the tensor the caller kept from call 1 holds call 2's values (same data pointer).  Every
``openvino`` inference pair with a fixed shape fails the harness's ``outputs`` check for it.
"""

from __future__ import annotations

import sys

import torch

import openvino.torch  # noqa: F401  (registers the "openvino" backend)

model = torch.nn.Linear(8, 4)
compiled = torch.compile(model, backend="openvino", options={"aot_autograd": True})
with torch.no_grad():
    first = compiled(torch.ones(2, 8))
    kept = first.clone()
    second = compiled(torch.zeros(2, 8))
overwritten = not torch.equal(first, kept)
print(f"call 1's output changed by call 2: {overwritten}; same buffer: {first.data_ptr() == second.data_ptr()}")
sys.exit(1 if overwritten else 0)
