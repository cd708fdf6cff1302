"""Deprecated path: moved to :mod:`conformance.models.program` (it warns, and is removed in 0.3.0)."""

from conformance.util.deprecation import moved

__getattr__ = moved(__name__, "conformance.models.program", __file__)
