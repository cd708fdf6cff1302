"""Deprecated path: moved to :mod:`conformance.models.lifetime` (it warns, and is removed in 0.3.0)."""

from conformance.util.deprecation import moved

__getattr__ = moved(__name__, "conformance.models.lifetime", __file__)
