"""IREE adapters with planted lifetime faults: the memory comparison must still catch them.

Selected as ``tests.planted_iree_backends:ClassName``; they compile exactly like
``iree-boxed`` and differ only in what their wrapper keeps alive.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from conformance.backends.iree import BoxedLaunch, CompileFn, IreeBoxedBackend, boxed_compile

KEPT: list[Any] = []


class _KeepingLaunch(BoxedLaunch):
    def __call__(self, args: list[Any]) -> Any:
        results = super().__call__(args)
        KEPT.append([r for r in results if isinstance(r, torch.Tensor)])  # never released: a leak
        return results


def keeping_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    launch = boxed_compile(gm, example_inputs)
    return _KeepingLaunch(launch.launch, launch.none_positions)


class LeakyResultsBackend(IreeBoxedBackend):
    """Keeps a reference to every result IREE returns (they live in IREE memory)."""

    name = "planted-iree-leaky-results"
    compile_graph: ClassVar[CompileFn] = staticmethod(keeping_compile)
