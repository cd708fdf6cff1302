"""Verdicts as data: one :class:`Status` type and typed :class:`Check` records.

A pair's verdict is the combination of independent checks (parity, peak,
residual, the generated program's lifetimes, backward inputs, pools, baseline),
each with its own status, reason, figures and blame.  :func:`combine` is the one
rule that turns them into the pair's status; everything downstream (summary,
report, history, manifests, repro) reads the same records, so "as expected" and
"failure" are decided here and nowhere else.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, ClassVar, overload


class Status(str, Enum):
    """A verdict.  The values are what ``results.jsonl`` stores."""

    PASS = "pass"
    FAIL_COMPILE = "fail-compile"
    FAIL_RUN = "fail-run"
    FAIL_PARITY = "fail-parity"
    FAIL_PEAK = "fail-peak"
    FAIL_RESIDUAL = "fail-residual"
    CRASH = "crash"
    TIMEOUT = "timeout"
    SKIP = "skip"
    XFAIL = "xfail"
    XPASS = "xpass"

    def __str__(self) -> str:
        return self.value

    @property
    def is_failure(self) -> bool:
        """The backend did something wrong (before any manifest is applied)."""
        return self in _FAILURES

    @property
    def as_expected(self) -> bool:
        """A final verdict that lets a run exit 0: pass, skip, or a manifest-expected failure."""
        return self in (Status.PASS, Status.SKIP, Status.XFAIL)

    @property
    def is_unexpected(self) -> bool:
        """A final verdict that fails a run: any failure, or a manifest entry that now passes."""
        return not self.as_expected

    @property
    def is_judged(self) -> bool:
        """Counted in a pass rate: every verdict but a skip (a skipped pair says nothing of the backend)."""
        return self is not Status.SKIP

    @property
    def is_memory(self) -> bool:
        return self in (Status.FAIL_PEAK, Status.FAIL_RESIDUAL)

    @classmethod
    def parse(cls, value: str | Status) -> Status:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown status {value!r} (one of {', '.join(s.value for s in cls)})") from None


_FAILURES = frozenset({
    Status.FAIL_COMPILE, Status.FAIL_RUN, Status.FAIL_PARITY, Status.FAIL_PEAK, Status.FAIL_RESIDUAL,
    Status.CRASH, Status.TIMEOUT,
})
STATUSES: tuple[Status, ...] = tuple(Status)
FAILURES: tuple[Status, ...] = tuple(s for s in Status if s.is_failure)


@dataclass(frozen=True)
class Rates:
    """A backend's pass rate, with manifest-expected failures (xfail) shown apart from passes.

    Both are over the judged verdicts (:attr:`Status.is_judged`); ``as_expected`` counts every
    judged verdict that lets a run exit 0 (:attr:`Status.as_expected`).
    """

    judged: int
    passed: int
    xfailed: int
    as_expected: int

    @property
    def pass_rate(self) -> float:
        return self.passed / self.judged if self.judged else 0.0

    @property
    def xfail_rate(self) -> float:
        return self.xfailed / self.judged if self.judged else 0.0


def rates(counts: Mapping[str, int] | Mapping[Status, int]) -> Rates:
    """:class:`Rates` from verdict counts keyed by status (a :class:`Status` or its stored value)."""
    by_status: dict[Status, int] = {}
    for key, n in counts.items():
        status = Status.parse(key)
        by_status[status] = by_status.get(status, 0) + n
    judged = {s: n for s, n in by_status.items() if s.is_judged}
    return Rates(
        judged=sum(judged.values()),
        passed=judged.get(Status.PASS, 0),
        xfailed=judged.get(Status.XFAIL, 0),
        as_expected=sum(n for s, n in judged.items() if s.as_expected),
    )


class CheckName(str):
    """A check's name, what ``results.jsonl`` stores.  The built-in checks' names are constants here
    (adapters name the pool check); a check added as a module names itself.  Which checks exist and
    their order is the registry's (:func:`registered_checks`), never this class's."""

    PARITY: ClassVar[CheckName]
    RESIDUAL: ClassVar[CheckName]
    PROGRAM: ClassVar[CheckName]  # the compiler's generated program: lifetimes and the measured timeline
    PEAK: ClassVar[CheckName]
    BACKWARD_INPUTS: ClassVar[CheckName]
    POOL: ClassVar[CheckName]
    BASELINE: ClassVar[CheckName]

    @property
    def value(self) -> str:
        """The stored name (what the enum this class once was called its value)."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"CheckName({str.__repr__(self)})"


CheckName.PARITY = CheckName("parity")
CheckName.RESIDUAL = CheckName("residual")
CheckName.PROGRAM = CheckName("program")
CheckName.PEAK = CheckName("peak")
CheckName.BACKWARD_INPUTS = CheckName("backward-inputs")
CheckName.POOL = CheckName("pool")
CheckName.BASELINE = CheckName("baseline")


@dataclass(frozen=True)
class Contract:
    """The one quantity a memory check holds to a range, with the figures its verdict rests on.

    A record's headline (``memory.contract``) is the deciding check's contract, so the verdict
    and the numbers beside it tell one story: the check fails exactly when ``measured_bytes``
    lies outside ``[low_bytes, high_bytes]`` (``None``: unbounded on that side), and its
    ``excess_bytes`` is how far outside.  ``text`` says the rule with its figures, as the
    check's reason quotes them; ``call`` is the probed call the figures are of."""

    quantity: str
    measured_bytes: int
    low_bytes: int | None
    high_bytes: int | None
    text: str
    call: int | None = None

    @property
    def violated(self) -> bool:
        return ((self.high_bytes is not None and self.measured_bytes > self.high_bytes)
                or (self.low_bytes is not None and self.measured_bytes < self.low_bytes))

    @property
    def excess_bytes(self) -> int:
        """Bytes over the upper bound (positive), or under the lower one (negative); 0 within."""
        if self.high_bytes is not None and self.measured_bytes > self.high_bytes:
            return self.measured_bytes - self.high_bytes
        if self.low_bytes is not None and self.measured_bytes < self.low_bytes:
            return self.measured_bytes - self.low_bytes
        return 0

    @classmethod
    def from_json(cls, data: Any) -> Contract | None:
        """A stored contract; None for one a record from outside does not hold in full."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(str(data["quantity"]), int(data["measured_bytes"]), _int_or_none(data.get("low_bytes")),
                       _int_or_none(data.get("high_bytes")), str(data.get("text", "")),
                       _int_or_none(data.get("call")))
        except (KeyError, TypeError, ValueError):
            return None


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass
class Check:
    """One check's outcome with the numbers behind it.

    ``excess_bytes`` is how far a memory check is over its contract (what a manifest
    entry's ``excess`` is compared with): bytes for peak, residual and baseline; for the
    program check, the bytes it holds past their last use counted once per statement that
    does work while they are held (holding longer, not only more, changes it), plus any
    bytes the measurement departs from the program by.  ``blamed`` names what explains it;
    ``contract`` (a memory check's) is the quantity it held to a range, with its figures.
    """

    name: CheckName
    status: Status
    reason: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    blamed: list[dict[str, Any]] = field(default_factory=list)
    excess_bytes: int | None = None
    contract: Contract | None = None

    @property
    def failed(self) -> bool:
        return self.status.is_failure

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["name"] = self.name.value
        data["status"] = self.status.value
        if self.contract is None:
            del data["contract"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Check:
        return cls(CheckName(str(data["name"])), Status.parse(data["status"]), data.get("reason", ""),
                   dict(data.get("figures") or {}), list(data.get("blamed") or []), data.get("excess_bytes"),
                   Contract.from_json(data.get("contract")))


def passed(name: CheckName, **figures: Any) -> Check:
    return Check(name, Status.PASS, "", figures)


def combine(checks: Iterable[Check]) -> Check | None:
    """The check that decides the verdict: the first failing one in :data:`PRECEDENCE` order.

    ``None`` when every check passed.  Adapters and the engine never combine
    statuses themselves; they add checks.  A check no registered check names (a record
    made where its module is not loaded) comes after every registered one.
    """
    failing = [c for c in checks if c.failed]
    order = {spec.name: i for i, spec in enumerate(registered_checks())}
    return min(failing, key=lambda c: order.get(c.name, len(order)), default=None)


# --------------------------------------------------------------------------- the check registry


@dataclass(frozen=True)
class CauseFinding:
    """One finding of a deciding check in shape-free words (its cause vocabulary), with the
    entry of ``blamed`` behind it and its bytes of the excess (``None``: not split)."""

    detail: str
    entry: dict[str, Any] | None = None
    share: int | None = None


@dataclass(frozen=True)
class CheckSpec:
    """One check, as the engine, the verdict, the results schema, triage and repro all see it.

    ``precedence`` places it in :func:`combine`'s order (lower decides first); ``reads`` says what
    it is judged from.  ``judge`` is how it judges: called by the engine on every pair with the
    pair's :class:`conformance.checks.context.Judging`, it returns the check or ``None`` (nothing
    to judge there); ``None`` for a check made elsewhere (``baseline``: by comparing runs).
    ``cause`` is its cause vocabulary: the findings of a failing check (and its record) in
    shape-free words (:mod:`conformance.checks.cause`); ``None`` words it by its normalised
    reason.  ``standalone``: a standalone repro script (plain torch) can show its failure."""

    name: CheckName
    precedence: int
    reads: str
    judge: Callable[[Any], Check | None] | None = None
    cause: Callable[[Check, Any], list[CauseFinding]] | None = None
    standalone: bool = False


#: the module whose import registers the built-in checks (each a module of its own beside it): loaded
#: by name on the registry's first use, as :mod:`conformance.api.case` loads the built-in cases
BUILTIN_CHECKS = "conformance.checks.registry"
_REGISTRY: dict[str, CheckSpec] = {}
_BUILTIN_LOADED: list[bool] = []


def register_check(spec: CheckSpec) -> CheckSpec:
    """Add a check to every verdict (the engine judges it, :func:`combine` orders it, the schema
    takes its name, triage words its cause, repro knows whether a script shows it).  A second check
    of one name is an error; so is one sharing another's precedence (the order must be total)."""
    _load_builtin()
    if spec.name in _REGISTRY:
        raise ValueError(f"a check named {spec.name!r} is already registered")
    clash = next((s for s in _REGISTRY.values() if s.precedence == spec.precedence), None)
    if clash is not None:
        raise ValueError(f"check {spec.name!r}: precedence {spec.precedence} is {clash.name!r}'s")
    _REGISTRY[spec.name] = spec
    return spec


def unregister_check(name: str) -> CheckSpec | None:
    """Take a check out of the registry (a test's throwaway check); the spec it held, if any."""
    return _REGISTRY.pop(name, None)


def registered_checks() -> tuple[CheckSpec, ...]:
    """Every registered check, in precedence order."""
    _load_builtin()
    return tuple(sorted(_REGISTRY.values(), key=lambda s: s.precedence))


def check_spec(name: str) -> CheckSpec | None:
    """The registered check of that name (``None``: not registered here)."""
    _load_builtin()
    return _REGISTRY.get(name)


def _load_builtin() -> None:
    if not _BUILTIN_LOADED:
        _BUILTIN_LOADED.append(True)  # first: the built-in modules register through this registry
        importlib.import_module(BUILTIN_CHECKS)


class _Precedence(Sequence[CheckName]):
    """:func:`combine`'s order as a live sequence of names: the registry's, whatever is registered now."""

    def _names(self) -> tuple[CheckName, ...]:
        return tuple(s.name for s in registered_checks())

    @overload
    def __getitem__(self, index: int) -> CheckName: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[CheckName]: ...

    def __getitem__(self, index: int | slice) -> CheckName | Sequence[CheckName]:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[CheckName]:
        return iter(self._names())

    def __repr__(self) -> str:
        return f"PRECEDENCE{self._names()!r}"


#: :func:`combine`'s precedence, the registry's order: wrong numbers first (nothing else matters
#: then), then a leak (the residual names it more precisely than the peak it inflates), then the
#: generated program's own lifetimes, the bound on the received graphs, saved activations, pools,
#: and last the comparison with an earlier run.
PRECEDENCE: Sequence[CheckName] = _Precedence()
