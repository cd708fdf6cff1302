"""Rewording every sentence blame writes changes no verdict and no mechanism.

Blame writes what it finds twice: as typed facts under their own keys (:mod:`conformance.checks.facts`) and as
a sentence for readers.  The mechanisms read the facts only, so these real pairs, run again in this process
with every one of blame's sentences written in other words, keep their verdict (raw and after the manifest),
their cause parts and their bounds, while the words readers see do change.  The pairs cover the facts blame
writes: IREE's shared result buffer and a call's transients (mlp-s-train on iree-boxed), its retained result
pack (gen-loop-3578-train), inductor's host loop (gen-loop-7808: the program check's part facts), a user's
convolution on inductor (layout-copy: the program's own buffers and their releases), and planted faults
(tests/faults.py) on eager and on inductor's generated program.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest
import torch
from torch import nn

from conformance.api.adapter import Backend, discover
from conformance.api.case import Case, Workload, select_cases
from conformance.api.result import Result
from conformance.api.verdict import Status
from conformance.checks import blame, facts
from conformance.checks.cause import cause_of
from conformance.checks.manifest import apply, load_manifest
from conformance.run.engine import RunOptions, run_case
from tests.faults import backend_classes, planted

pytestmark = pytest.mark.slow

#: every function that writes one of blame's sentences from its facts
SENTENCES = ("result_pack_sentence", "shared_buffer_sentence", "transients_sentence", "made_at_sentence",
             "death_sentence")


def _reword(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sentence in other words: its arguments reversed, behind a marker (nothing a reader could parse)."""
    for name in SENTENCES:
        def other(*args: object, _name: str = name) -> str:
            return f"<{_name} reworded> " + " ~ ".join(repr(a) for a in reversed(args))[::-1]
        for module in (blame, facts):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, other)


class _ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def _convnet() -> Case:
    return Case("my-reworded-convnet-infer", "inference", "mine", 0,
                lambda seed: Workload(_ConvNet(), (torch.randn(2, 3, 6, 6),)))


def _iree(name: str) -> Callable[[], Backend]:
    registry = discover()
    reason = registry.get("iree").unavailable_reason()
    if reason:
        pytest.skip(reason)
    return lambda: registry.get(name)


def _clean(name: str) -> Callable[[], Backend]:
    return backend_classes()[name]


def _faulty(name: str, fault: str) -> Callable[[], Backend]:
    return lambda: planted(backend_classes()[name], fault)()  # type: ignore[arg-type]


#: (case, backend as its manifest names it, how to make the backend)
PAIRS: list[tuple[Callable[[], Case], str, Callable[[], Callable[[], Backend]]]] = [
    (lambda: select_cases(["mlp-s-train"])[0], "iree-boxed", lambda: _iree("iree-boxed")),
    (lambda: select_cases(["gen-loop-3578-train"])[0], "iree-boxed", lambda: _iree("iree-boxed")),
    (lambda: select_cases(["gen-loop-7808"])[0], "inductor", lambda: _clean("inductor")),
    (_convnet, "inductor", lambda: _clean("inductor")),
    (lambda: select_cases(["mlp-s-train"])[0], "eager", lambda: _faulty("eager", "scratch-buffer")),
    (lambda: select_cases(["reg-customop-tuple-free"])[0], "inductor",
     lambda: _faulty("inductor", "inductor-pre-163227-alias")),
]


def _judged(case: Callable[[], Case], backend: str, make: Callable[[], Callable[[], Backend]]) -> Result:
    result = run_case(case(), make()(), RunOptions(steps=1))
    result.backend = backend  # a planted backend is judged against its clean backend's manifest
    return result


def _verdict(result: Result) -> tuple[object, ...]:
    cause = cause_of(result)
    applied = apply(copy.deepcopy(result), load_manifest(result.backend))
    return (result.raw_status or result.status, applied.status, applied.cause_parts, applied.new_cause_parts,
            cause.parts if cause else (), cause.shares if cause else (), cause.bounds if cause else ())


def _texts(result: Result) -> list[str]:
    """The words blame wrote for readers: each blamed entry's producer and model death."""
    return sorted(f"{b.get('producer')} | {b.get('model_death')}" for c in result.checks for b in c.blamed)


#: the keys of blame's typed facts in a blamed entry
FACT_KEYS = (facts.ResultPack.KEY, facts.SharedResultBuffer.KEY, facts.CallTransients.KEY, facts.ProgramBuffer.KEY,
             facts.Release.KEY)


@pytest.mark.parametrize("pair", range(len(PAIRS)), ids=[f"pair{i}" for i in range(len(PAIRS))])
def test_rewording_blame_changes_no_verdict_and_no_mechanism(pair: int, monkeypatch: pytest.MonkeyPatch) -> None:
    case, backend, make = PAIRS[pair]
    plain = _judged(case, backend, make)
    with monkeypatch.context() as patched:
        _reword(patched)
        reworded = _judged(case, backend, make)
        # a record read back from its JSON, as triage and fill_cause read it, judged with the new words in force
        reread = Result.from_json(json.loads(json.dumps(reworded.to_json())))
        assert _verdict(reread) == _verdict(plain)
    assert _verdict(plain)[0] != Status.PASS, plain.reason  # each pair fails, as found or planted
    assert _verdict(reworded) == _verdict(plain), (plain.reason, reworded.reason)
    written = [b for c in plain.checks for b in c.blamed if any(k in b for k in FACT_KEYS)]
    if written:  # blame wrote facts here, so its sentences were written in the other words
        assert any("reworded>" in t for t in _texts(reworded)) and _texts(reworded) != _texts(plain)
