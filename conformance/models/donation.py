"""Does an ``aot_autograd`` backend release backward inputs at their last use?

AOTAutograd calls the compiled backward with one list holding the saved
activations (and the tangents), and steals its own reference (boxed calling
convention).  A compiled backward that clears the list and drops each input after
its last use lets activations die during the backward; one that unpacks
``*args`` (``make_boxed_func`` around a plain function, as iree-turbine's backend
does) keeps the list, and every activation in it, alive for the whole call.

Two pieces of evidence, both measured, for any ``aot_autograd`` backend:

* :class:`BackwardWatch` wraps the compiled backward the backend returns (same
  boxed convention, no strong references added) and records, per call, the bytes of
  the saved-activation storages still alive when the call returns (``held_bytes``).
* :func:`classify` compares the step's measured peak with the lifetime model of the
  received graphs in both conventions, ``saved_inputs="donated"`` and ``"held"``.

The verdict (``result.memory.findings["backward_inputs"]``): ``held-for-call`` when saved
storages outlive the call; ``released-at-last-use`` when none does and the measured
peak stays within the donated model; ``released-late`` when none outlives the call but
the peak exceeds the donated model, or the adapter measured that released inputs stayed
allocated (IREE: a result buffer shared with live results); ``no-backward`` when no
backward ran.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef

from conformance.models.lifetime import LifetimeModel

#: Placeholder-name prefixes of backward inputs that are not saved activations.
NOT_SAVED_PREFIXES = ("tangents_", "primals_")


def saved_positions(bw_gm: torch.fx.GraphModule, fw_gm: torch.fx.GraphModule | None = None) -> list[int]:
    """Positions of the backward's inputs that are activations the forward saved.

    With the forward graph, saved values whose storage the caller holds anyway are
    left out: views of the forward's own inputs (a transposed weight, the user's
    input) and values that are also the forward's user outputs (the loss).  Their
    storage rightly outlives the backward call.
    """
    names = [n.name for n in bw_gm.graph.nodes if n.op == "placeholder"]
    caller_held = held_by_caller(fw_gm, set(names)) if fw_gm is not None else set()
    return [i for i, name in enumerate(names)
            if not name.startswith(NOT_SAVED_PREFIXES) and name not in caller_held]


def held_by_caller(fw_gm: torch.fx.GraphModule, saved_names: set[str]) -> set[str]:
    """Names of saved forward outputs sharing storage with a forward input or a user output."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def key(node: Any) -> Any:
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and val.layout == torch.sparse_coo:
            val = val._values()  # a sparse value's storage is its values' (and its indices')
        return StorageWeakRef(val.untyped_storage()) if isinstance(val, torch.Tensor) else None

    out = next(n for n in fw_gm.graph.nodes if n.op == "output")
    values = [v for v in (out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]])
              if isinstance(v, torch.fx.Node)]
    held = {key(n) for n in fw_gm.graph.nodes if n.op == "placeholder"}
    held |= {key(v) for v in values if v.name not in saved_names}
    held.discard(None)
    return {v.name for v in values if v.name in saved_names and key(v) in held}


@dataclass
class BackwardCall:
    saved_bytes: int  # distinct storages of saved activations passed in
    held_bytes: int  # of those, still alive when the compiled backward returned
    list_cleared: bool  # the callee emptied the boxed argument list


@dataclass
class BackwardWatch:
    """A compiled backward, called with AOTAutograd's boxed convention, watched for held inputs."""

    compiled: Callable[[list[Any]], Any]
    positions: list[int]
    calls: list[BackwardCall] = field(default_factory=list)
    _boxed_call: bool = True  # AOTAutograd passes the list itself, as to the wrapped callable

    def __call__(self, args: list[Any]) -> Any:
        refs = _weak_storages([args[i] for i in self.positions if i < len(args)])
        # The backend's own convention: a boxed callable takes the list over; a plain one gets it
        # unpacked while the caller's list (here, as in AOTAutograd) still holds every input.
        out = self.compiled(args) if getattr(self.compiled, "_boxed_call", False) else self.compiled(*args)
        # A saved activation reused in place for a gradient is alive as that gradient, not held.
        returned = set(_weak_storages(list(out) if isinstance(out, (list, tuple)) else [out]))
        held = sum(n for ptr, (ref, n) in refs.items() if not ref.expired() and ptr not in returned)
        self.calls.append(BackwardCall(sum(n for _, n in refs.values()), held, len(args) == 0))
        return out


def _weak_storages(tensors: list[Any]) -> dict[int, tuple[StorageWeakRef, int]]:
    """Weak references to the tensors' storages, so watching keeps nothing alive (autograd's zero
    tensors hold no memory, and their storage has no data pointer)."""
    refs: dict[int, tuple[StorageWeakRef, int]] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.layout == torch.sparse_coo:  # its memory: its indices and values
            refs.update(_weak_storages([t._indices(), t._values()]))
        elif isinstance(t, torch.Tensor) and not t._is_zerotensor():
            storage = t.untyped_storage()
            refs.setdefault(storage.data_ptr(), (StorageWeakRef(storage), storage.nbytes()))
    return refs


BackwardVerdict = Literal["no-backward", "held-for-call", "released-late", "released-at-last-use"]

#: the keys of ``result.memory.findings`` a :class:`BackwardInputs` is stored under
VERDICT_KEY, DETAIL_KEY = "backward_inputs", "backward_inputs_detail"


@dataclass(frozen=True)
class BackwardInputs:
    """:func:`classify`'s verdict and the numbers behind it (see the module docstring).

    Stored in ``result.memory.findings`` as :meth:`to_json` (``backward_inputs`` and
    ``backward_inputs_detail``) and read back by the judge with :meth:`from_memory`.
    """

    verdict: BackwardVerdict
    measured_peak_bytes: int | None = None
    model_peak_donated_bytes: int | None = None
    model_peak_held_bytes: int | None = None
    #: the last probed step's backward call (none when no backward ran)
    calls: tuple[BackwardCall, ...] = ()
    #: the last call's figures (None when no backward ran)
    saved_bytes: int | None = None
    held_bytes: int | None = None
    list_cleared: bool | None = None
    #: bytes of released backward inputs the backend's allocator kept allocated
    still_allocated_bytes: int | None = None

    def detail(self) -> dict[str, Any]:
        """``memory["backward_inputs_detail"]``: the figures of a backward that ran come last."""
        detail: dict[str, Any] = {
            "measured_peak_bytes": self.measured_peak_bytes,
            "model_peak_donated_bytes": self.model_peak_donated_bytes,
            "model_peak_held_bytes": self.model_peak_held_bytes,
            "calls": [asdict(c) for c in self.calls],
        }
        if self.verdict != "no-backward":
            detail.update(saved_bytes=self.saved_bytes, held_bytes=self.held_bytes,
                          list_cleared=self.list_cleared, still_allocated_bytes=self.still_allocated_bytes)
        return detail

    def to_json(self) -> dict[str, Any]:
        return {VERDICT_KEY: self.verdict, DETAIL_KEY: self.detail()}

    @classmethod
    def from_memory(cls, memory: Mapping[str, Any]) -> BackwardInputs | None:
        """The watch's findings in ``result.memory.findings``, or None when the backend reported none.

        Lenient: an adapter reporting the verdict with only some figures (by hand, not through
        :func:`classify`) reads back with the others None."""
        verdict = memory.get(VERDICT_KEY)
        if verdict is None:
            return None
        detail = memory.get(DETAIL_KEY) or {}
        return cls(cast(BackwardVerdict, verdict), detail.get("measured_peak_bytes"),
                   detail.get("model_peak_donated_bytes"), detail.get("model_peak_held_bytes"),
                   tuple(BackwardCall(**c) for c in detail.get("calls") or ()),
                   detail.get("saved_bytes"), detail.get("held_bytes"), detail.get("list_cleared"),
                   detail.get("still_allocated_bytes"))


def classify(
    watches: list[BackwardWatch],
    measured_peak: int,
    donated: LifetimeModel | None,
    held: LifetimeModel | None,
    slack: int = 0,
    still_allocated_bytes: int = 0,
) -> BackwardInputs:
    """The verdict and the numbers behind it (see the module docstring).

    ``still_allocated_bytes``: bytes of backward inputs whose storage the wrapper released
    but whose memory the backend's allocator did not free then (an adapter that can see its
    allocator says so); any makes the verdict ``released-late``."""
    calls = [c for w in watches for c in w.calls]
    donated_peak = donated.peak_bytes if donated else None
    held_peak = held.peak_bytes if held else None
    if not calls:
        return BackwardInputs("no-backward", measured_peak, donated_peak, held_peak)
    last = calls[-1]  # the last probed step's backward
    verdict: BackwardVerdict
    if last.held_bytes:
        verdict = "held-for-call"
    elif still_allocated_bytes:
        verdict = "released-late"
    elif donated is None or measured_peak <= donated.peak_bytes + slack:
        verdict = "released-at-last-use"
    else:
        verdict = "released-late"
    return BackwardInputs(verdict, measured_peak, donated_peak, held_peak, (last,), last.saved_bytes,
                          last.held_bytes, last.list_cleared, still_allocated_bytes)
