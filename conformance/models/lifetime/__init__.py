"""The reference tensor-lifetime model.

Given ATen-level FX graphs, work out when every *storage* is born (its producing
node) and when it dies (right after the last node that needs any value aliasing
it), and turn that into a live-bytes timeline with its peak and residual.

The discipline is the one an ideal executor follows, and the one
:mod:`conformance.models.interpreter` implements with real tensors: a value is held from
the node that produces it until the last node that uses it; a storage is alive
while any value that aliases it is held; graph outputs and retained tensors
survive the step; caller-owned inputs cost the step nothing.  Loops are unrolled
with the trip counts a real run observed, so the timeline is exact.

One module per concern:

* :mod:`~conformance.models.lifetime.model`: the data (storages, the model, observations);
* :mod:`~conformance.models.lifetime.sizes`: bytes from fake tensors, symbolic sizes resolved;
* :mod:`~conformance.models.lifetime.liveness`: when a value may be dropped (a pure function
  of the graph), and the reference counting that turns drops into deaths;
* :mod:`~conformance.models.lifetime.aliasing`: which storage a view or in-place result lives in;
* :mod:`~conformance.models.lifetime.loops`: ``while_loop`` unrolled with observed trip counts;
* :mod:`~conformance.models.lifetime.staging`: calling conventions (donated inputs, a staging
  backend's input copies and results allocated at the call's start);
* :mod:`~conformance.models.lifetime.graph`: the walk over a graph's nodes, dispatching to those;
* :mod:`~conformance.models.lifetime.steps`: whole steps (one graph, or forward and backward).

What eager kernels allocate inside an op is :mod:`conformance.models.transients`.
"""

from conformance.models.lifetime.liveness import HOLD_UNTIL, ModelBuilder, release_schedule
from conformance.models.lifetime.loops import WHILE_LOOP_OPS, LoopParts, is_while_loop, loop_parts
from conformance.models.lifetime.model import LifetimeModel, ModelError, Observation, Storage, op_name
from conformance.models.lifetime.sizes import bind_symbols, concrete, size_of, storage_nbytes
from conformance.models.lifetime.staging import CallingConvention
from conformance.models.lifetime.steps import GraphProgram, model_forward_backward, model_graph

__all__ = [
    "HOLD_UNTIL",
    "WHILE_LOOP_OPS",
    "CallingConvention",
    "GraphProgram",
    "LifetimeModel",
    "LoopParts",
    "ModelBuilder",
    "ModelError",
    "Observation",
    "Storage",
    "bind_symbols",
    "concrete",
    "is_while_loop",
    "loop_parts",
    "model_forward_backward",
    "model_graph",
    "op_name",
    "release_schedule",
    "size_of",
    "storage_nbytes",
]
