"""Outputs stay valid: what the caller keeps from a call still holds its value after every later call.

A runtime may write each call's result into one buffer it owns (OpenVINO's ``share_outputs=True``): the
output a user kept from call 1 then silently becomes call 2's.  Parity cannot see it (each call's results are
copied right after the call, and those copies are right); only looking again can.  So the outputs of the two
unprobed calls (0 and 1) are kept alive, as a user keeps them, beside their copies, and after every later call,
the probed ones included, compared bit for bit with those copies: the first call after which one differs
overwrote it.

Only the unprobed calls' outputs are kept: a probed call's outputs are dropped inside its window, and holding
them would put them in that call's residual.  Outputs allocated before every window and never freed inside one
change no memory figure (each window counts what it allocates), so the verdicts of pairs that keep their outputs
valid are what they were.  An output that shares its storage with the step's state (a parameter, a buffer, the
optimizer's state) is that state, which the optimizer changes on purpose: it is not kept.

A backend whose documented contract ends an output's life at the next call (CUDA graph trees after
``torch.compiler.cudagraph_mark_step_begin()``, which the cudagraph adapter calls, as its users must) declares
``Capabilities.outputs_overwritten_by_next_call``: torch then refuses to read such an output (it raises), which is
that contract kept; a value changed silently still fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.api.step import StepOutput, host_copies
from conformance.api.verdict import CauseFinding, Check, CheckName, Status, passed

NAME = CheckName("outputs")


@dataclass(frozen=True)
class Overwritten:
    """An output a caller kept that a later call changed (or made unreadable)."""

    call: int  #: the call that returned it
    output: str  #: its name in the call's results (``output[0]``)
    by_call: int  #: the first later call after which it no longer held its value
    changed_elements: int  #: elements whose bits differ (0 where it could not be read)
    elements: int
    #: ``changed`` (its bits differ from the copy taken when its call returned), or ``unreadable: <error>``
    how: str = "changed"

    def to_json(self) -> dict[str, Any]:
        return {"call": self.call, "output": self.output, "by_call": self.by_call,
                "changed_elements": self.changed_elements, "elements": self.elements, "how": self.how}


@dataclass
class KeptOutputs:
    """The unprobed calls' outputs, kept alive as a user keeps them, with the copies taken when each returned."""

    #: the backend's contract ends an output's life at the next call: reading one may raise (never change)
    refused_is_kept: bool = False
    kept: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    copies: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    #: the calls after which the kept outputs were compared
    checked_after: list[int] = field(default_factory=list)
    overwritten: list[Overwritten] = field(default_factory=list)
    refused: list[Overwritten] = field(default_factory=list)

    def keep(self, call: int, out: StepOutput, copies: Mapping[str, torch.Tensor],
             state: Mapping[str, torch.Tensor]) -> None:
        """Keep ``call``'s outputs (``copies``: the host copies taken when it returned), less those sharing a
        storage with the step's ``state``."""
        owned = {_storage(t) for t in state.values()} - {None}
        named = {f"output[{i}]": t for i, t in enumerate(out.outputs) if isinstance(t, torch.Tensor)}
        self.kept[call] = {n: t.detach() for n, t in named.items() if n in copies and _storage(t) not in owned}
        self.copies[call] = {n: copies[n] for n in self.kept[call]}

    def check(self, after_call: int) -> None:
        """Compare every kept output that still held its value with its copy, after ``after_call``."""
        self.checked_after.append(after_call)
        gone = {(o.call, o.output) for o in (*self.overwritten, *self.refused)}
        for call, outputs in self.kept.items():
            if call >= after_call:
                continue
            for name, tensor in outputs.items():
                if (call, name) in gone:
                    continue
                found = _compare(call, name, after_call, tensor, self.copies[call][name])
                if found is not None:
                    refused = found.how != "changed" and self.refused_is_kept
                    (self.refused if refused else self.overwritten).append(found)

    def release(self) -> None:
        """Let the kept outputs go (after the last call)."""
        self.kept.clear()

    def figures(self) -> dict[str, Any]:
        return {"kept": {str(c): sorted(self.copies[c]) for c in sorted(self.copies)},
                "checked_after_calls": list(self.checked_after),
                "overwritten": [o.to_json() for o in self.overwritten],
                **({"refused_by_contract": [o.to_json() for o in self.refused]} if self.refused else {})}


def _storage(t: torch.Tensor) -> int | None:
    try:
        return int(t.untyped_storage().data_ptr()) or None
    except (RuntimeError, NotImplementedError):  # no storage (autograd's zero tensor, a subclass)
        return None


def _compare(call: int, name: str, after_call: int, tensor: torch.Tensor, copy: torch.Tensor) -> Overwritten | None:
    elements = copy.numel()
    try:
        now = host_copies({name: tensor})[name]
    except Exception as exc:  # torch refuses to read it (CUDA graph trees: overwritten by a later replay)
        return Overwritten(call, name, after_call, 0, elements, f"unreadable: {type(exc).__name__}: "
                           f"{' '.join(str(exc).split())[:200]}")
    if now.shape != copy.shape or now.dtype != copy.dtype:
        return Overwritten(call, name, after_call, elements, elements)
    a, b = _bits(now), _bits(copy)
    if torch.equal(a, b):
        return None
    per_element = a.numel() // max(elements, 1)
    differ = (a != b).reshape(elements, per_element).any(dim=1) if elements else a != b
    return Overwritten(call, name, after_call, int(differ.sum()), elements)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes (NaN equals the same NaN, -0.0 differs from 0.0: the value as stored)."""
    flat = t.contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)


def outputs_check(kept: KeptOutputs | None) -> Check | None:
    """Fails where a later call overwrote an output its caller kept, naming both calls and the output."""
    if kept is None or not kept.checked_after or not any(kept.copies.values()):
        return None
    figures = kept.figures()
    if not kept.overwritten:
        return passed(NAME, **figures)
    first = min(kept.overwritten, key=lambda o: (o.by_call, o.call, o.output))
    what = (f"{first.changed_elements} of {first.elements} elements changed" if first.how == "changed"
            else first.how)
    more = len(kept.overwritten) - 1
    reason = (f"call {first.by_call} overwrote call {first.call}'s {first.output}, which its caller still held "
              f"({what}){f'; {more} more output(s) overwritten' if more else ''}")
    return Check(NAME, Status.FAIL_PARITY, reason, figures)


def cause(check: Check, result: object) -> list[CauseFinding]:
    """In shape-free words: an output kept from one call was overwritten by a later one, or made unreadable."""
    found = check.figures.get("overwritten") or []
    hows = sorted({"changed" if o.get("how") == "changed" else "unreadable" for o in found if isinstance(o, dict)})
    return [CauseFinding(f"an earlier call's output {how} by a later call", None, None) for how in hows or ["changed"]]
