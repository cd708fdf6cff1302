"""Deprecated path: moved to :mod:`conformance.output.records` (it warns, and is removed in 0.3.0)."""

from conformance.util.deprecation import moved

__getattr__ = moved(__name__, "conformance.output.records", __file__)
