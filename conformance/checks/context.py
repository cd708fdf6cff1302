"""What every check is judged from: one pair's probed calls and what the engine measured beside them.

The engine builds one :class:`Judging` per pair and hands it to each registered check's ``judge``
(:func:`conformance.api.verdict.registered_checks`), so a check reads what it needs and no more;
the adapter's hooks (its findings, its own contract) run only when a check first asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from conformance.api.result import MemoryFigures
from conformance.api.verdict import Check
from conformance.checks.domains import Unobserved
from conformance.checks.judge import ProbedStep
from conformance.checks.outputs import KeptOutputs
from conformance.checks.parity import ParityReport


@dataclass
class Judging:
    """One pair's evidence, as every check's ``judge`` reads it."""

    steps: Sequence[ProbedStep]
    #: the backend's peak contract: equal to the model (eager), else at or under it plus ``slack`` bytes
    exact: bool
    slack: int
    #: what the model was built from (``received-graphs``, ``eager-trace``)
    source: str
    #: each checked call's outputs against the float64 reference
    parity: Mapping[int, ParityReport]
    #: every allocation was reported (the timeline can be compared with the program's)
    exact_domain: bool
    #: what still holds the last probed call's allocations (:func:`conformance.probes.owners.holders`)
    held_by: dict[int, list[str]] = field(default_factory=dict)
    #: the record's memory figures with the adapter's findings (its hook runs on the first call)
    memory: Callable[[], MemoryFigures] = MemoryFigures
    #: the adapter's own contract (``CompiledStep.contract_check``; its hook runs on the first call)
    adapter_check: Callable[[], Check | tuple[str, str] | None] = lambda: None
    #: the pair's memory no probe observed (:mod:`conformance.checks.domains`): its bytes are not judged
    unobserved: Sequence[Unobserved] = ()
    #: the unprobed calls' outputs, kept as a user keeps them and compared after every later call
    kept_outputs: KeptOutputs | None = None

    @property
    def program_held(self) -> bool:
        """The generated program was held to the measured timeline exactly (its own check)."""
        return self.exact_domain and any(s.program is not None for s in self.steps)
