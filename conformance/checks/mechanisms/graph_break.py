"""A step Dynamo split at an op it cannot trace.
"""

from __future__ import annotations

from conformance.checks.mechanisms.evidence import Evidence
from conformance.checks.mechanisms.registry import mechanism
from conformance.util.text import clip

#: what crosses a split besides the step's values: the 0-d results Dynamo's eager code makes between
#: the graphs (a ``_local_scalar_dense``, the ``bool`` of an ``equal``), which no graph holds
SPLIT_SCALARS_BYTES = 64


def split_values_over_model(ev: Evidence) -> int | None:
    """The most a split step can put over its user-level model: the graphs and eager code between them
    hold nothing but the step's own values, so at worst every value it makes at once, beside the few
    scalars that cross the split (``None``: the record holds no figure of the values made)."""
    peak = ev.figures.get("model_peak_bytes")
    if not ev.model_made_bytes or not isinstance(peak, int):
        return None
    return max(0, ev.model_made_bytes - peak) + SPLIT_SCALARS_BYTES


@mechanism(
    'graph-break-split',
    50,
    "Dynamo split the step at an op it cannot trace: compiled graphs and eager "
        "code between them keep values the one user-level graph frees",
    ('a peak failure held to the user-level graph of a step Dynamo broke (a result note `Dynamo broke the step into '
     "graphs and eager code: <reason>`, one per break, Dynamo's `graph_break` counter and its `Backend compiler "
     'exception` entries): compiled graphs and eager PyTorch between them (or for the rest of the frame) keep values'
     " the one user-level graph frees (a frame's locals across the split, each graph's own saved activations). A "
     'step Dynamo broke is never held to the received graphs alone: they do not cover its eager part; it is held to '
     'its split model (the graphs it ran, composed: see *The user-level graph of any program*), and only where that '
     'cannot be composed (eager code between the graphs made a value a graph reads) to the user-level graph, where '
     'this mechanism applies. Its bound there is its own, once per pair: the graphs and eager code hold nothing but '
     "the step's values, so at worst every value the user-level model makes at once (the record's "
     '`user_model_made_bytes`, less the model peak), plus 64 B of scalars that cross the split'),
    bound=split_values_over_model,
    bound_per_pair=True,
    formula=("(only where no split model is composed) the user-level model's values made less its peak, plus 64 B of "
        'scalars, once per pair'),
)
def graph_break_split(ev: Evidence) -> str | None:
    """A step Dynamo split at an op it cannot trace (a data-dependent scalar, shape or value: ``equal``,
    ``item``, ``nonzero``, ``unique``, an output of data-dependent size): compiled graphs, each with its own
    saved activations, and eager PyTorch between them or for the rest of the frame.  No one graph is the
    step, so the pair is held to the user-level graph, whose schedule of deaths the split does not keep."""
    if ev.source != "peak" or ev.model_source != "user-graph" or not ev.graph_breaks:
        return None
    return f"Dynamo split the step ({clip(ev.graph_breaks[0], 120)}); held to the user-level graph"

