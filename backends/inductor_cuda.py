"""``inductor-cuda``: the ``inductor`` adapter with the workload on the GPU.

Same recording of the graphs inductor lowers (so the measured bytes are held to
the lifetime model of *those* graphs), measured on the CUDA caching allocator
in requested bytes.  Without CUDA the backend is unavailable and every case is
a ``skip`` naming why.
"""

from __future__ import annotations

import torch

from conformance.api.adapter import Backend, Capabilities, CompiledStep
from conformance.api.case import Case, Workload
from conformance.probes.cpu import MemoryProbe
from conformance.probes.cuda import DOMAIN, CudaAllocatorProbe, cuda_unavailable_reason

from .inductor import InductorBackend


def move_workload(workload: Workload, device: str | torch.device) -> Workload:
    """Put the workload's module and inputs on ``device``, in place.

    In place because the engine keeps ``workload.model`` (to clear grads between
    steps): ``Module.to`` swaps parameter data but keeps the Parameter objects.
    """
    workload.model.to(device)
    workload.inputs = tuple(t.to(device) for t in workload.inputs)
    return workload


def cuda_versions() -> dict[str, str]:
    info = {"torch": torch.__version__, "cuda": str(torch.version.cuda)}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


class InductorCudaBackend(Backend):
    name = "inductor-cuda"
    capabilities = Capabilities(devices=("cuda",), memory_domains=(DOMAIN,))
    cost_weight = 6.0  # shard balancing (main's Backend.cost_weight): compiles like inductor

    def unavailable_reason(self) -> str | None:
        return cuda_unavailable_reason()

    def versions(self) -> dict[str, str]:
        return {**cuda_versions(), "inductor": torch.__version__}

    def make_probe(self) -> MemoryProbe:
        return CudaAllocatorProbe()

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        return InductorBackend().compile(case, move_workload(workload, "cuda"))
