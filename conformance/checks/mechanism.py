"""The mechanisms' former single module: its names now live in :mod:`conformance.checks.mechanisms`, one module
per mechanism family with one registration each.  Kept so ``from conformance.checks.mechanism import ...`` goes
on working for the names it had (no vendor imports it: ``docs/vendor-guide.md``)."""

from __future__ import annotations

from conformance.checks.mechanisms import (
    EAGER_ROUNDING,
    GRAPH_BREAK_NOTE,
    LOWERING_FALLBACK,
    MECHANISMS,
    NAMES,
    SELF_BOUNDED,
    SPLIT_SOURCE,
    Evidence,
    Mechanism,
    Program,
    Recognised,
    Recogniser,
    Statement,
    channels_last,
    graph_breaks_of,
    mechanism_of,
    recognise,
    recognise_rest,
    summary,
)
from conformance.checks.mechanisms.compiler_errors import aten_op_no_lowering, pool_backward_short_list
from conformance.checks.mechanisms.extern import extern_kernel_workspace
from conformance.checks.mechanisms.fusion import fused_kernel_outputs
from conformance.checks.mechanisms.graph_break import split_values_over_model
from conformance.checks.mechanisms.held import held_in_program, result_tuple_held, unused_saved_tensor
from conformance.checks.mechanisms.layout import layout_copy
from conformance.checks.mechanisms.loops import while_loop_host_code
from conformance.checks.mechanisms.runtime import lowering_transients

__all__ = [
    "EAGER_ROUNDING", "GRAPH_BREAK_NOTE", "LOWERING_FALLBACK", "MECHANISMS", "NAMES", "SELF_BOUNDED", "SPLIT_SOURCE",
    "Evidence", "Mechanism", "Program", "Recognised", "Recogniser", "Statement", "aten_op_no_lowering",
    "channels_last", "extern_kernel_workspace", "fused_kernel_outputs", "graph_breaks_of", "held_in_program",
    "layout_copy", "lowering_transients", "mechanism_of", "pool_backward_short_list", "recognise", "recognise_rest",
    "result_tuple_held", "split_values_over_model", "summary", "unused_saved_tensor", "while_loop_host_code",
]
