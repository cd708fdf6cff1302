"""Shrinking failing generated cases and writing standalone repro scripts.

A generated case that fails on a backend is shrunk by Hypothesis: the choice
sequence that draws its program (:func:`conformance.cases.generated.choices_of`)
is saved in a Hypothesis example database under a key naming the case and the
backend, and :func:`hypothesis.find` replays it (``Phase.reuse``) and shrinks it
(``Phase.shrink``) with the predicate "the engine still gives the same failing
verdict".  The database is a plain directory (``.hypothesis/`` under the results
directory by default), so shrunk examples survive between runs.

The repro script imports torch (and, for adapter backends other than inductor,
the backend's module): it rebuilds the model from the program as plain torch
code, runs the step like the harness does, and checks the failure against
numbers embedded from the harness (model peak and residual, or the float64
reference at the case's tolerance).  Exit status 1 means the fault shows.
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, find
from hypothesis import settings as Settings
from hypothesis.database import DirectoryBasedExampleDatabase, choices_to_bytes
from hypothesis.errors import NoSuchExample

from conformance.adapter import Backend, discover
from conformance.case import Case, CaseError, resolve
from conformance.engine import run_case
from conformance.result import Result

DEFAULT_DB = Path("results") / ".hypothesis"
#: Engine runs a shrink may spend (each is a full ``run_case``).
DEFAULT_MAX_RUNS = 80


@dataclass
class Shrunk:
    """A shrunk failing case, its verdict, and how the shrink went."""

    case: Case
    result: Result
    original: Result
    runs: int
    shrunk: bool


def _ok(result: Result) -> bool:
    return result.ok


def shrink(case: Case, backend: Backend, db_dir: Path = DEFAULT_DB, max_runs: int = DEFAULT_MAX_RUNS,
           original: Result | None = None) -> Shrunk:
    """Shrink a failing generated case to a minimal program with the same verdict.

    A case that passes, or that is not generated, comes back unchanged.
    """
    from conformance.cases import generated

    original = original or run_case(case, backend)
    program, choices = generated.program_of(case), generated.choices_of(case)
    if _ok(original) or program is None or choices is None:
        return Shrunk(case, original, original, 1, False)
    db_dir.mkdir(parents=True, exist_ok=True)
    db = DirectoryBasedExampleDatabase(str(db_dir))
    key = f"conformance-shrink:{case.id}@{backend.name}".encode()
    # The secondary corpus: replayed, and shrunk (a primary entry counts as already shrunk).
    db.save(key + b".secondary", choices_to_bytes(tuple(choices)))
    runs = 0
    last: dict[str, Any] = {}

    verdicts: dict[str, bool] = {}  # memoised: Hypothesis replays the minimal example at the end

    def still_fails(candidate: generated.Program) -> bool:
        nonlocal runs
        key_ = repr(candidate)
        if key_ in verdicts:
            return verdicts[key_]
        if runs >= max_runs:  # out of budget: nothing new counts any more
            return False
        runs += 1
        shrunk_case = generated.case_from_program(candidate, f"{case.id}-shrunk", case.seed)
        try:
            result = run_case(shrunk_case, backend)
        except Exception:  # a candidate the reference itself cannot run is not our failure
            verdicts[key_] = False
            return False
        verdicts[key_] = result.status == (original.raw_status or original.status)
        if verdicts[key_]:
            last[key_] = (shrunk_case, result)
        return verdicts[key_]

    settings = Settings(database=db, phases=[Phase.reuse, Phase.shrink], max_examples=1, deadline=None,
                        suppress_health_check=list(HealthCheck))
    try:
        minimal = find(generated.programs(program.family, program.train), still_fails, settings=settings,
                       database_key=key)
    except NoSuchExample:  # the saved choices did not replay (should not happen): keep the original
        return Shrunk(case, original, original, runs, False)
    shrunk_case, result = last.get(repr(minimal)) or (case, original)
    if shrunk_case is not case:
        shrunk_case = generated.case_from_program(minimal, f"{case.id}-shrunk", case.seed,
                                                  f"shrunk from {case.id}: " + shrunk_case.description)
    return Shrunk(shrunk_case, result, original, runs, minimal != program)


# -- the standalone script -----------------------------------------------------------------

_RUNNER = '''

# ---- how the harness runs one step ------------------------------------------------------
def compile_step(model, inputs):
    """A function running one step on the backend; returns what the step leaves to drop."""
{compile_body}


def run_step(call, model, inputs):
    if not TRAIN:
        with torch.no_grad():
            return call(*inputs)
    loss = call(*inputs)
    loss.backward()  # gradients stay on .grad, as in a training loop
    return loss.detach()


def measure(step, model):
    """Peak and residual bytes of the torch CPU allocator during one step (outputs dropped inside)."""
    import gc

    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    for p in model.parameters():
        p.grad = None
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = step()
        del out
    events = []

    def walk(event):
        kind, fields = event.typed
        if kind == _EventType.Allocation:
            if fields.device.type == "cpu":
                events.append((event.start_time_ns, fields.ptr, fields.alloc_size))
            return
        for child in event.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    live = peak = 0
    sizes = {{}}
    for _, ptr, size in sorted(events):
        if size > 0:
            sizes[ptr] = size
            live += size
        elif ptr in sizes:  # frees of memory allocated before the window do not count
            live -= sizes.pop(ptr)
        peak = max(peak, live)
    return peak, live


def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in flat(o)]


def named_results(out, model):
    named = {{f"output[{{i}}]": t.detach() for i, t in enumerate(flat(out))}}
    if TRAIN:
        named.update({{f"grad[{{n}}]": p.grad.detach() for n, p in model.named_parameters() if p.grad is not None}})
    return named


def main():
    torch.manual_seed(SEED)
    model = make_model()
    inputs = make_inputs()
    model.train(TRAIN)
    faults = []

    # parity against the float64 reference, run eagerly
    ref_model = copy.deepcopy(model).double()
    ref_inputs = tuple(t.double() if t.is_floating_point() else t.clone() for t in inputs)
    reference = named_results(run_step(ref_model, ref_model, ref_inputs), ref_model)
    call = compile_step(model, inputs)
    got = named_results(run_step(call, model, inputs), model)
    for name, ref in reference.items():
        ok = name in got and torch.allclose(got[name].double(), ref, rtol=RTOL, atol=ATOL, equal_nan=True)
        err = (got[name].double() - ref).abs().max().item() if name in got else float("inf")
        print(f"parity {{name}}: max_abs_err {{err:.3g}} (rtol {{RTOL}}, atol {{ATOL}}) {{'ok' if ok else 'MISMATCH'}}")
        if not ok:
            faults.append(f"{{name}} differs from the float64 reference (max abs err {{err:.3g}})")

    # memory: warm step, then two measured steps, as the harness does
    for p in model.parameters():
        p.grad = None
    del got
    out = run_step(call, model, inputs)
    del out
    if MODEL_PEAK_BYTES is not None:
        for step_no in range(2):
            peak, residual = measure(lambda: run_step(call, model, inputs), model)
            print(f"step {{step_no}}: peak {{peak}} B (model {{MODEL_PEAK_BYTES}} B), "
                  f"residual {{residual}} B (model {{MODEL_RESIDUAL_BYTES}} B)")
            if (peak != MODEL_PEAK_BYTES) if EXACT else (peak > MODEL_PEAK_BYTES + PEAK_SLACK_BYTES):
                faults.append(f"peak {{peak}} B {{'!=' if EXACT else '>'}} model peak {{MODEL_PEAK_BYTES}} B"
                              + (f" + slack {{PEAK_SLACK_BYTES}} B" if PEAK_SLACK_BYTES else ""))
            if residual != MODEL_RESIDUAL_BYTES:
                faults.append(f"residual {{residual}} B != model residual {{MODEL_RESIDUAL_BYTES}} B")
    if faults:
        print("FAULT: " + "; ".join(dict.fromkeys(faults)))
        sys.exit(1)
    print("no fault: the step matches the reference and the lifetime model")


if __name__ == "__main__":
    main()
'''

_INDUCTOR = '''    # plain torch.compile, as `backend="inductor"` runs it
    compiled = torch.compile(model, backend="inductor", dynamic=False)
    return compiled'''

_ADAPTER = '''    # the backend's own adapter (torch-conformance adapter API)
    sys.path.insert(0, {root!r})
    from {module} import {cls}
    from conformance.case import Case, Workload

    workload = Workload(model, tuple(inputs))
    case = Case({case_id!r}, {kind!r}, {family!r}, SEED, lambda seed: workload, trains=TRAIN)
    compiled = {cls}().compile(case, workload)

    def call(*args):
        out = compiled.run()  # runs the whole step (backward included) on the workload's inputs
        return out.outputs[0] if TRAIN else out.outputs

    if TRAIN:  # the adapter's step already ran backward: make the harness's backward a no-op
        class _Done:
            def __init__(self, t):
                self.t = t

            def backward(self):
                pass

            def detach(self):
                return self.t

        return lambda *args: _Done(call(*args))
    return call'''


def _compile_body(case: Case, backend: Backend) -> str:
    if backend.name == "inductor":
        return _INDUCTOR
    cls = type(backend)
    module = sys.modules[cls.__module__]
    file = Path(inspect.getfile(module)).resolve()
    root = file.parent
    for _ in range(cls.__module__.count(".")):
        root = root.parent
    return _ADAPTER.format(root=str(root), module=cls.__module__, cls=cls.__qualname__, case_id=case.id,
                           kind=case.kind, family=case.family)


def _docsafe(text: str) -> str:
    return text.replace(chr(92), "/").replace(chr(34) * 3, chr(39) * 3)


def repro_source(case: Case, backend: Backend, result: Result) -> str:
    """The standalone script for ``case`` failing on ``backend`` with ``result``."""
    from conformance.cases import gen_ops, generated

    program = generated.program_of(case)
    if program is None:
        raise CaseError(f"{case.id}: only generated cases can be written as standalone repros")
    memory = result.memory or {}
    header = (
        f'"""Repro: {case.id} on backend {backend.name!r}: {result.status}.\n\n'
        f"{_docsafe(result.reason)}\n\n"
        f"{case.description}\n"
        f"Written by torch-conformance (torch {result.versions.get('torch', '?')}); "
        "run it with plain `python`: exit status 1 means the fault shows.\n"
        f"Program: {json.dumps(program.to_json(), separators=(',', ':'))}\n"
        '"""\n'
    )
    consts = [
        "import copy",
        "import sys",
        "",
        "import torch",
        "",
        f"SEED = {case.seed}",
        f"TRAIN = {case.trains}",
        f"RTOL, ATOL = {case.tolerance.rtol!r}, {case.tolerance.atol!r}",
        f"MODEL_PEAK_BYTES = {memory.get('model_peak_bytes')!r}  # lifetime model ({memory.get('model_source')})",
        f"MODEL_RESIDUAL_BYTES = {memory.get('model_residual_bytes')!r}",
        f"HARNESS_MEASURED = {{'peak': {memory.get('measured_peak_bytes')!r}, "
        f"'residual_per_step': {memory.get('residual_per_step')!r}}}",
        f"EXACT = {backend.capabilities.exact_memory!r}  # exact backends must match the model byte for byte",
        f"PEAK_SLACK_BYTES = {backend.peak_slack_bytes!r}",
        "",
    ]
    parts = [header, "\n".join(consts)]
    if program.uses_custom_ops:
        parts.append("# ---- custom ops used by the program (plain torch.library) ----\n"
                     + inspect.getsource(gen_ops).split('"""', 2)[2].replace("import torch\n", "", 1))
    source = generated.program_source(program).replace("import torch\n", "", 1)
    parts.append("# ---- the program, as plain torch ----\n" + source)
    parts.append(_RUNNER.format(compile_body=_compile_body(case, backend)))
    return "\n".join(parts)


def write_repro(case: Case, backend_name: str | Backend, result: Result, path: Path | str) -> Path:
    """Write the standalone repro for ``case``'s ``result`` on the backend to ``path``."""
    backend = discover().get(backend_name) if isinstance(backend_name, str) else backend_name
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(repro_source(case, backend, result), encoding="utf-8")
    return path


def main_repro(case_id: str, backend: str | Backend, out: Path | str, db_dir: Path | str = DEFAULT_DB,
               max_runs: int = DEFAULT_MAX_RUNS, no_shrink: bool = False) -> int:
    """``conformance repro CASE --backend B -o repro.py``: run, shrink, write; 0 when written or nothing fails."""
    case = resolve(case_id)
    if case is None:
        raise CaseError(f"unknown case {case_id!r}")
    backend_obj = discover().get(backend) if isinstance(backend, str) else backend
    original = run_case(case, backend_obj)
    if _ok(original):
        print(f"{case.id} on {backend_obj.name}: {original.status}; nothing to reproduce")
        return 0
    if no_shrink:
        shrunk = Shrunk(case, original, original, 1, False)
    else:
        shrunk = shrink(case, backend_obj, Path(db_dir), max_runs, original)
    path = write_repro(shrunk.case, backend_obj, shrunk.result, out)
    program = shrunk.case.program  # type: ignore[attr-defined]
    n_ops = len(program.ops) + len(program.body)
    print(f"{case.id} on {backend_obj.name}: {original.status}: {original.reason}")
    print(f"shrunk in {shrunk.runs} runs to {n_ops} ops: {shrunk.result.status}: {shrunk.result.reason}")
    print(f"wrote {path}")
    return 0


def auto_repro(case: Case, backend: Backend, result: Result, results_dir: Path | str,
               max_runs: int = 20) -> Path | None:
    """For the run's plugin: shrink a failing generated case and write its repro next to the results.

    Writes ``<results_dir>/repros/<case>@<backend>.py`` (Hypothesis database in
    ``<results_dir>/.hypothesis``) and returns the path; ``None`` for a passing or
    non-generated case.  Costs up to ``max_runs`` extra engine runs.
    """
    from conformance.cases import generated

    if _ok(result) or generated.program_of(case) is None:
        return None
    results_dir = Path(results_dir)
    shrunk = shrink(case, backend, results_dir / ".hypothesis", max_runs, result)
    return write_repro(shrunk.case, backend, shrunk.result, results_dir / "repros" / f"{case.id}@{backend.name}.py")
