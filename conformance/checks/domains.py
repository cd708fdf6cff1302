"""Memory domains: which a pair is held on, and the memory no probe observed (never a pass).

A backend declares the domains it allocates in (``Capabilities.memory_domains``); its probes observe
some (the torch CPU allocator's, its own ``make_probe`` and ``extra_probes``, and the native heap
where the worker preloads it: :mod:`conformance.probes.native_heap`).  The two are held against each
other here, with the evidence of the step itself: a result (an output, a gradient) whose storage
torch's allocator did not make (:class:`conformance.probes.native_heap.OutsideStorage`) lives in
memory some other library allocated.

* Such a result inside the native domain's recording (a numpy array, a runtime's buffer), or in
  native memory a library made before the call (its pool: numpy's cache of small blocks, a
  runtime's output buffers), or a declared ``native`` domain: the pair is held on the native
  domain, its bytes added to the torch CPU allocator's (:func:`conformance.probes.cpu.combine_traces`).
  A pooled result's bytes are counted in the window while the caller holds it (an output until it
  is dropped, a gradient until the optimizer's ``zero_grad``), named ``native:<library> (pool)``;
  the record's note names the pool.
* A declared domain no probe observes, or such a result in memory no probe saw allocated (the native
  domain not observed here, or a buffer the runtime allocated before the window): the memory there
  was not observed.  Peak and residual are not judged and the pair's verdict is ``skip``, saying
  which memory was not observed (:data:`CHECK`): never a pass on bytes nobody measured, and never a
  failure for bytes that were only measured in the wrong place.

The outside-storage evidence is read for a backend with no probe of its own (its steps measured by
the torch CPU allocator's alone): a backend with its own probes (IREE's HAL, CUDA) says through them
where its bytes live.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from conformance.api.verdict import Check, CheckName, CheckSpec, Status
from conformance.probes.cpu import MemoryTrace
from conformance.probes.native_heap import DOMAIN as NATIVE
from conformance.probes.native_heap import OutsideStorage

NAME = CheckName("memory-domains")
#: the checks that judge measured bytes: not judged where some of the pair's memory was not observed
MEMORY_CHECKS = frozenset({"residual", "program", "peak", "loop-scaling", "backward-inputs"})


@dataclass(frozen=True)
class Unobserved:
    """Memory of a pair that no probe observed: a declared domain, or a result's storage."""

    domain: str
    #: ``declared``: the backend declares the domain and no probe observes it; ``result``: a result
    #: of call ``call`` (``what``, ``nbytes``) lives in memory no probe saw allocated
    cause: str
    why: str = ""  # why the domain is not observed here (the native observer's reason), if known
    call: int | None = None
    what: str | None = None
    nbytes: int = 0

    def describe(self) -> str:
        if self.cause == "declared":
            text = f"the backend declares memory domain {self.domain!r}, which no probe of this pair observes"
        else:
            text = (f"call {self.call}'s {self.what} ({self.nbytes} B) lives outside torch's allocator, in memory "
                    + ("the native domain did not see allocated during the call (a buffer the runtime made "
                       "before it)" if self.domain == NATIVE and not self.why else
                       f"of the {self.domain} domain, not observed here"))
        return f"{text}{f' ({self.why})' if self.why else ''}"


@dataclass(frozen=True)
class DomainPlan:
    """What a pair's memory verdict rests on."""

    held_on_native: bool
    unobserved: tuple[Unobserved, ...] = ()


def _inside(trace: MemoryTrace, ptr: int) -> bool:
    return any(a.ptr <= ptr < a.ptr + a.nbytes for a in trace.allocations)


def plan(declared: Sequence[str], probed: Iterable[str], own_probe: bool, native_why: str | None,
         outside: Mapping[int, Sequence[OutsideStorage]], native: Mapping[int, MemoryTrace],
         torch_cpu: Mapping[int, MemoryTrace] | None = None) -> DomainPlan:
    """Pure: the domains a pair is held on, from what the backend declares, the domains its probes
    observe (``probed``; the native one where ``native_why`` is ``None``), whether it has probes of its
    own, the results each probed call left outside torch's allocator and each call's native trace.  A
    result whose bytes torch's CPU allocator reported allocating during the call (``torch_cpu``: each
    call's trace) is torch's whatever its storage says of itself, and counted there already."""
    observed = set(probed) | ({NATIVE} if native_why is None else set())
    missing = [Unobserved(d, "declared", (native_why or "") if d == NATIVE else "")
               for d in dict.fromkeys(declared) if d not in observed]
    held = native_why is None and NATIVE in declared
    if not own_probe:
        for call, storages in sorted(outside.items()):
            trace = native.get(call)
            torch_trace = (torch_cpu or {}).get(call)
            for s in storages:
                if torch_trace is not None and _inside(torch_trace, s.ptr):
                    continue
                if trace is not None and (_inside(trace, s.ptr) or s.pool is not None):
                    held = True
                elif not any(u.cause == "result" for u in missing):  # the first one names the gap
                    missing.append(Unobserved(NATIVE, "result", native_why or "", call, s.what, s.nbytes))
    return DomainPlan(held, tuple(missing))


def judge_domains(unobserved: Sequence[Unobserved]) -> Check | None:
    """``skip`` naming the memory not observed (peak and residual then not judged); ``None`` when all was."""
    if not unobserved:
        return None
    reason = ("memory not observed, peak and residual not judged: "
              + "; ".join(u.describe() for u in unobserved))
    figures = {"unobserved": [{"domain": u.domain, "cause": u.cause, "call": u.call, "what": u.what,
                               "bytes": u.nbytes} for u in unobserved]}
    return Check(NAME, Status.SKIP, reason, figures)


CHECK = CheckSpec(NAME, 17, "the memory domains the backend declares and its results live in, against those its "
                  "probes observe", lambda j: judge_domains(j.unobserved))
