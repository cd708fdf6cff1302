"""Stable public path of the backend adapter API (:mod:`conformance.api.adapter`): ``Backend``, ``CompiledStep``.

Vendors and case packages import from here; the harness itself imports :mod:`conformance.api.adapter`.
The names are the same objects.
"""

from conformance.api.adapter import (
    CAPABILITY_NAMES,
    ENTRY_POINT_GROUP,
    Backend,
    BackendError,
    BackendRegistry,
    Capabilities,
    CompiledStep,
    CompileError,
    Fallback,
    discover,
    load_backend_class,
    validate_backend,
)

__all__ = [
    "CAPABILITY_NAMES",
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendError",
    "BackendRegistry",
    "Capabilities",
    "CompileError",
    "CompiledStep",
    "Fallback",
    "discover",
    "load_backend_class",
    "validate_backend",
]
