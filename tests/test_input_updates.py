"""A parameter changed in place in the forward (``Embedding(max_norm=...)`` renorms its weight under
no_grad): AOTAutograd returns the new value as a leading output, and its runtime wrapper copies it
into the parameter and drops it when the call returns.  The models drop it there too."""

from __future__ import annotations

from conformance.api.case import select_cases
from conformance.api.verdict import CheckName, Status
from conformance.backends.inductor import InductorBackend
from conformance.models.lifetime.steps import INPUT_UPDATES
from conformance.run.engine import run_case


def test_the_runtime_wrappers_copy_of_an_updated_parameter_dies_with_the_forward_call() -> None:
    (case,) = select_cases(["mod-Embedding-max_norm-train"])
    backend = InductorBackend()
    result = run_case(case, backend)
    assert result.status == Status.PASS, result.reason
    program = result.check(CheckName.PROGRAM)
    assert program is not None and program.figures["timeline"] == "exact"


def test_the_forward_graph_says_how_many_outputs_update_inputs() -> None:
    import torch
    from torch import nn
    from torch._functorch.aot_autograd import make_boxed_func

    from conformance.api.aot import AotRecorder

    def runs(gm: torch.fx.GraphModule, _: object) -> object:
        return make_boxed_func(gm.forward)

    counts = []
    for model in (nn.Embedding(10, 4, max_norm=1.0), nn.Embedding(10, 4)):
        torch._dynamo.reset()
        recorder = AotRecorder()
        torch.compile(model, backend=recorder.backend(runs))(torch.tensor([[1, 2], [3, 1]])).sum().backward()
        counts.append(next(g for g in recorder.graphs if not g.is_backward).gm.meta[INPUT_UPDATES])
    assert counts == [1, 0]
