"""``while_loop`` mechanisms: the wrapper's host loop, the dense kernel's predicate, the eager loop autograd.
"""

from __future__ import annotations

import re

from conformance.checks.facts import NOT_IN_MODEL
from conformance.checks.mechanisms.evidence import Evidence, as_int
from conformance.checks.mechanisms.held import held_in_program
from conformance.checks.mechanisms.registry import mechanism

#: a model event or storage made by a ``while_loop``'s condition graph (``fw:while_loop.cond2:lt``)
_LOOP_CONDITION = re.compile(r"(?:^|[:.])while_loop(?:_\d+)?\.cond\d+:")


def loop_predicate_bytes(ev: Evidence) -> int:
    """The predicates' bytes (the peak check's figure, from the model the pair is held to)."""
    return as_int(ev.figures.get("loop_predicate_bytes"))


_PREDICATE = re.compile(r"\bshould_loop\b|_cond_result\b")


def loop_values_made(ev: Evidence) -> int | None:
    """What the eager ``WhileLoopAutogradOp`` can keep beyond the user-level graph's schedule: at most the values the
    loop's trips make (it saves every trip's carries, stacked by ``cat``, and the body values its backward reads), read
    from the user-level model the pair is held to as the rise in the bytes it holds at each ``while_loop_stack_output``
    event (``None``: the record has no figures of that model)."""
    total, before, figures = 0, 0, False
    for event, live in zip(ev.graph_events, ev.graph_live):
        if live is None:
            continue
        figures = True
        if "while_loop_stack_output" in event:
            total += max(0, live - before)
        before = live
    return total if figures else None


@mechanism(
    'while-loop-backward-eager',
    20,
    "a while_loop's autograd runs in eager PyTorch (its backward is not "
        "compiled), keeping its stacked carries",
    ('a peak or residual failure held to the user-level graph (`model_source = user-graph`) whose events hold '
     "`while_loop_stack_output`, blaming storage that graph does not have (the eager `WhileLoopAutogradOp`'s stacked"
     ' carries)'),
    bound=loop_values_made,
    bound_per_pair=True,
    formula=("the bytes the user-level model's `while_loop` makes over all its trips (each trip's condition and body "
             "values: the rise in the bytes it holds at each of its `while_loop_stack_output` events), once per pair: "
             "the eager loop autograd saves at most what the trips made (their carries, stacked by `cat`, and the "
             "body values it keeps for the backward)"),
)
def while_loop_backward_eager(ev: Evidence) -> str | None:
    """The loop's autograd running in eager PyTorch (inductor cannot compile a ``while_loop``
    backward): the pair is held to the user-level graph, whose loop is ``while_loop_stack_output``,
    and what is blamed is the eager loop autograd's storage the graph does not have."""
    if ev.source != "peak" or ev.model_source != "user-graph":  # it raises the peak; it keeps nothing
        return None
    if not any("while_loop_stack_output" in e for e in ev.graph_events):
        return None
    if ev.finding and ev.finding.get("model_death") not in (None, NOT_IN_MODEL):
        return None
    return "held to the user-level graph of a while_loop under autograd; blamed storage is not in that graph"


def loop_holds_bytes(ev: Evidence) -> int | None:
    """What the host loop's names hold past their last use, as the program check counts it over the generated
    program (each held item's bytes x the work statements from its last use to its release, summed over the part's
    findings and recorded with the part's facts); a finding read alone: :func:`held_in_program`."""
    if ev.held is not None and ev.held.held_statement_bytes is not None:
        return ev.held.held_statement_bytes
    return held_in_program(ev)


@mechanism(
    'while-loop-host-code',
    30,
    "the wrapper's host while loop holds its carry list, predicate or counter "
        "past their last use",
    ('a program finding in a program with a host `while` loop (`[trip n]` statements, `should_loop`): held by the '
     'carry list; or held by `should_loop` / `bufN_cond_result`; or a scalar (the trip counter, or a name '
     'referencing it) released by its `del` after the loop; or an initial carry the wrapper put in the carry list '
     '(`buf1[0] = buf0`) whose name is deleted only after the loop (a loop that runs no trip shows it). A name '
     'released at the `return` instead of its `del` is not this (a dropped free)'),
    bound=loop_holds_bytes,
    bound_per_pair=True,
    formula=("what the loop's carry list, predicate and trip counter hold past their last use, as the program check "
             "counts it over the generated program: each held item's bytes x the work statements from its last use to "
             "the statement releasing it (the list's item assignment, `should_loop`'s rebinding, the counter's `del`), "
             "summed over the part's findings, once per part"),
)
def while_loop_host_code(ev: Evidence) -> str | None:
    """The wrapper's host ``while`` loop, as inductor writes it: its carry list holds the previous
    trip's carries across the next body (or, for a loop that runs no trip, a clone of the counter to
    the return); ``should_loop`` holds the predicate across the body and to the return; the initial
    trip counter (and a name referencing it) is deleted only after the loop.  Anything else held
    in a loop program (a name released at the return instead of its ``del``) is not this."""
    if ev.source != "program" or not ev.program.has_host_loop:
        return None
    f = ev.finding
    if f:
        held_in, freed = str(f.get("held_in") or ""), ev.statement("freed_after")
        listed = f.get("holds_kinds")
        kinds = listed if isinstance(listed, list) else []
        scalar = f.get("shape") == [] or any("scalar" in str(k) for k in kinds)
        if held_in == "list":
            return "held by the loop's carry list until its items are replaced"
        if _PREDICATE.search(str(f.get("held_by") or "")) or _PREDICATE.search(freed):
            return "the loop predicate, held by should_loop"
        if scalar and freed.startswith("del ") and (f.get("in_loop") or f.get("finding") == "late-reference"):
            return "the trip counter, deleted only after the loop"
        if held_in == "name" and freed.startswith("del ") and ev.buffer is not None \
                and ev.program.initial_carry(*ev.buffer) and ev.program.after_host_loop(freed):
            return "an initial carry the wrapper put in the carry list, its name deleted only after the loop"
        return None
    held = ev.held  # a finding whose entry the record cut: its part's facts
    if held is None:
        return None
    if (held.kind == "held" and held.container in ("the carry list", "a list")) \
            or (held.kind == "reference" and held.container == "the carry list"):
        return "held by the loop's carry list"
    if held.kind == "held" and held.what.endswith("bool scalar") and held.container == "a name":
        return "the loop predicate, held by should_loop"
    if "scalar" in held.what and held.statement == "del":
        return "the trip counter, deleted only after the loop"
    return None


@mechanism(
    'while-loop-dense-predicate',
    40,
    "torch's dense while_loop kernel holds a trip's predicate until the "
        "next condition returns, while the next body runs",
    ("a peak failure over a model that unrolls a `while_loop` (its condition's events), where blame names a value a "
     "condition made alive past its modelled death, an allocation whose every candidate is one, or nothing: torch's "
     'dense kernel (`while_loop_dense`, what an `aot_autograd` backend runs when its graphs call the higher-order '
     "op: the example vendor's interpreter) keeps `should_loop` from one condition until the next returns, so a "
     "trip's predicate is alive while the next body runs, where the graphs' schedule drops it once read. Bounded "
     "once per pair by the predicates' bytes the model holds (the peak check's `loop_predicate_bytes`: per loop its "
     "largest condition output, nested loops' added; `Mechanism.bound`), so a byte more still fails"),
    bound=loop_predicate_bytes,
    bound_per_pair=True,
    formula=("the predicates' bytes the model holds (the peak check's `loop_predicate_bytes`: per loop its largest "
             "condition output, nested loops' added), once per pair"),
)
def while_loop_dense_predicate(ev: Evidence) -> str | None:
    """A ``while_loop`` run by torch's dense kernel (``torch/_higher_order_ops/while_loop.py``, ``while_loop_dense``:
    what an ``aot_autograd`` backend runs when its graphs call the higher-order op, as an fx interpreter does):
    ``should_loop = cond_fn(...)`` keeps each trip's predicate until the next condition has returned, so it is
    alive while the next body runs, where the graph's schedule drops it once read.  Recognised on a peak over a
    model that unrolls such a loop (its condition's events), where blame names a value a condition made (alive at
    the peak past its modelled death, or an allocation whose every candidate is one), or names nothing; bounded by
    the predicates' bytes (the peak check's ``loop_predicate_bytes``: per loop its largest, nested loops' added)."""
    if ev.source != "peak" or not as_int(ev.figures.get("loop_predicate_bytes")):
        return None
    if not any(_LOOP_CONDITION.search(e) for e in ev.graph_events):
        return None
    if not ev.finding:
        return "the dense while_loop kernel holds a trip's predicate while the next body runs (nothing else blamed)"
    producer = str(ev.finding.get("producer") or "")
    if _LOOP_CONDITION.search(producer) and ev.finding.get("model_death") != NOT_IN_MODEL:
        return f"{producer}, a while_loop condition's value, is held while the next body runs (the dense kernel)"
    candidates = [str(c) for c in ev.finding.get("candidates") or ()]  # the model's storages of its size
    if ev.finding.get("model_death") == NOT_IN_MODEL and candidates and all(
            _LOOP_CONDITION.search(c) for c in candidates):
        return "an allocation the model cannot name, of the size of a while_loop condition's values only"
    return None

