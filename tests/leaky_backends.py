"""Adapters that pass their own pairs but leave the process changed, for tests/test_pristine.py.

Each is eager with one fault in ``compile``, the way real adapters leave state behind: a config
patch never undone, grad mode switched off, an environment variable, the default dtype, the
working directory.  Selected as ``--backend tests.leaky_backends:Name``.
"""

from __future__ import annotations

import os
import tempfile

import torch
from example_vendor import ExampleVendorBackend, _vendor_compiler

from conformance.api.adapter import CompiledStep
from conformance.api.aot import AotRecorder, AotStep
from conformance.api.case import Case, Workload
from conformance.backends.eager import EagerBackend


class DynamoDisableBackend(EagerBackend):
    name = "leaky-dynamo-disable"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        import torch._dynamo

        torch._dynamo.config.disable = True  # a patch never undone
        return super().compile(case, workload)


class GradOffBackend(EagerBackend):
    name = "leaky-grad-off"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        step = super().compile(case, workload)
        torch.set_grad_enabled(False)
        return step


class CasesEnvBackend(EagerBackend):
    name = "leaky-cases-env"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        os.environ["CONFORMANCE_CASES"] = "no_such_vendor_module_xyz"
        return super().compile(case, workload)


class Float64Backend(EagerBackend):
    name = "leaky-float64"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        step = super().compile(case, workload)
        torch.set_default_dtype(torch.float64)
        return step


class ChdirBackend(EagerBackend):
    name = "leaky-chdir"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        here = os.getcwd()  # another directory that exists (a new one would be left in the temp dir)
        os.chdir(os.path.dirname(here) if here != os.path.dirname(here) else tempfile.gettempdir())
        return super().compile(case, workload)


class InferenceModeBackend(EagerBackend):
    """Enters inference mode and never leaves it: no setter undoes that, so the worker is recycled."""

    name = "leaky-inference-mode"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        step = super().compile(case, workload)
        mode = torch.inference_mode()
        mode.__enter__()
        _NEVER_EXITED.append(mode)  # kept alive: its guard would leave inference mode when collected
        return step


_NEVER_EXITED: list[object] = []


def _wrong_convolution_backward(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                                *args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A ``convolution_backward`` decomposition giving gradients of the wrong shape (the weight's gradient is the
    input's shape), as the one ``import openvino.torch`` registers gets one wrong."""
    return torch.zeros_like(input), torch.zeros_like(input), grad_output.sum(dim=(0, 2, 3))


class ConvDecompositionBackend(EagerBackend):
    """Registers its own (wrong) ``aten.convolution_backward`` decomposition in torch's global table at compile
    time, as ``import openvino.torch`` does, and never takes it back; its own pairs run eagerly (eager's trace
    decomposes nothing), so only whoever asks torch for decompositions afterwards gets it."""

    name = "leaky-conv-decomposition"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        from torch._decomp import register_decomposition

        register_decomposition(torch.ops.aten.convolution_backward.default)(_wrong_convolution_backward)
        return super().compile(case, workload)


class DecomposingVendorBackend(ExampleVendorBackend):
    """The example vendor, asking torch for a decomposition of ``convolution_backward`` (a backend with no kernel
    of its own for it would): torch has none, so alone it runs the op as the example vendor does."""

    name = "decomposing-vendor"
    manifest_path = None

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        from torch._decomp import get_decompositions

        step = _DecomposingStep(case, workload,
                                get_decompositions([torch.ops.aten.convolution_backward.default]))
        return step


class _DecomposingStep(AotStep):
    model_options = {"kernel_transients": True}

    def __init__(self, case: Case, workload: Workload, decompositions: dict[object, object]) -> None:
        self.recorder = AotRecorder()
        super().__init__(case, workload, self.recorder.backend(_vendor_compiler, decompositions=decompositions))


class OpRegisteringBackend(EagerBackend):
    """Defines an operator and a CPU kernel through ``torch.library`` at compile time: the dispatcher keeps them
    for the process, and no one but the library object can take them back."""

    name = "leaky-op-registration"

    def compile(self, case: Case, workload: Workload) -> CompiledStep:
        if not hasattr(torch.ops.leaky_vendor, "twice"):
            library = torch.library.Library("leaky_vendor", "DEF")
            library.define("twice(Tensor x) -> Tensor")
            library.impl("twice", lambda x: x * 2, "CPU")
            _NEVER_EXITED.append(library)
        return super().compile(case, workload)
