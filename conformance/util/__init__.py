"""Helpers with no knowledge of the harness: text clipping and plurals, phase clocks.

May import: nothing of ``conformance``.
"""
