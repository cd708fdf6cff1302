"""A step Dynamo splits into graphs and eager code is held to the graphs it ran, composed in order
(:mod:`conformance.models.lifetime.split`), not to a bound over the user-level model.

Real graph-broken programs (a ``.item()`` in the forward, a data-dependent ``if``) run on inductor for
inference and for training: the clean step passes on the composed model, and each fault planted inside
the split step fails, wherever the split falls: a copy of the forward's inputs held for the step, a
buffer the size of a compiled graph's results allocated inside its call, and the results of the graphs
held only when Dynamo broke the step.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
import torch
from torch import nn

from conformance.api import dispatch
from conformance.api.case import Case, Workload
from conformance.api.step import StepOutput
from conformance.api.verdict import Status
from conformance.checks.manifest import apply, load_manifest
from conformance.checks.mechanism import SPLIT_SOURCE
from conformance.models.lifetime import ModelError
from conformance.models.lifetime.split import SplitRun, StorageKeys, model_split_step
from tests.faults import FAULTS, Fault, FaultyStep, planted

pytestmark = pytest.mark.slow


class ItemNet(nn.Module):
    """A forward that reads a value back (``.item()``): two graphs, the scalar made by eager code."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).relu()
        k = h.mean().item()
        return self.b(h * k).tanh().sum()


class BranchNet(ItemNet):
    """A data-dependent ``if``: Dynamo breaks at the branch and resumes in a graph of its own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).relu()
        if h.sum() > 0:
            h = h * 2
        return self.b(h).tanh().sum()


def _case(net: type[nn.Module], kind: Literal["inference", "train_step"]) -> Case:
    def build(seed: int) -> Workload:
        torch.manual_seed(seed)
        return Workload(net(), (torch.randn(8, 16),))

    return Case(f"my-split-{net.__name__.lower()}-{kind}", kind, "mine", 0, build)


class InputsHeld(Fault):
    """A copy of the forward's inputs (its input and the parameters) held for the whole step."""

    name, changes = "split-inputs-held", "memory"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        held = [t.detach().clone() for t in (*step.workload.inputs, *step.workload.model.parameters())]
        try:
            return step.inner.run()
        finally:
            del held


class GraphBuffer(Fault):
    """Inside each compiled graph's call, a buffer the size of its tensor arguments (the copies a runtime staging
    its inputs makes): alive while the graph runs, freed when it returns."""

    name, changes = "split-graph-buffer", "memory"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        original = dispatch.Dispatched.__call__

        def inside(self: dispatch.Dispatched, *args: Any) -> Any:
            flat = args[0] if len(args) == 1 and isinstance(args[0], list) else args
            nbytes = sum(t.untyped_storage().nbytes() for t in flat if isinstance(t, torch.Tensor))
            scratch = torch.empty(nbytes // 4)
            results = original(self, *args)
            del scratch
            return results

        dispatch.Dispatched.__call__ = inside  # type: ignore[method-assign]
        try:
            return step.inner.run()
        finally:
            dispatch.Dispatched.__call__ = original  # type: ignore[method-assign]


class ResultsHeldWhenSplit(Fault):
    """The results of every graph held to the end of the step, only where several graphs ran (a runtime that keeps
    a split step's intermediate results).  In a training step they outlive the forward, through the backward;
    in inference the frame holds a graph's results to the forward's end anyway (the composed model holds them
    so too, and the measurement agrees), so there the fault changes nothing to catch."""

    name, changes = "split-results-held", "memory"

    def run(self, step: FaultyStep, call: int) -> StepOutput:
        held: list[Any] = []
        last: list[Any] = []
        original = dispatch.Dispatched.__call__

        def keeping(self: dispatch.Dispatched, *args: Any) -> Any:
            held.extend(last)  # a graph runs after another: the step is split, the earlier results are kept
            last.clear()
            results = original(self, *args)
            last.append(results)
            return results

        dispatch.Dispatched.__call__ = keeping  # type: ignore[method-assign]
        try:
            return step.inner.run()
        finally:
            dispatch.Dispatched.__call__ = original  # type: ignore[method-assign]
            held.clear()
            last.clear()


SPLIT_FAULTS = (InputsHeld, GraphBuffer, ResultsHeldWhenSplit)


def _run(case: Case, fault: str) -> Any:
    from conformance.backends.inductor import InductorBackend
    from conformance.run.engine import RunOptions, run_case

    FAULTS.update({f.name: f for f in SPLIT_FAULTS})
    backend = InductorBackend() if fault == "none" else planted(InductorBackend, fault)()
    return run_case(case, backend, RunOptions(steps=2))


@pytest.mark.parametrize("net", [ItemNet, BranchNet])
@pytest.mark.parametrize("kind", ["inference", "train_step"])
def test_a_split_step_is_held_to_its_graphs_composed_and_planted_faults_fail(
        net: type[nn.Module], kind: Literal["inference", "train_step"]) -> None:
    case = _case(net, kind)
    clean = _run(case, "none")
    memory = clean.memory
    assert memory is not None and memory.model_source == SPLIT_SOURCE, (clean.reason, clean.notes)
    assert clean.status == Status.PASS, clean.reason
    # the composed model is the split program's own figure: no allowance beyond what it holds
    assert memory.measured_peak_bytes is not None and memory.model_peak_bytes is not None
    assert memory.measured_peak_bytes <= memory.model_peak_bytes
    manifest = load_manifest("inductor")
    for fault in SPLIT_FAULTS:
        if fault is ResultsHeldWhenSplit and kind == "inference":
            continue
        raw = _run(case, fault.name)
        assert raw.memory is not None and raw.memory.model_source == SPLIT_SOURCE, (fault.name, raw.notes)
        judged = apply(raw, manifest)
        assert judged.status == Status.FAIL_PEAK, (fault.name, judged.status, judged.reason)


def test_the_composed_model_holds_crossing_values_as_the_split_program_does() -> None:
    """Two forward graphs and their backwards, by hand: the frame holds the first graph's result until the
    forward returns, the saved value waits for its backward, the gradient between the backwards is held for
    the second backward's call, parameter gradients outlive the step."""

    def graph(fn: Any, *shapes: tuple[int, ...]) -> torch.fx.GraphModule:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx

        with FakeTensorMode():
            return make_fx(fn)(*(torch.empty(s) for s in shapes))

    fw0 = graph(lambda x, w: ((x @ w).relu(), x @ w), (4, 8), (8, 8))  # h (128 B) to the frame, saved mm (128 B)
    fw1 = graph(lambda h: ((h * 2).sum(), h), (4, 8))  # the loss; h saved
    bw1 = graph(lambda h, g: (h * 0 + g,), (4, 8), ())  # grad of h (128 B)
    bw0 = graph(lambda mm, g: ((mm * g).sum(0).expand(8, 8).clone(),), (4, 8), (4, 8))  # grad of w (256 B)
    runs = [SplitRun(fw0, False, (1, 2), (3, 4)), SplitRun(fw1, False, (3,), (5, 3)),
            SplitRun(bw1, True, (3, 6), (7,)), SplitRun(bw0, True, (4, 7), (8,))]
    split = model_split_step(runs, {1, 2})
    model = split.model
    assert not split.eager_made
    h = next(s for s in model.storages if s.producer == "fw0:relu")
    grad_h = next(s for s in model.storages if s.producer.startswith("bw2:"))
    grad_w = next(s for s in model.storages if s.producer.startswith("bw3:") and s.role == "retained")
    first_bw = next(i for i, e in enumerate(model.events) if e.startswith("bw2:"))
    assert h.death is not None and h.death >= first_bw - 1  # h: the frame's to the forward's end, then bw1's
    assert grad_h.death is not None and grad_h.death == len(model.events) - 1  # held for bw0's whole call
    assert grad_w.death is None and grad_w.nbytes == 256
    # a value no graph made and the caller does not own is eager code's: reported, not sized
    eager = model_split_step([SplitRun(fw1, False, (9,), (5, 9))], set())
    assert eager.eager_made == [9]
    # a tensor result eager code reads (not the step's output, no graph reads it), a gradient eager autograd made:
    # eager code whose values are not composed, reported
    assert model_split_step(runs, {1, 2}, returned=(5,)).eager_made == []
    assert model_split_step(runs[:1], {1, 2}, returned=(5,)).eager_made == [3, 4]  # read by no graph: eager's
    eager_grad = [*runs[:2], SplitRun(bw1, True, (3, 6), (7,)), SplitRun(bw0, True, (4, 11), (8,))]
    assert model_split_step(eager_grad, {1, 2}).eager_made == [11]
    with pytest.raises(ModelError):
        model_split_step([SplitRun(fw1, False, (1, 2), (5, 3))], {1, 2})


def test_storage_keys_follow_identity_not_addresses() -> None:
    keys = StorageKeys()
    a = torch.ones(4)
    first = keys.of([a, a[1:], 3])
    assert first[0] == first[1] and first[2] is None
    del a
    b = torch.ones(4)  # may take the freed address: a new key all the same
    assert keys.of([b])[0] != first[0]
