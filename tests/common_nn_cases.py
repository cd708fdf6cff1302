"""A second public module collection as a ``--cases`` file: ``torch.testing._internal.common_nn``'s
``module_tests``, ``get_new_module_tests()`` and ``criterion_tests`` (the tests ``test/test_nn.py`` runs),
each an inference case (``nn-<test>-infer``) and, where it has a floating output, a training step
(``nn-<test>-train``), built in float32 as ``cases/modules.py`` builds its sweep:

    conformance run --cases tests/common_nn_cases.py --case 'nn-*' --backend eager -n 2 --out DIR

A module without parameters has its first floating input scaled by a learnable tensor of ones (so it trains);
the loss is the mean square plus the mean of every floating output.  Losses and modules with sparse gradients
step with no optimizer (``optimizer="none"``): SGD would move a criterion's input out of its domain
(``BCELoss``'s [0, 1]), and SGD's momentum buffer of a sparse gradient grows by the gradient's entries on every
step (``add_`` of sparse tensors concatenates them), which the steady-state optimizer model does not hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.testing._internal import common_nn

from conformance.api.case import Case, Workload, register


def _float32(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value.float() if value.is_floating_point() else value
    if isinstance(value, tuple | list):
        return type(value)(_float32(v) for v in value)
    return value


def _floating(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, tuple | list):
        return [t for item in out for t in _floating(item)]
    return []


class _Step(nn.Module):
    """The test's module called on its inputs (and a criterion's extra arguments); training: the loss."""

    def __init__(self, module: nn.Module, trains: bool, extra: tuple[Any, ...], scaled: torch.Size | None) -> None:
        super().__init__()
        self.module, self.trains, self.extra = module, trains, extra
        self.scale = nn.Parameter(torch.ones(scaled)) if trains and scaled is not None else None

    def forward(self, *inputs: torch.Tensor) -> Any:
        if self.scale is not None:
            first = next(i for i, t in enumerate(inputs) if t.is_floating_point())
            inputs = (*inputs[:first], inputs[first] * self.scale, *inputs[first + 1:])
        out = self.module(*inputs, *self.extra)
        if not self.trains:
            return out
        return sum((t.square().mean() + t.mean() for t in _floating(out)), torch.zeros(()))


def _tests() -> list[common_nn.TestBase]:
    tests: list[common_nn.TestBase] = []
    for kind, collection in ((common_nn.NewModuleTest, [*common_nn.module_tests, *common_nn.get_new_module_tests()]),
                             (common_nn.CriterionTest, common_nn.criterion_tests)):
        for params in collection:
            params = dict(params)
            if "constructor" not in params:
                params["constructor"] = getattr(nn, str(params.pop("module_name")))
            params.pop("decorator", None)
            tests.append(kind(**params))
    return tests


def _parts(test: common_nn.TestBase) -> tuple[nn.Module, tuple[Any, ...], tuple[Any, ...]]:
    """The test's module, inputs and extra arguments, in float32."""
    with common_nn.set_default_dtype(torch.float32):
        module = test.constructor(*test.constructor_args).float()
        raw = test._get_input()
        inputs = _float32(raw if isinstance(raw, tuple) else (raw,))
        extra: tuple[Any, ...] = ()
        if isinstance(test, common_nn.CriterionTest):
            inputs = (*inputs, _float32(test._get_target()))
            extra = tuple(_float32(test.extra_args))
    return module, tuple(inputs), extra


def _builder(test: common_nn.TestBase, trains: bool) -> Callable[[int], Workload]:
    def build(seed: int) -> Workload:
        torch.manual_seed(seed)
        module, inputs, extra = _parts(test)
        floating = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
        scaled = floating[0].shape if floating and not any(True for _ in module.parameters()) else None
        return Workload(_Step(module, trains, extra, scaled), inputs)

    return build


def register_all() -> None:
    for test in _tests():
        name = re.sub(r"[^A-Za-z0-9._+=-]", "-", test.get_name().removeprefix("test_"))
        criterion = isinstance(test, common_nn.CriterionTest)
        step = _builder(test, True)(0)
        trains = bool(step.model(*step.inputs).requires_grad)  # a complex-only step has no real loss to train
        sparse = bool(getattr(test, "has_sparse_gradients", False))
        register(Case(f"nn-{name}-infer", "inference", "common-nn", 0, _builder(test, False), in_default=False,
                      description=f"common_nn {test.get_name()}"))
        if trains:
            register(Case(f"nn-{name}-train", "train_step", "common-nn", 0, _builder(test, True), trains=True,
                          optimizer="none" if criterion or sparse else None,
                          requires=frozenset({"training"}), in_default=False,
                          description=f"common_nn {test.get_name()}, training step"))


register_all()
