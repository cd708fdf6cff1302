"""The model zoo on eager: real architectures, byte-exact against the lifetime model, node by node.

For each zoo case installed here (transformers ones run on the pinned torch, so in CI;
torchvision and timm ones where ``.[models]`` is installed, ``tox -e zoo``), the eager
step is probed with its node ranges on, and every node that allocates must reach exactly
the live bytes the model gives its event (kernel transients included), besides the
step's peak and residual.  A zoo case whose library is missing is a skip that says so.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import pytest
import torch

from conformance.api.case import UNAVAILABLE, resolve
from conformance.api.step import clear_grads
from conformance.backends.eager import EagerStep
from conformance.cases.zoo import MODELS, TRANSFORMERS
from conformance.models.interpreter import GraphExecutor
from conformance.models.lifetime import LifetimeModel, model_graph
from conformance.probes.cpu import CpuAllocatorProbe, MemoryTrace

ZOO_IDS = [f"zoo-{m.name}-{mode}" for m in MODELS for mode in ("infer", "train")]
#: the transformers architectures CI holds node by node: the first three, and the two whose encoders
#: feed layer norm a transposed input and normalise weights (Whisper, Wav2Vec2); the rest are nightly's
CI_TRANSFORMERS = ("bert", "gpt2", "llama", "whisper", "wav2vec2")
CI_IDS = [i for i in ZOO_IDS if not any(i.startswith(f"zoo-{m.name}-") for m in TRANSFORMERS
                                           if m.name not in CI_TRANSFORMERS)]
NIGHTLY_IDS = [i for i in ZOO_IDS if i not in CI_IDS]


@dataclass(frozen=True)
class NodeMismatch:
    node: str
    target: str
    measured: int
    modelled: int


def _probed_eager(case_id: str) -> tuple[torch.fx.GraphModule, LifetimeModel, MemoryTrace]:
    case = resolve(case_id)
    if case is None:
        library = next(m.library for m in MODELS if case_id.startswith(f"zoo-{m.name}-"))
        pytest.skip(f"{case_id} not registered here: {UNAVAILABLE.get(f'zoo ({library})', library + ' missing')}")
    workload = case.build()
    step = EagerStep(case, workload, None)
    executor = GraphExecutor(label_ranges=False)
    with torch.no_grad():
        executor.run(step.gm, [step.state[n].detach() for n in step.param_names] + list(workload.inputs))
    model = model_graph(step.gm, executor.observation, range(1, 1 + len(step.trainable)))
    del step.run().outputs  # warm-up
    clear_grads(workload.model)
    gc.collect()
    with CpuAllocatorProbe() as probe:
        del step.run().outputs
    clear_grads(workload.model)
    return step.gm, model, probe.trace


def node_mismatches(gm: torch.fx.GraphModule, model: LifetimeModel, trace: MemoryTrace) -> list[NodeMismatch]:
    """Nodes whose measured in-op peak (live bytes after each allocation made inside the node's
    profiler range) differs from the model's live bytes during that node."""
    measured: dict[str, int] = {}
    live_after = dict(trace.timeline)  # time -> live bytes once that time's events are applied
    for a in trace.allocations:
        if a.label is not None:
            measured[a.label] = max(measured.get(a.label, 0), live_after[a.t_alloc])
    targets = {n.name: str(n.target) for n in gm.graph.nodes}
    return [NodeMismatch(event, targets.get(event, "?"), measured[event], live)
            for event, live in zip(model.events, model.live_bytes)
            if event in measured and measured[event] != live]


@pytest.mark.parametrize("case_id", CI_IDS)
def test_zoo_on_eager_is_byte_exact_node_by_node(case_id: str) -> None:
    _assert_byte_exact_node_by_node(case_id)


@pytest.mark.full(ci="tests/test_zoo.py::test_zoo_on_eager_is_byte_exact_node_by_node")
@pytest.mark.parametrize("case_id", NIGHTLY_IDS)
def test_the_other_transformers_on_eager_are_byte_exact_node_by_node(case_id: str) -> None:
    _assert_byte_exact_node_by_node(case_id)


def test_the_tiers_hold_every_zoo_case() -> None:
    assert sorted(CI_IDS + NIGHTLY_IDS) == sorted(ZOO_IDS) and len(TRANSFORMERS) >= 10
    assert not set(CI_IDS) & set(NIGHTLY_IDS)


def _assert_byte_exact_node_by_node(case_id: str) -> None:
    gm, model, trace = _probed_eager(case_id)
    bad = node_mismatches(gm, model, trace)
    assert not bad, f"{len(bad)} nodes off the model, first: {bad[:3]}"
    assert trace.peak_bytes == model.peak_bytes
    assert trace.residual_bytes == model.residual_bytes


def test_node_comparison_catches_an_unmodelled_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the flash-attention entry, the attention nodes of a transformer are off by its buffers."""
    from conformance.models import transients

    monkeypatch.delitem(transients.TABLE, "_scaled_dot_product_flash_attention_for_cpu")
    gm, model, trace = _probed_eager("zoo-bert-infer")
    bad = node_mismatches(gm, model, trace)
    assert bad and all("flash_attention" in b.target and b.measured > b.modelled for b in bad)
