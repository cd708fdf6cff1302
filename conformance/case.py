"""Cases: named, seeded, reproducible workloads, and the registry that finds them."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import torch

CaseKind = Literal["inference", "train_step", "loop"]
KINDS: tuple[CaseKind, ...] = ("inference", "train_step", "loop")


@dataclass
class Workload:
    """What building a case gives: a module and its inputs.

    ``model(*inputs)`` returns the outputs; for a case that trains it returns the
    scalar loss, and the step is forward, loss, backward.
    """

    model: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-4
    atol: float = 1e-5
    rmse_multiple: float = 3.0  # dynamo benchmark harness: backend RMSE <= k * eager-fp32 RMSE


@dataclass(frozen=True)
class Case:
    """A named, seeded workload.  ``build()`` is deterministic for a given ``seed``."""

    id: str
    kind: CaseKind
    family: str
    seed: int
    builder: Callable[[int], Workload] = field(repr=False, compare=False)
    trains: bool = False
    requires: frozenset[str] = frozenset()
    tolerance: Tolerance = Tolerance()
    description: str = ""
    #: Fresh inputs for the ``call``-th call of the step (1, 2, ...), from the case's seed; by
    #: default the builder's inputs drawn again with the torch seed of that call (:func:`call_seed`).
    make_inputs: Callable[[int], tuple[torch.Tensor, ...]] | None = field(default=None, repr=False, compare=False)

    def build(self) -> Workload:
        torch.manual_seed(self.seed)
        workload = self.builder(self.seed)
        workload.model.train(self.trains)
        return workload

    def inputs_for(self, call: int) -> tuple[torch.Tensor, ...]:
        """The inputs of the ``call``-th call (0: the built workload's), the same in every process.

        Every call a step makes gets fresh inputs, so a backend that returns stale results or
        corrupts state between calls cannot pass on the first call's numbers."""
        if call == 0:
            return self.build().inputs
        with torch.random.fork_rng():
            torch.manual_seed(call_seed(self.seed, call))
            if self.make_inputs is not None:
                return self.make_inputs(call)
            return self.builder(self.seed).inputs


def call_seed(seed: int, call: int) -> int:
    """The torch seed of a case's ``call``-th inputs: distinct per call, stable across processes."""
    return (seed * 1_000_003 + call * 7_919 + 1) % (2**63)


class CaseError(ValueError):
    """Bad case selection or a case that failed to build."""


_REGISTRY: dict[str, Case] = {}
#: Functions that build a case from an id nobody registered (generated cases: ``gen-dag-1234``).
_RESOLVERS: list[Callable[[str], Case | None]] = []


def add_resolver(resolver: Callable[[str], Case | None]) -> None:
    """Let ids outside the registry resolve (a generated case's id carries its seed)."""
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)


def resolve(case_id: str) -> Case | None:
    """A registered case by id, else the first resolver's case for it."""
    all_cases()
    if case_id in _REGISTRY:
        return _REGISTRY[case_id]
    return next((c for r in _RESOLVERS if (c := r(case_id)) is not None), None)


def register(case: Case) -> Case:
    if case.id in _REGISTRY:
        raise CaseError(f"case id {case.id!r} registered twice")
    if case.kind not in KINDS:
        raise CaseError(f"case {case.id}: unknown kind {case.kind!r}")
    _REGISTRY[case.id] = case
    return case


def all_cases() -> list[Case]:
    import conformance.cases  # noqa: F401  (registers the built-in cases)

    return list(_REGISTRY.values())


def select_cases(patterns: Iterable[str] = ()) -> list[Case]:
    """Cases whose id matches any glob in ``patterns`` (all when empty), in registry order."""
    cases = all_cases()
    patterns = list(patterns)
    if not patterns:
        return cases
    chosen = [c for c in cases if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(c.id, p) for c in cases)]
    resolved = [c for p in unmatched if (c := resolve(p)) is not None]
    chosen += resolved
    unmatched = [p for p in unmatched if p not in {c.id for c in resolved}]
    if unmatched:
        known = ", ".join(c.id for c in cases[:8])
        raise CaseError(f"unknown case {unmatched[0]!r} (known: {known}, ...; see 'conformance list cases')")
    return chosen
