"""Embeddings and embedding bags: every call of the catalogue whose entry is in
``conformance/models/transients/embedding.py``, held to what the kernel allocates."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conformance.models.transients import kernel_transient_bytes
from conformance.probes.cpu import CpuAllocatorProbe
from tests.transients.calls import OpCall, assert_measured, calls_of, graph_of

aten = torch.ops.aten

CALLS = calls_of("embedding")


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
def test_transient_entry_is_what_the_kernel_allocates(call: OpCall) -> None:
    assert_measured(call)


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("n,offsets", [(8, (0, 4)), (9, (0, 3, 5)), (12, (0, 2, 5, 7, 11))])
def test_a_sparse_embedding_bag_backward_is_what_the_kernel_allocates(mode: int, n: int, offsets: tuple[int, ...]
                                                                      ) -> None:
    """``EmbeddingBag(sparse=True)``'s backward: its result's values are new, its indices the input's (a view);
    what it allocates beside them is the table's (the dense path's sorting buffers are not made)."""
    w, i, o = torch.randn(10, 5), torch.randint(0, 10, (n,)), torch.tensor(offsets)
    out, o2b, size, maxi = aten._embedding_bag.default(w, i, o, False, mode, True)

    def backward(g: Any, i: Any, o: Any, o2b: Any, size: Any, maxi: Any) -> Any:
        return aten._embedding_bag_backward.default(g, i, o, o2b, size, maxi, 10, False, mode, True, None)

    args = (torch.randn_like(out), i, o, o2b, size, maxi)
    node = next(n for n in graph_of(backward, args).graph.nodes if "_embedding_bag_backward" in str(n.target))
    backward(*args)
    with CpuAllocatorProbe() as probe:
        grad = backward(*args)
        assert grad.layout == torch.sparse_coo and grad._indices().data_ptr() == i.data_ptr()
        values = grad._values().untyped_storage().nbytes()
        del grad
    assert probe.trace.peak_bytes - values == kernel_transient_bytes(node)
