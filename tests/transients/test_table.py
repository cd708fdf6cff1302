"""The table as a whole: every entry is measured by a family's test, every call is filed under one family
with a test module of its own, and an output's storage is what its kernel allocated."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.models.transients import STORAGE_SLACK, TABLE, kernel_storage_slack, reference_kernels
from tests.transients.calls import CALLS, OpCall, family_of, graph_of, node_of

SLACK_CALLS = [c for c in CALLS if c.op in STORAGE_SLACK]


@pytest.mark.parametrize("call", SLACK_CALLS, ids=[c.name for c in SLACK_CALLS])
def test_an_outputs_storage_is_what_the_kernel_allocates(call: OpCall) -> None:
    """An output's storage in the model (its shape's, plus the slack entry) is the real one's."""
    args = call.make_args()
    gm = graph_of(call.fn, args)
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).startswith(f"aten.{call.op}.")]
    fake = node.meta["val"]
    with reference_kernels():
        real = call.fn(*args)
    for f, r in zip(fake if isinstance(fake, (tuple, list)) else (fake,), real if isinstance(real, (tuple, list))
                    else (real,), strict=True):
        assert f.untyped_storage().nbytes() + kernel_storage_slack(node, f) == r.untyped_storage().nbytes(), call.name


def test_every_slack_entry_is_measured() -> None:
    assert set(STORAGE_SLACK) <= {c.op for c in SLACK_CALLS}
    nodes = [node_of(c) for c in SLACK_CALLS if c.op == "mse_loss"]
    assert any(kernel_storage_slack(n, n.meta["val"]) for n in nodes)  # the check above can fail


def test_every_entry_is_measured_here_or_in_the_generated_programs_test() -> None:
    elementwise = {"add", "sub", "mul", "div", "rsub", "remainder", "lt", "le", "gt", "ge", "eq", "ne",
                   "add_", "sub_", "mul_", "div_", "mean", "sum"}  # tests/test_generated_eager.py
    assert set(TABLE) <= {c.op for c in CALLS} | elementwise


def test_every_family_with_calls_has_its_test_module() -> None:
    """A call filed under a family no ``test_<family>.py`` measures would be measured nowhere."""
    here = Path(__file__).parent
    families = {family_of(c.op) for c in CALLS}
    assert families == {p.stem.removeprefix("test_") for p in here.glob("test_*.py")} - {"table", "lstm"}
    package = Path(__file__).resolve().parents[2] / "conformance" / "models" / "transients"
    modules = {p.stem for p in package.glob("*.py")} - {"__init__", "common", "lstm"}
    assert families - {"composite"} == modules, "a family module whose entries no call exercises"
