"""Which statement of a generated program was running when memory moved.

A generated wrapper (inductor's Python ``call``) calls opaque ops: fallback kernels,
extern kernels, custom ops.  What such an op allocates and frees inside its own call
is its business, not the program's.  The profiler's operator range used to mark that
call, but not every op opens one on every release: a ``torch.library.custom_op`` opens
none from torch 2.14 on (building it turns on Python-object dispatch), so its inner
``aten::sum`` temporaries looked like allocations the program makes.

The span of the wrapper statement that calls the op marks it on every release.  A
Python trace function on the program's own files records when each statement starts
and when a program frame is entered or left, on the probes' clock (``CLOCK_REALTIME``
ns, :mod:`conformance.probes.observer`).  An allocation made and freed with no statement
boundary in between belongs to the statement that was running: a program never
allocates a buffer and frees it within one of its statements (it frees with ``del``
or by rebinding, in a later one).
"""

from __future__ import annotations

import bisect
import linecache
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from conformance.probes.cpu import Allocation, MemoryTrace


@dataclass(frozen=True)
class Statement:
    """One statement of a generated program: its file and line."""

    file: str
    line: int

    def describe(self) -> str:
        text = " ".join(linecache.getline(self.file, self.line).split())
        return f"wrapper line {self.line}: {text[:120]}" if text else f"wrapper line {self.line}"


@dataclass
class StatementSpans:
    """Where each span begins (ns) and the statement running in it (``None``: outside the program)."""

    starts: list[int] = field(default_factory=list)
    statements: list[Statement | None] = field(default_factory=list)

    def mark(self, t: int, statement: Statement | None) -> None:
        self.starts.append(t)
        self.statements.append(statement)

    def owner(self, t_alloc: int, t_free: int | None) -> Statement | None:
        """The statement within whose one span an allocation was made and freed, if any (pure)."""
        if t_free is None:
            return None
        i = bisect.bisect_right(self.starts, t_alloc) - 1
        if i < 0 or bisect.bisect_right(self.starts, t_free) - 1 != i:
            return None
        return self.statements[i]


def attribute(trace: MemoryTrace, spans: StatementSpans) -> MemoryTrace:
    """``trace`` with each allocation made and freed inside one program statement marked as that
    statement's own transient (an operator's own transient, where the profiler saw one, stays so)."""
    if not spans.starts:
        return trace
    allocations: list[Allocation] = []
    for a in trace.allocations:
        statement = None if a.transient_in is not None else spans.owner(a.t_alloc, a.t_free)
        allocations.append(a if statement is None else replace(a, transient_in=statement.describe()))
    return replace(trace, allocations=allocations)


class StatementTracer:
    """Records :class:`StatementSpans` for the frames whose code comes from ``files``, while entered.

    Installs a ``sys.settrace`` function on this thread for the window only (a tracer already
    installed, a debugger's or coverage's, is put back on exit); frames of other files are not
    traced line by line."""

    def __init__(self, files: Iterable[str]) -> None:
        self.files = frozenset(files)
        self.spans = StatementSpans()
        self._previous: Any = None

    def __enter__(self) -> StatementTracer:
        if self.files:
            self._previous = sys.gettrace()
            sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.files:
            sys.settrace(self._previous)
            self._previous = None

    def _on_call(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call" or frame.f_code.co_filename not in self.files:
            return None
        self.spans.mark(time.time_ns(), Statement(frame.f_code.co_filename, frame.f_lineno))
        return self._on_event

    def _on_event(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.spans.mark(time.time_ns(), Statement(frame.f_code.co_filename, frame.f_lineno))
        elif event == "return":
            caller = frame.f_back
            inside = caller is not None and caller.f_code.co_filename in self.files
            # back in the calling statement (a new span: what the callee left is not its own), or outside
            self.spans.mark(time.time_ns(),
                            Statement(caller.f_code.co_filename, caller.f_lineno) if inside and caller else None)
        return self._on_event
