"""Outputs stay valid: an output the caller kept from one call still holds its value after every later call.

A backend that writes every call's result into one buffer of its own (OpenVINO's ``share_outputs=True``) passed
parity and memory alike (each call's results were right when copied); the ``outputs`` check fails it, naming
the call that overwrote an output and the output.  Clean backends keep every kept output, and keeping them
changes none of their figures (they were allocated before every probe's window)."""

from __future__ import annotations

import pytest
import torch

from conformance.api.case import select_cases
from conformance.api.step import StepOutput, host_copies
from conformance.backends.eager import EagerBackend
from conformance.backends.inductor import InductorBackend
from conformance.checks.cause import cause_of
from conformance.checks.outputs import KeptOutputs, outputs_check
from conformance.run.engine import run_case
from tests.planted_backends import SharedOutputBackend


def _case(case_id: str):
    (case,) = select_cases([case_id])
    return case


def _outputs_check(result):
    return next(c for c in result.checks if c.name == "outputs")


@pytest.mark.parametrize("case_id", ["mlp-s-infer", "mlp-s-train"])
def test_a_backend_returning_one_buffer_every_call_fails_naming_the_call(case_id: str) -> None:
    result = run_case(_case(case_id), SharedOutputBackend())
    assert result.status == "fail-parity", result.reason
    check = _outputs_check(result)
    assert check.failed and result.reason == check.reason
    assert result.reason.startswith("call 1 overwrote call 0's output[0], which its caller still held")
    first = check.figures["overwritten"][0]
    assert (first["call"], first["output"], first["by_call"]) == (0, "output[0]", 1)
    assert {(o["call"], o["by_call"]) for o in check.figures["overwritten"]} == {(0, 1), (1, 2)}
    assert result.parity["ok"]  # every call's results were right when it returned: only looking again shows it
    cause = cause_of(result)
    assert cause is not None and cause.parts == ("outputs: an earlier call's output changed by a later call",)


@pytest.mark.parametrize("backend", [EagerBackend, InductorBackend], ids=["eager", "inductor"])
@pytest.mark.parametrize("case_id", ["mlp-s-infer", "mlp-s-train"])
def test_clean_backends_keep_every_output_valid(backend: type, case_id: str) -> None:
    result = run_case(_case(case_id), backend())
    assert result.status == "pass", result.reason
    check = _outputs_check(result)
    assert not check.failed and check.figures["overwritten"] == []
    assert check.figures["kept"] == {"0": ["output[0]"], "1": ["output[0]"]}
    assert check.figures["checked_after_calls"] == [1, 2, 3, 4]  # after call 1 and after every probed call


def test_an_output_sharing_the_steps_state_is_not_kept() -> None:
    """An output that is a parameter's storage is the state the optimizer changes on purpose: not an output the
    backend may not overwrite."""
    weight = torch.ones(3)
    kept = KeptOutputs()
    own, view = torch.arange(3.0), weight[:2]
    out = StepOutput([own, view])
    kept.keep(0, out, host_copies(out.named()), {"param[w]": weight})
    weight.add_(1)
    own.mul_(2)  # the caller's kept output changed under it
    kept.check(1)
    assert list(kept.copies[0]) == ["output[0]"]
    check = outputs_check(kept)
    assert check is not None and check.failed
    assert [(o.output, o.changed_elements, o.elements) for o in kept.overwritten] == [("output[0]", 2, 3)]


def test_bits_decide_not_values() -> None:
    """A NaN that stays the same NaN is unchanged; a 0.0 that becomes -0.0 is not (the value as stored)."""
    values = torch.tensor([float("nan"), 0.0, 1.0])
    kept = KeptOutputs()
    out = StepOutput([values])
    kept.keep(0, out, host_copies(out.named()), {})
    kept.check(1)
    assert kept.overwritten == []
    values[1] = -0.0
    kept.check(2)
    assert [(o.by_call, o.changed_elements) for o in kept.overwritten] == [(2, 1)]


class _Refused(torch.Tensor):
    """An output torch refuses to read once a later call overwrote it, as CUDA graph trees do after
    ``cudagraph_mark_step_begin`` (``_set_storage_access_error_msg``, a CUDA build's; this CPU build has none)."""

    overwritten = False

    def numpy(self, *args: object, **kwargs: object):  # type: ignore[override]
        if _Refused.overwritten:
            raise RuntimeError("Error: accessing tensor output of CUDAGraphs that has been overwritten by a "
                               "subsequent run.")
        return super().numpy(*args, **kwargs)


@pytest.mark.parametrize("declared", [True, False])
def test_a_refused_read_keeps_the_contract_only_where_the_backend_declares_it(declared: bool) -> None:
    _Refused.overwritten = False
    value = torch.arange(4.0).as_subclass(_Refused)
    kept = KeptOutputs(refused_is_kept=declared)
    out = StepOutput([value])
    kept.keep(0, out, host_copies(out.named()), {})
    _Refused.overwritten = True
    try:
        kept.check(1)
    finally:
        _Refused.overwritten = False
    check = outputs_check(kept)
    assert check is not None and check.failed is not declared
    said = kept.refused if declared else kept.overwritten
    assert [(o.call, o.by_call) for o in said] == [(0, 1)] and said[0].how.startswith("unreadable: RuntimeError")
