"""Verdicts as data: one :class:`Status` type and typed :class:`Check` records.

A pair's verdict is the combination of independent checks (parity, peak,
residual, the generated program's lifetimes, backward inputs, pools, baseline),
each with its own status, reason, figures and blame.  :func:`combine` is the one
rule that turns them into the pair's status; everything downstream (summary,
report, history, manifests, repro) reads the same records, so "as expected" and
"failure" are decided here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


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


class CheckName(str, Enum):
    """The independent checks a pair's verdict is made of, in the order :func:`combine` reads them."""

    PARITY = "parity"
    RESIDUAL = "residual"
    PROGRAM = "program"  # the compiler's generated program: lifetimes and the measured timeline
    PEAK = "peak"
    BACKWARD_INPUTS = "backward-inputs"
    POOL = "pool"
    BASELINE = "baseline"

    def __str__(self) -> str:
        return self.value


#: :func:`combine`'s precedence: wrong numbers first (nothing else matters then), then a leak
#: (the residual names it more precisely than the peak it inflates), then the generated
#: program's own lifetimes, the bound on the received graphs, saved activations, pools,
#: and last the comparison with an earlier run.
PRECEDENCE: tuple[CheckName, ...] = tuple(CheckName)


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
        return cls(CheckName(data["name"]), Status.parse(data["status"]), data.get("reason", ""),
                   dict(data.get("figures") or {}), list(data.get("blamed") or []), data.get("excess_bytes"),
                   Contract.from_json(data.get("contract")))


def passed(name: CheckName, **figures: Any) -> Check:
    return Check(name, Status.PASS, "", figures)


def combine(checks: Iterable[Check]) -> Check | None:
    """The check that decides the verdict: the first failing one in :data:`PRECEDENCE` order.

    ``None`` when every check passed.  Adapters and the engine never combine
    statuses themselves; they add checks.
    """
    failing = [c for c in checks if c.failed]
    return min(failing, key=lambda c: PRECEDENCE.index(c.name), default=None)
