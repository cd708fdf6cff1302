"""Statement spans: an opaque op's own allocations are the op's, with or without a profiler range."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import torch

from conformance.probes.cpu import Allocation, CpuAllocatorProbe, MemoryTrace
from conformance.probes.statements import Statement, StatementSpans, StatementTracer, attribute

# A stand-in for a generated wrapper: `opaque` is called the way a wrapper calls a custom op made
# with torch.library.custom_op on torch >= 2.14, with no operator range of its own around it.
OPAQUE = textwrap.dedent(
    """
    def opaque(x):
        scratch = x * 2.0          # made and freed inside the call: the op's own
        return scratch.sum(0).repeat(2)
    """
)

PROGRAM = textwrap.dedent(
    """
    import torch

    kept = []

    def call(x):
        buf0 = opaque(x)
        buf1 = torch.empty(1000)
        kept.append(torch.empty(300))   # made in one statement, never freed: not a transient
        del buf0
        return buf1
    """
)


def _load(tmp_path: Path) -> tuple[Any, str]:
    """The program, and the op it calls from a file of its own (as a custom op's body is)."""
    op_path, path = tmp_path / "ops.py", tmp_path / "wrapper_module.py"
    op_path.write_text(OPAQUE)
    path.write_text(PROGRAM)
    ops: dict[str, Any] = {"__name__": "ops"}
    exec(compile(OPAQUE, str(op_path), "exec"), ops)
    namespace: dict[str, Any] = {"__name__": "wrapper_module", "opaque": ops["opaque"]}
    exec(compile(PROGRAM, str(path), "exec"), namespace)
    return namespace, str(path)


def _run(namespace: dict[str, Any], files: set[str]) -> MemoryTrace:
    x = torch.randn(64, 32)
    with CpuAllocatorProbe() as probe, StatementTracer(files) as tracer:
        out = namespace["call"](x)
        del out
    namespace["kept"].clear()
    return attribute(probe.trace, tracer.spans)


def _by_size(trace: MemoryTrace, nbytes: int) -> Allocation:
    (found,) = [a for a in trace.allocations if a.nbytes == nbytes]
    return found


def test_an_ops_own_allocations_are_set_apart_by_the_statement_that_calls_it(tmp_path: Path) -> None:
    namespace, path = _load(tmp_path)
    trace = _run(namespace, {path})
    scratch = _by_size(trace, 64 * 32 * 4)
    assert scratch.transient_in is not None and scratch.transient_in.startswith("wrapper line 7: buf0 = opaque(x)")
    # the program's own buffers: freed in a later statement, returned, or kept, are never set apart
    assert _by_size(trace, 32 * 4).transient_in is not None  # the sum, freed inside too
    assert _by_size(trace, 2 * 32 * 4).transient_in is None  # buf0 (the op's result), freed by `del buf0`
    assert _by_size(trace, 4000).transient_in is None  # buf1, returned and freed by the caller
    assert _by_size(trace, 1200).transient_in is None  # kept: allocated by one statement, never freed there


def test_without_the_programs_files_nothing_is_attributed(tmp_path: Path) -> None:
    namespace, _ = _load(tmp_path)
    trace = _run(namespace, set())
    assert _by_size(trace, 64 * 32 * 4).transient_in is None


def test_a_span_owns_only_what_it_both_allocates_and_frees() -> None:
    spans = StatementSpans()
    a, b = Statement("w.py", 3), Statement("w.py", 4)
    spans.mark(100, a)
    spans.mark(200, b)
    spans.mark(300, None)  # back outside the program
    assert spans.owner(110, 190) == a
    assert spans.owner(110, 210) is None  # freed by the next statement: the program's
    assert spans.owner(110, None) is None  # never freed
    assert spans.owner(310, 320) is None  # outside any statement
    assert spans.owner(50, 60) is None  # before the program ran


def test_an_operator_transient_keeps_its_operator() -> None:
    spans = StatementSpans([0], [Statement("w.py", 1)])
    trace = MemoryTrace("torch-cpu", [Allocation(1, 8, 10, 20, transient_in="aten::mm"), Allocation(2, 8, 10, 20)])
    marked = attribute(trace, spans)
    assert [a.transient_in for a in marked.allocations] == ["aten::mm", "wrapper line 1"]
    assert trace.allocations[1].transient_in is None  # pure: the trace given is left as it was


def test_a_tracer_already_installed_is_put_back() -> None:
    def other(frame: Any, event: str, arg: Any) -> None:
        return None

    previous = sys.gettrace()
    sys.settrace(other)
    try:
        with StatementTracer({"nowhere.py"}):
            assert sys.gettrace() is not other
        assert sys.gettrace() is other
    finally:
        sys.settrace(previous)
