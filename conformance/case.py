"""Stable public path of the case API: ``Case``, ``Workload``, ``register`` (:mod:`conformance.api.case`).

Vendors and case packages import from here; the harness itself imports :mod:`conformance.api.case`.
The names are the same objects.
"""

from conformance.api.case import (
    BROKEN_PLUGINS,
    ENTRY_POINT_GROUP,
    KINDS,
    SOURCES_ENV,
    UNAVAILABLE,
    Case,
    CaseError,
    CaseKind,
    CompileMode,
    ShapeSchedule,
    Tolerance,
    Workload,
    add_resolver,
    all_cases,
    call_seed,
    load_source,
    register,
    resolve,
    select_cases,
    unavailable,
)

__all__ = [
    "BROKEN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "KINDS",
    "SOURCES_ENV",
    "UNAVAILABLE",
    "Case",
    "CaseError",
    "CaseKind",
    "CompileMode",
    "ShapeSchedule",
    "Tolerance",
    "Workload",
    "add_resolver",
    "all_cases",
    "call_seed",
    "load_source",
    "register",
    "resolve",
    "select_cases",
    "unavailable",
]
