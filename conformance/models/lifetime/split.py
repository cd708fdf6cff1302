"""A step Dynamo split into graphs and eager code, modelled as the split program runs it.

Dynamo breaks a step at what it cannot trace (a ``.item()``, a data-dependent ``if``, a function it is
told not to trace) into several compiled graphs with eager PyTorch between them.  No one graph is the
step, and the user-level graph's schedule of deaths is not the split program's: what crosses a break is
held by the Python frame that runs the graphs, each compiled forward keeps what its partitioner saves
for its own backward, and the backward graphs run in reverse, handing gradients to one another through
the autograd engine.  This module composes the step from what ran (:class:`SplitRun`: each graph run
in order, with the storages of its arguments and results as the run saw them, by identity only):

* each graph is modelled as a whole-graph step's is (the received graph, its values dropped at their
  last use inside it; a compiled backward takes its saved inputs donated, the boxed convention);
* a forward's result that the frame keeps (one a later graph or the eager code reads, or the step's
  output) is held by the frame until the forward returns: the end of the last forward graph run;
* a forward's result a later backward takes is held for it (the autograd context) and handed to it;
* a gradient one backward gives the next is held by the engine for that backward's whole call, as
  the loss's gradient (the engine's root) is until the last backward returns; a gradient the step leaves in
  ``.grad`` outlives it, one it does not keep is dropped when its backward returns;
* eager code that reads a forward graph's tensor result (not 0-d: ``.item()`` and a branch's ``bool`` read a
  0-d one) or makes a gradient a backward graph reads is eager code whose own values are not composed: it is
  reported as :attr:`SplitModel.eager_made` too;
* a 0-d value a graph reads that no graph made and the caller does not own is a scalar the eager code
  made (Dynamo passes a Python float it does not specialise as a 0-d tensor), held by the frame; any
  other such value is made by eager code between the graphs (:attr:`SplitModel.eager_made`): the
  composition cannot size what that code held while it ran, so it is reported and the caller decides
  (the engine then holds the step to the user-level model).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from conformance.models.lifetime.aliasing import storages_in
from conformance.models.lifetime.graph import GraphWalker
from conformance.models.lifetime.liveness import ModelBuilder
from conformance.models.lifetime.model import LifetimeModel, ModelError, Observation
from conformance.models.lifetime.sizes import storage_nbytes
from conformance.models.lifetime.staging import CallingConvention

#: a storage's identity within one call of the step (``None``: not a tensor)
Key = int | None


@dataclass(frozen=True)
class SplitRun:
    """One compiled graph run once, in the order the step ran it."""

    gm: torch.fx.GraphModule
    backward: bool
    args: tuple[Key, ...]
    results: tuple[Key, ...]


@dataclass
class SplitModel:
    model: LifetimeModel
    #: the storages graphs read that neither a graph nor the caller made: eager code's values (keys)
    eager_made: list[int] = field(default_factory=list)


def _output_vals(gm: torch.fx.GraphModule) -> list[Any]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    args = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in args]


def _placeholders(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def model_split_step(runs: Sequence[SplitRun], caller: set[int], observation: Observation | None = None,
                     gradients: Collection[int] | None = None, returned: Collection[Key] | None = None
                     ) -> SplitModel:
    """The split step's model from its graph runs in order; ``caller``: the keys of the caller's tensors
    (inputs, parameters, buffers), which cost the step nothing; ``gradients``: the keys of the gradients the step
    left in ``.grad`` (a backward's result no later graph reads outlives the step where it is one of them, and is
    dropped when its backward returns where it is not: an input's gradient nobody keeps; ``None``: every one
    outlives it); ``returned``: the keys of the step's outputs (a forward result that is not one of them, not 0-d,
    and read by no later graph is read by eager code, whose values are then not composed: :attr:`SplitModel.eager_made`;
    ``None``: not checked)."""
    forwards = [i for i, r in enumerate(runs) if not r.backward]
    if not forwards:
        raise ModelError("no forward graph ran")
    walk = _SplitWalk(runs, caller, ModelBuilder(observation or Observation()), gradients, returned)
    for i, run in enumerate(runs):
        walk.run(i, run)
        if i == forwards[-1]:
            walk.builder.release(walk.frame)
            walk.frame = []
    return walk.finish()


class _SplitWalk:
    """The split step's graph runs walked in order, with what holds each value between them."""

    def __init__(self, runs: Sequence[SplitRun], caller: set[int], builder: ModelBuilder,
                 gradients: Collection[int] | None, returned: Collection[Key] | None) -> None:
        self.runs, self.caller, self.builder = runs, caller, builder
        self.gradients, self.returned = gradients, returned
        self.walker = GraphWalker(builder)
        self.values: dict[int, Any] = {}
        self.eager_made: list[int] = []
        self.frame: list[Any] = []  # the forward results the Python frame holds until the forward returns
        self.engine: dict[int, list[Any]] = {}  # per backward run: the gradients the engine holds for its call
        self.kept: list[Any] = []  # the step's outputs, held by the caller to the end
        self.retained: list[Any] = []  # gradients that outlive the step
        self.root: list[Any] = []  # the loss's gradient: held until the last backward returns

    def readers(self, i: int, key: int) -> list[int]:
        """The runs after ``i`` that read ``key`` before a run makes it again (its address reused)."""
        found = []
        for j in range(i + 1, len(self.runs)):
            if key in self.runs[j].args:
                found.append(j)
            if key in self.runs[j].results:
                break
        return found

    def run(self, i: int, run: SplitRun) -> None:
        """One graph run: its inputs, its graph, then where each of its results goes."""
        vals = _placeholders(run.gm)
        if len(vals) != len(run.args):
            raise ModelError(f"graph run {i}: {len(vals)} placeholders, {len(run.args)} arguments")
        inputs = [self.input(i, run, key, val) for key, val in zip(run.args, vals)]
        prefix = f"{'bw' if run.backward else 'fw'}{i}:"
        outputs = self.walker.run_graph(run.gm, inputs, prefix, CallingConvention(donated=run.backward))
        self.builder.release(self.engine.pop(i, []))
        if len(outputs) != len(run.results):
            raise ModelError(f"graph run {i}: {len(outputs)} results modelled, {len(run.results)} returned")
        for key, out, oval in zip(run.results, outputs, _output_vals(run.gm)):
            if out is None or key is None or not any(True for _ in storages_in(out)):
                self.builder.release(out)
            elif key in run.args or key in self.caller:  # an input returned (saved as it is): the caller's value
                self.builder.release(out)
            elif run.backward:
                self.backward_result(i, key, out)
            else:
                self.forward_result(i, key, out, oval)

    def input(self, i: int, run: SplitRun, key: int | None, val: Any) -> Any:
        """The value a graph run reads for argument ``key``: an earlier run's, the caller's, or one made outside
        the graphs (by the autograd engine, or by eager code)."""
        builder = self.builder
        if key is None or not isinstance(val, torch.Tensor):
            return None
        if key in self.values:
            return self.values[key]
        if key in self.caller and not run.backward:
            return self.values.setdefault(key, builder.caller_input(val, f"input {key}"))
        if run.backward and val.dim() > 0:  # a gradient eager autograd made: eager code's backward ran
            self.eager_made.append(key)
            return self.values.setdefault(key, builder.caller_input(val, f"eager {key}"))
        if run.backward:  # a gradient the engine made (the loss's root, zeros for an unused output)
            tangent = builder.new_storage(storage_nbytes(val, builder.symbols), f"bw{i}:tangent", "tangent",
                                          val, "tangent")
            builder.acquire(tangent)  # the program's (handed over)
            builder.acquire(tangent)  # the engine's grad_outputs, held for the call
            (self.root if val.dim() == 0 else self.engine.setdefault(i, [])).append(tangent)
            return tangent
        if val.dim() == 0:  # a scalar the eager code made (Dynamo's wrapped float or int): the frame's
            scalar = builder.new_storage(storage_nbytes(val, builder.symbols), f"fw{i}:eager scalar", "scalar",
                                         val, "intermediate")
            builder.acquire(scalar)
            self.frame.append(scalar)
            return self.values.setdefault(key, scalar)
        # made by eager code between the graphs: not sized here
        self.eager_made.append(key)
        return self.values.setdefault(key, builder.caller_input(val, f"eager {key}"))

    def backward_result(self, i: int, key: int, out: Any) -> None:
        """A gradient: handed to the next backward that reads it (the engine holds it for that call too),
        else kept in ``.grad`` past the step or dropped when its backward returns."""
        nxt = [j for j in self.readers(i, key) if self.runs[j].backward]
        if nxt:
            self.builder.acquire(out)
            self.engine.setdefault(nxt[0], []).append(out)
            self.values[key] = out
        elif self.gradients is None or key in self.gradients:
            self.retained.append(out)
        else:
            self.builder.release(out)

    def forward_result(self, i: int, key: int, out: Any, oval: Any) -> None:
        """A forward's result: saved for a backward, held by the frame for a later forward, or the step's output
        (or a value eager code reads)."""
        self.values[key] = out
        later = self.readers(i, key)
        saved = any(self.runs[j].backward for j in later)
        frame_keeps = any(not self.runs[j].backward for j in later)
        if saved and frame_keeps:
            self.builder.acquire(out)
        if frame_keeps:
            self.frame.append(out)
        elif not saved:  # read by no later graph: the step's output, or a value eager code reads
            self.kept.append(out)
            if (self.returned is not None and key not in self.returned and isinstance(oval, torch.Tensor)
                    and oval.dim()):
                self.eager_made.append(key)  # a tensor eager code reads: what that code makes is not composed

    def finish(self) -> SplitModel:
        self.builder.release(self.root)
        kept, retained = self.kept, self.retained
        return SplitModel(self.builder.finish([*kept, *retained], set(range(len(kept), len(kept) + len(retained)))),
                          self.eager_made)


class StorageKeys:
    """Storage identities within one call of the step: the same live storage, the same key; an address
    whose storage died and was reused, a new one.  Only weak references are kept."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, int]] = {}
        self._next = 0

    def of(self, values: Sequence[Any]) -> tuple[Key, ...]:
        from torch.multiprocessing.reductions import StorageWeakRef

        out: list[Key] = []
        for v in values:
            if not isinstance(v, torch.Tensor) or v.is_meta or v.layout != torch.strided:
                out.append(None)
                continue
            storage = v.untyped_storage()
            known = self._seen.get(storage.data_ptr())
            if known is None or known[0].expired():
                known = self._seen[storage.data_ptr()] = (StorageWeakRef(storage), self._next)
                self._next += 1
            out.append(known[1])
        return tuple(out)


__all__ = ["Key", "SplitModel", "SplitRun", "StorageKeys", "model_split_step"]
