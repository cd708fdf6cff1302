"""The user-level graph is traced once per case and argument signature in a process, and only where
that is the graph of every call: the models built from a kept graph are those a fresh trace gives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn
from torch._higher_order_ops.while_loop import while_loop

from conformance.api import step
from conformance.api.case import Case, Workload
from conformance.run import engine


class Countdown(nn.Module):
    """A loop whose trip count is the first input's value: each call's model has its own trips."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, steps: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        def cond(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < steps

        def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(self.lin(h))

        return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h))[1]


class ItemScale(nn.Module):
    """Python reads a value (``.item()``): the graph is one call's, traced on its values."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return y * (1.0 + abs(y.mean().item()))


def _countdown(seed: int) -> Workload:
    return Workload(Countdown(), (torch.tensor(2), torch.randn(2, 8)))


def _countdown_inputs(call: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(call)
    return torch.tensor(1 + call), torch.randn(2, 8)


def _item(seed: int) -> Workload:
    return Workload(ItemScale(), (torch.randn(2, 8),))


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The ids of the cases :func:`step.trace_step` traced (the memo starts empty, and is left empty)."""
    made: list[str] = []
    real = step.trace_step

    def counting(workload: Workload, trains: bool):  # type: ignore[no-untyped-def]
        made.append(type(workload.model).__name__)
        return real(workload, trains)

    monkeypatch.setattr(step, "trace_step", counting)
    engine._USER_TRACES.clear()
    yield made
    engine._USER_TRACES.clear()


def test_a_loop_is_traced_once_and_each_call_keeps_its_own_trip_count(traces: list[str]) -> None:
    case = Case("trace-countdown", "loop", "loop", 0, _countdown, make_inputs=_countdown_inputs)
    kept = {call: engine._user_model(case, call)[:2] for call in (2, 3, 4)}
    assert traces == ["Countdown"]
    assert [kept[c][1].trip_counts for c in (2, 3, 4)] == [[3], [4], [5]]
    for call in (2, 3, 4):  # the same models as a fresh trace of each call
        engine._USER_TRACES.clear()
        model, observation, _ = engine._user_model(case, call)
        assert observation.trip_counts == kept[call][1].trip_counts
        assert (model.events, model.live_bytes) == (kept[call][0].events, kept[call][0].live_bytes)
        assert model.residual_bytes == kept[call][0].residual_bytes


def test_a_step_traced_on_its_values_is_traced_again_for_every_call(traces: list[str]) -> None:
    case = Case("trace-item", "inference", "inference", 0, _item)
    for call in (2, 3, 4):
        assert engine._user_model(case, call)[2]  # depends on data
    assert traces == ["ItemScale"] * 3


def test_a_case_is_its_object_not_its_id(traces: list[str]) -> None:
    """A shrink's candidates, and a loop family at two trip counts, share an id with other builders."""
    first = Case("trace-same-id", "loop", "loop", 0, _countdown, make_inputs=_countdown_inputs)
    second = Case("trace-same-id", "loop", "loop", 0, _countdown, make_inputs=_countdown_inputs)
    engine._user_model(first, 2)
    engine._user_model(second, 2)
    engine._user_model(first, 3)
    assert traces == ["Countdown", "Countdown"]
