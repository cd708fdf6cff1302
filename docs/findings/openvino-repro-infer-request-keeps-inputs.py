"""Repro: OpenVINO's cached infer request keeps the last call's input tensors alive after the step.

Plain ``python docs/findings/openvino-repro-infer-request-keeps-inputs.py`` (torch + openvino, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

``openvino.torch``'s executor keeps one infer request per partition (``execute.req_cache``) and runs it
with ``req.infer(inputs, share_inputs=True, ...)``: the request's input tensors wrap the caller's
memory, and keep it, until its next ``infer``.  In a training step the backward partitions' inputs are
the saved activations and the incoming gradients, so they outlive the step that should have freed
them (the harness's ``fail-residual`` on every ``openvino`` training pair: mlp-l-train keeps 2.6 MB).
Emptying the request cache frees them, which shows who holds them.
"""

from __future__ import annotations

import gc
import sys

import torch
from torch.multiprocessing.reductions import StorageWeakRef

import openvino.torch  # noqa: F401  (registers the "openvino" backend)
from openvino.frontend.pytorch.torchdynamo import execute

passed: list[tuple[StorageWeakRef, int]] = []
shipped = execute.openvino_execute


def recording(gm, *args, **kwargs):  # type: ignore[no-untyped-def]
    passed.extend((StorageWeakRef(a.untyped_storage()), a.untyped_storage().nbytes())
                  for a in args if isinstance(a, torch.Tensor))
    return shipped(gm, *args, **kwargs)


execute.openvino_execute = recording  # the partitions look it up in the module each call
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256))
compiled = torch.compile(model, backend="openvino", options={"aot_autograd": True})
compiled(torch.randn(64, 256)).square().mean().backward()
model.zero_grad(set_to_none=True)
gc.collect()


def alive() -> int:
    return sum(n for weak, n in passed if not weak.expired())


held = alive()
execute.req_cache.clear()
gc.collect()
print(f"bytes of the step's partition inputs alive after it: {held} (the parameters among them); "
      f"freed by emptying OpenVINO's request cache: {held - alive()}")
sys.exit(1 if held > alive() else 0)
