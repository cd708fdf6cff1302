"""Mechanisms: what a backend does that makes a failure, recognised from the evidence.

A cause signature (:mod:`conformance.checks.cause`) names mechanisms, never kernel names, op
lists or sizes, so a known behaviour on a program nobody here wrote (a user's own ``Conv2d``)
is the same cause as on the case that first showed it, and a manifest entry can expect it on
every case (``mechanism = "layout-copy"``).

Each mechanism lives in one module of this package (or a small family of them): its recogniser, a small
pure function of one finding's :class:`Evidence` that returns why the finding is its mechanism or ``None``;
its bound's formula over the pair's own evidence; its docs line; and one registration
(:func:`~conformance.checks.mechanisms.registry.mechanism`).  :func:`recognise` asks them by precedence; the
first that answers names the mechanism.  Evidence no recogniser knows keeps its shape-free words (a new
mechanism, with its repro).
"""

from __future__ import annotations

from conformance.checks.mechanisms import (  # noqa: F401  (each module registers its mechanisms)
    compiler_errors,
    extern,
    fusion,
    graph_break,
    held,
    layout,
    loops,
    parity,
    runtime,
)
from conformance.checks.mechanisms.evidence import (
    EAGER_ROUNDING,
    GRAPH_BREAK_NOTE,
    LOWERING_FALLBACK,
    SPLIT_SOURCE,
    Evidence,
    Recogniser,
    graph_breaks_of,
)
from conformance.checks.mechanisms.program import Program, Statement, channels_last
from conformance.checks.mechanisms.registry import (
    Mechanism,
    Recognised,
    bounds_table,
    docs_table,
    mechanism_of,
    names,
    ordered,
    recognise,
    recognise_rest,
    self_bounded,
    summary,
)

#: every mechanism, asked in this order (the more specific first)
MECHANISMS: tuple[Mechanism, ...] = ordered()
NAMES = names()
#: the mechanisms whose evidence bounds each instance (Mechanism.bound): an entry expecting one needs no bound
SELF_BOUNDED = self_bounded()

__all__ = [
    "EAGER_ROUNDING", "GRAPH_BREAK_NOTE", "LOWERING_FALLBACK", "MECHANISMS", "NAMES", "SELF_BOUNDED", "SPLIT_SOURCE",
    "Evidence", "Mechanism", "Program", "Recognised", "Recogniser", "Statement", "bounds_table", "channels_last",
    "docs_table", "graph_breaks_of", "mechanism_of", "recognise", "recognise_rest", "summary",
]
