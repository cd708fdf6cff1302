"""The program model's event labels, read in one place.

The program model (:mod:`conformance.models.program`) labels each statement it runs
``<phase>:<place> [trip <n>] <statement>``: ``fw:line 163 buf3 = ...``, ``bw:while_loop_body_graph_0#1:160 ...``,
``fw:line 210 [trip 0] ...``.  A label is a location, not a sentence: this grammar is its only reader, and
``tests/test_mechanism_registry.py`` holds it to the labels the real program model writes for a real wrapper.
The statement after the place is the generated program's own text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EVENT = re.compile(r"^(?:(\w+):)?(line \d+|[\w.]+#\d+:\d+)\s*(?:\[trip (\d+)\]\s*)?(.*)$")


@dataclass(frozen=True)
class ProgramEvent:
    """One statement the program model ran: its phase (``fw``, ``bw``; ``""`` for a program modelled alone),
    where in the wrapper (``line 163``, or a subgraph's ``name#call:line``), the host loop's trip, and the text."""

    phase: str
    place: str
    trip: int | None
    statement: str

    @property
    def in_loop(self) -> bool:
        """Inside a host ``while`` loop's trip or a ``while_loop`` subgraph."""
        return self.trip is not None or "while_loop_" in self.place


def parse_event(label: object) -> ProgramEvent | None:
    """The statement an event label names (``None``: not a program statement's label: a graph event, ``never``)."""
    m = _EVENT.match(str(label or ""))
    if m is None:
        return None
    return ProgramEvent(m.group(1) or "", m.group(2), int(m.group(3)) if m.group(3) else None, m.group(4).strip())
