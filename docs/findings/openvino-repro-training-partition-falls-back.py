"""Repro: OpenVINO runs the forward graph of a training step in PyTorch, silently.

Plain ``python docs/findings/openvino-repro-training-partition-falls-back.py`` (torch + openvino, no harness).
Exit status 1 while the fault shows, 0 once it is fixed.

With ``options={"aot_autograd": True}`` (needed for training: without it the compiled forward returns
tensors with no autograd history), OpenVINO's partitioner puts the whole forward graph in one
``fused_0`` partition, and its conversion fails in the PyTorch frontend (``Check 'is_number(name)'
failed at src/frontends/pytorch/src/translate_session.cpp``, openvino 2026.4.1 with torch 2.13).  The
executor logs that at debug level only and runs the partition's torch graph for good
(``OpenVINOGraphModule.perm_fallback``): the values are right, and nothing tells the user that
OpenVINO did not run the step.  The harness records it (``fallbacks``).
"""

from __future__ import annotations

import sys

import torch

import openvino.torch  # noqa: F401  (registers the "openvino" backend)
from openvino.frontend.pytorch.torchdynamo import execute

model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
compiled = torch.compile(model, backend="openvino", options={"aot_autograd": True})
compiled(torch.randn(4, 8)).square().mean().backward()
fell_back = [name for gm in execute.partitioned_modules.values() for name, child in gm.named_children()
             if isinstance(child, execute.OpenVINOGraphModule) and child.perm_fallback]
print(f"partitions OpenVINO ran in PyTorch instead: {fell_back}")
sys.exit(1 if fell_back else 0)
