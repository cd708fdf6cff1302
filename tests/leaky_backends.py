"""Adapters that pass their own pairs but leave the process changed, for tests/test_pristine.py.

Each is eager with one fault in ``compile``, the way real adapters leave state behind: a config
patch never undone, grad mode switched off, an environment variable, the default dtype, the
working directory.  Selected as ``--backend tests.leaky_backends:Name``.
"""

from __future__ import annotations

import os
import tempfile

import torch

from conformance.api.adapter import CompiledStep
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
