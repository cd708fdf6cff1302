"""A runtime's own buffers (IREE's HAL): saved inputs held by the call, packed result buffers, a call's own
transients.
"""

from __future__ import annotations

from collections.abc import Mapping

from conformance.checks.mechanisms.evidence import BLAMED_BYTES, Evidence, blamed_bytes
from conformance.checks.mechanisms.registry import mechanism

#: the docs line its mechanisms share
_DOCS_1 = ("the backward-input watch's verdict, `held-for-call` or `released-late` (a runtime's packed result "
           'buffer), as the deciding check or beside a peak that blames no storage; `result-buffer-packing` is '
           'bounded by the saved activations the watch measured dropped but still allocated (`Mechanism.bound`)')


def _watch(ev: Evidence, verdict: str) -> bool:
    """The backward-input watch gave ``verdict``: as the deciding check, or beside a peak over the
    model that blame could not pin on any storage (the held inputs are the runtime's own buffers)."""
    if ev.source == "backward-inputs":
        return ev.figures.get("verdict") == verdict
    return ev.source == "peak" and not ev.finding and ev.runtime.get("backward_inputs") == verdict


def saved_still_allocated(ev: Evidence) -> int:
    """The bytes of saved activations the watch saw dropped but still allocated: all this mechanism can keep."""
    if ev.source == "backward-inputs":
        return int(ev.figures.get("still_allocated_bytes") or 0)
    staging = ev.runtime.get("backward_inputs_staging")
    return int(staging.get("still_allocated_bytes") or 0) if isinstance(staging, Mapping) else 0


def pack_beyond_retained(ev: Evidence) -> int:
    """The most a retained result pack can keep beyond the retained results: its results' slots as the runtime packs
    them (each rounded up to the 64-byte alignment; blame's ``slot_bytes``) less the retained results' own bytes.
    Computed from the results' sizes, not from the allocation measured: a buffer larger than its slots, or a
    result packed farther apart, is more than this."""
    pack = ev.result_pack
    return max(0, pack.slot_bytes - pack.retained_bytes) if pack is not None else 0


def program_transients_over_model(ev: Evidence) -> int:
    """The most a call's own buffers can put over the model: what its compiled program allocates of its own
    beyond the intermediates the model's schedule of the call has."""
    t = ev.transients
    return max(0, t.program_bytes - t.model_bytes) if t is not None and t.program_bytes is not None else 0


@mechanism(
    'backward-inputs-held',
    140,
    "the compiled backward holds its saved inputs for the whole call",
    _DOCS_1,
)
def backward_inputs_held(ev: Evidence) -> str | None:
    """The compiled backward keeps its saved inputs for its whole call (its argument list never cleared)."""
    return "saved activations outlive the backward call" if _watch(ev, "held-for-call") else None


@mechanism(
    'result-buffer-packing',
    150,
    "a call's results share one runtime buffer that keeps dropped ones "
        "allocated",
    _DOCS_1,
    bound=saved_still_allocated,
    formula='the saved activations the backward-input watch measured dropped but still allocated',
)
def result_buffer_packing(ev: Evidence) -> str | None:
    """A call's results packed into one runtime buffer, which live results keep allocated after the
    saved inputs among them were dropped (IREE's HAL result buffer)."""
    return "saved activations dropped but still allocated" if _watch(ev, "released-late") else None


@mechanism(
    'retained-result-pack',
    160,
    "a result the caller drops shares one runtime buffer with the results it "
        "keeps (a loss packed with the gradients) or pads them to its slots' alignment, so it stays allocated "
        "with them",
    ('a residual whose blamed bytes are in the runtime buffer of the results the caller keeps, beyond their own '
     "bytes (`result buffer (N B allocated, M B of it the retained results'; the model has freed ... \\| the rest is "
     "its slots' alignment; its K results' 64-byte slots take S B)`: IREE's loss packed with the gradients, each "
     'gradient in a 64-byte slot); bounded by its evidence, S - M'),
    bound=pack_beyond_retained,
    formula="the results' 64-byte slots less the retained results' bytes",
)
def retained_result_pack(ev: Evidence) -> str | None:
    """A residual whose blamed bytes are in the runtime buffer of the results the caller keeps, beyond their own bytes:
    results the model frees (IREE packs a call's results into one allocation: a loss beside the gradients stays
    with them) or the padding of each retained result's slot to the pack's 64-byte alignment."""
    pack = ev.result_pack
    if ev.source != "residual" or pack is None:
        return None
    if pack.freed:
        return "a freed result shares the retained results' buffer"
    return "the retained results' buffer keeps their slots' 64-byte alignment"


@mechanism(
    'shared-result-buffer',
    380,
    "results the model frees stay allocated in their call's one result buffer "
        "while another result in it is alive",
    ("a peak blame on an earlier call's result buffer that holds results the model has freed beside one still alive "
     "(`iree-hal call 1/2's result buffer (N B allocated; alive in it when call 2/2 started: fw:add_2 4 B; the model"
     " has freed fw:add 4 B)`): IREE packs a call's results into one HAL allocation, so the loss keeps the forward's"
     ' other results allocated through the backward. Bounded by the bytes blame puts on that buffer '
     '(`Mechanism.bound`): an excess it does not account for still fails'),
    bound=blamed_bytes,
    formula=BLAMED_BYTES,
)
def shared_result_buffer(ev: Evidence) -> str | None:
    """A peak over the model made by an earlier call's result buffer: the results the model frees stay allocated
    while another result in the same buffer is alive (IREE packs a call's results into one HAL allocation; the
    loss beside the saved activations keeps them all through the backward)."""
    shared = ev.shared_buffer
    if ev.source != "peak" or shared is None or not shared.freed:
        return None
    return f"freed results stay allocated in their call's {shared.allocated_bytes} B result buffer beside a live one"


@mechanism(
    'lowering-transients',
    390,
    "a compiled call's own buffers (its lowering's intermediates) beyond the "
        "intermediates the graph has, within what its compiled program declares",
    ("a peak blame on a compiled call's own buffers beyond the intermediates of the model's schedule of it, at or "
     "under what its compiled program allocates of its own (`iree-hal call k/n's transients: X B allocated inside "
     'the call, Y B of intermediates ...; its compiled program allocates T B of its own (stream IR)`, Y < X <= T): '
     "IREE's lowering splits an op into dispatches whose intermediates its program allocates and frees itself "
     '(addbmm: a transpose into a 512 B buffer, then a matmul). T is read from the stream IR of the source the call '
     'ran (`stream.resource.alloca` freed by a `dealloca` in the same function, most bytes alive at once in program '
     'order; `conformance.backends.iree_stream`), so the manifest entries give no percentage: each instance is '
     'bounded by T - Y (`Mechanism.bound`), and a runtime allocating more than its program, or a size that is not '
     'static, stays unexpected'),
    bound=program_transients_over_model,
    formula=("what the call's compiled program allocates of its own (stream IR) less the model's intermediates of "
             "the call"),
)
def lowering_transients(ev: Evidence) -> str | None:
    """A peak over the model made by a compiled call's own buffers beyond the intermediates the graph has,
    at or under what its compiled program declares: IREE lowers an op the graph holds as one into several
    dispatches (addbmm: a transpose into a transient, then a matmul; a constant: a copy of it), whose
    intermediates the program allocates and frees itself (``stream.resource.alloca``/``dealloca`` in its
    stream IR, :mod:`conformance.backends.iree_stream`).  More than the program declares is not this."""
    t = ev.transients
    if ev.source != "peak" or t is None or t.program_bytes is None or not t.model_bytes < t.allocated_bytes \
            or t.allocated_bytes > t.program_bytes:
        return None
    return (f"the call's own buffers ({t.allocated_bytes} B) are its compiled program's (it allocates "
            f"{t.program_bytes} B of them), beyond the graph's intermediates ({t.model_bytes} B)")

