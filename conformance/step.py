"""Deprecated path: moved to :mod:`conformance.api.step` (it warns, and is removed in 0.3.0)."""

from conformance.util.deprecation import moved

__getattr__ = moved(__name__, "conformance.api.step", __file__)
