"""Parity failures proven on the pair itself by a second run: a known wrong lowering, reduced-precision rounding.
"""

from __future__ import annotations

from collections.abc import Mapping

from conformance.checks.mechanisms.evidence import EAGER_ROUNDING, LOWERING_FALLBACK, Evidence
from conformance.checks.mechanisms.registry import mechanism


@mechanism(
    'known-lowering-defect',
    410,
    "a lowering known to be wrong in some form (the backend names it and its "
        "issue): the pair matches when only its ops run as ATen's kernels",
    ('a parity failure whose pair, run again compiled afresh with only the ops of a lowering the backend knows to be'
     " wrong on ATen's own kernels (`CompiledStep.lowering_fallbacks()`: inductor's `KNOWN_LOWERING_DEFECTS`, each "
     "named with its upstream issue, offered only where the step's received graphs call its ops), matches on every "
     "call (the parity check's figure `lowering_fallback: {outcome: pass, lowering: ...}`): that lowering computes "
     "this pair wrong; a user's own model meeting it is recognised, a wrong kernel elsewhere (still `fail` with the "
     "fallback) is not. Inductor's avg_pool backward divisor for a ceil_mode window past the padding "
     '(pytorch/pytorch#198119) is the first'),
)
def known_lowering_defect(ev: Evidence) -> str | None:
    """A parity failure that goes away when the backend runs the ops of one of its lowerings known to be wrong
    as ATen's own kernels: that lowering computes this pair wrong.  Proven on the pair itself (the engine ran it
    again, compiled afresh with only those ops falling back, and every call matched), so a user's own model
    meeting the same defect is recognised, and a wrong kernel anywhere else is not."""
    seen = ev.figures.get(LOWERING_FALLBACK) if ev.source == "parity" else None
    if not isinstance(seen, Mapping) or seen.get("outcome") != "pass" or not seen.get("lowering"):
        return None
    return f"every call matches when the backend runs these ops as ATen's kernels: {seen['lowering']}"


@mechanism(
    'reduced-precision-rounding',
    420,
    "fused kernels keep bfloat16/float16 values in float32 between ops "
        "where eager rounds after every op; the pair matches when the backend rounds as eager does",
    ("a parity failure whose pair, run again compiled afresh under the backend's eager rounding "
     "(`Backend.eager_rounding()`: inductor's `emulate_precision_casts=True`), matches on every call (the parity "
     "check's figure `eager_rounding: {outcome: pass}`): fused kernels keep bfloat16/float16 values in float32 "
     'between ops where eager rounds after each; a second run that still differs (`fail`) or cannot run (`error`) is'
     ' not this'),
)
def reduced_precision_rounding(ev: Evidence) -> str | None:
    """A parity failure that goes away when the backend rounds each bfloat16/float16 value after every op, as
    eager does: its fused kernels keep them in float32 between ops, more precise than eager, and a training
    step's state drifts from eager's by an ulp a step.  Proven on the pair itself: the engine ran it again
    under :meth:`~conformance.api.adapter.Backend.eager_rounding` and every call matched."""
    seen = ev.figures.get(EAGER_ROUNDING) if ev.source == "parity" else None
    if not isinstance(seen, Mapping) or seen.get("outcome") != "pass":
        return None
    return "every call matches when the backend rounds each reduced-precision value after every op, as eager does"

