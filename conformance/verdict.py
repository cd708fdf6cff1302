"""Stable public path of verdicts: ``Status``, ``Check``, ``combine`` (:mod:`conformance.api.verdict`).

Vendors and case packages import from here; the harness itself imports :mod:`conformance.api.verdict`.
The names are the same objects.
"""

from conformance.api.verdict import (
    FAILURES,
    PRECEDENCE,
    STATUSES,
    Check,
    CheckName,
    Rates,
    Status,
    combine,
    passed,
    rates,
)

__all__ = [
    "FAILURES",
    "PRECEDENCE",
    "STATUSES",
    "Check",
    "CheckName",
    "Rates",
    "Status",
    "combine",
    "passed",
    "rates",
]
