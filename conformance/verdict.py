"""Stable public path of verdicts: ``Status``, ``Check``, ``combine``, and the check registry
(``CheckSpec``, ``register_check``: a plugin's own check) (:mod:`conformance.api.verdict`).

Vendors and case packages import from here; the harness itself imports :mod:`conformance.api.verdict`.
The names are the same objects.
"""

from conformance.api.verdict import (
    FAILURES,
    PRECEDENCE,
    STATUSES,
    CauseFinding,
    Check,
    CheckName,
    CheckSpec,
    Rates,
    Status,
    combine,
    passed,
    rates,
    register_check,
    registered_checks,
)

__all__ = [
    "FAILURES",
    "PRECEDENCE",
    "STATUSES",
    "CauseFinding",
    "Check",
    "CheckName",
    "CheckSpec",
    "Rates",
    "Status",
    "combine",
    "passed",
    "rates",
    "register_check",
    "registered_checks",
]
