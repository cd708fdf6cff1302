"""Shrinking failing cases and writing repro scripts that check the check that failed.

A generated case that fails on a backend is shrunk by Hypothesis: the choice
sequence that draws its program (:func:`conformance.cases.generated.choices_of`)
is saved in a Hypothesis example database under a key naming the case and the
backend, and :func:`hypothesis.find` replays it (``Phase.reuse``) and shrinks it
(``Phase.shrink``) with the predicate "the engine still gives the same failing
verdict".  The database is a plain directory (``.hypothesis/`` under the results
directory by default), so shrunk examples survive between runs.

Every script records the check that failed (``FAILED_CHECK``: ``parity``, ``peak``,
``residual``, ``program``, ``backward-inputs``, ``pool``, ``baseline``, or ``None`` when
the verdict came from no check: ``fail-compile``, ``fail-run``) and exits 1 exactly when
that check still fails, 0 when it passes.  Two kinds:

* standalone (a generated case whose failing check is parity, peak or residual, or a
  compile or run error): imports torch (and, for adapter backends other than inductor, the
  backend's module), rebuilds the model from the program as plain torch code, runs the step
  like the harness does, and checks the failure against numbers embedded from the harness
  (model peak and residual, or the float64 reference at the case's tolerance);
* harness-based (a case that is not generated, or a check plain torch cannot observe: the
  generated program's lifetimes, backward inputs, pools, the baseline): says so in its
  docstring, imports the installed harness, rebuilds the case (from its embedded program, or
  by id) and runs it on the backend with :func:`conformance.run.engine.run_case`.  Not shrunk
  when the case is not generated.

Both carry the exact harness rerun command.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, find
from hypothesis import settings as Settings
from hypothesis.database import DirectoryBasedExampleDatabase, choices_to_bytes
from hypothesis.errors import NoSuchExample

from conformance.api.adapter import Backend, discover
from conformance.api.case import Case, CaseError, resolve
from conformance.api.result import MemoryFigures, Result
from conformance.api.verdict import Status, combine, registered_checks
from conformance.run import rerun
from conformance.run.engine import run_case
from conformance.run.options import DEFAULT_TIMEOUT_S
from conformance.util.paths import inside, pair_file_name
from conformance.util.text import plural, printable
from conformance.util.writes import write_whole

DEFAULT_DB = Path("results") / ".hypothesis"
#: Engine runs a shrink may spend (each is a full ``run_case``).
DEFAULT_MAX_RUNS = 80
#: ``conformance repro``'s exit status when the case does not fail on the backend (nothing written).
EXIT_NOTHING_TO_REPRODUCE = 3


def standalone_checks() -> frozenset[str]:
    """Checks a standalone (torch-only) script checks itself (the registry's ``standalone`` ones); any
    other check needs the harness."""
    return frozenset(spec.name.value for spec in registered_checks() if spec.standalone)


#: A progress line every this many shrink runs (and one per improvement).
PROGRESS_EVERY = 5
#: Shrunk candidates that may crash or hang (when the original did not) before a shrink stops:
#: each costs a fresh worker, and a backend that crashes on smaller programs is a finding of its own.
MAX_CANDIDATE_CRASHES = 3

#: A shrunk candidate's time limit when isolated: this many times what the original pair took, at
#: least :data:`CANDIDATE_MIN_TIMEOUT_S` (a cold compile) and at most the run's own limit, so a
#: backend that hangs on smaller programs costs minutes, not the run's limit three times over.
CANDIDATE_TIMEOUT_FACTOR = 10
CANDIDATE_MIN_TIMEOUT_S = 60.0

#: How a shrink gets a candidate's verdict: in this process, or in the isolation worker.
RunCase = Callable[[Case], Result]


@dataclass
class Shrunk:
    """A shrunk failing case, its verdict, and how the shrink went."""

    case: Case
    result: Result
    original: Result
    runs: int
    shrunk: bool
    #: candidates that crashed or hung (when the original did not), with the first one's reason
    crashed: int = 0
    crash_reason: str = ""

    def note(self) -> str | None:
        """What a result should say about the shrink beyond its repro (crashing candidates)."""
        if not self.crashed:
            return None
        return (f"shrink: {plural(self.crashed, 'smaller candidate')} crashed or hung the backend ({self.crash_reason})"
                + ("; the repro is of the unshrunk case" if not self.shrunk else ""))


def _ok(result: Result) -> bool:
    return result.ok


def fails(result: Result) -> bool:
    """The backend's own verdict (before a manifest) is a failure: something to reproduce."""
    return Status.parse(result.raw_status or result.status).is_failure


def failing_check(result: Result) -> str | None:
    """The check that decided a failing verdict; ``None`` for a verdict no check made (compile, run errors)."""
    deciding = combine(result.checks)
    return deciding.name.value if deciding is not None else None


#: what a standalone script's parity check compares: the first call's outputs and gradients
_STANDALONE_STATE = re.compile(r"call 0: (output|grad)\[")
_STATE = re.compile(r"(call \d+): ([^:]+\]\S*):")


def failing_state(result: Result) -> tuple[str, str] | None:
    """The call and the piece of state (``("call 3", "buffer[bn.running_mean]")``) a parity failure names."""
    deciding = combine(result.checks)
    if deciding is None or deciding.name.value != "parity":
        return None
    m = _STATE.match(deciding.reason)
    return (m.group(1), m.group(2)) if m else None


def _standalone_state(result: Result) -> bool:
    """Whether a torch-only script sees the failing state: the first call's results, not later calls or inputs,
    buffers, parameters."""
    state = failing_state(result)
    return state is None or bool(_STANDALONE_STATE.match(f"{state[0]}: {state[1]}"))


def _n_ops(program: Any) -> int:
    return len(program.ops) + len(program.body)


def shrink(case: Case, backend: Backend, db_dir: Path = DEFAULT_DB, max_runs: int = DEFAULT_MAX_RUNS,
           original: Result | None = None, progress: Callable[[str], None] | None = None,
           run: RunCase | None = None) -> Shrunk:
    """Shrink a failing generated case to a minimal program with the same verdict and failing check.

    A case that passes, or that is not generated, comes back unchanged.  ``progress`` gets
    a line per smaller failing program found and one every :data:`PROGRESS_EVERY` runs.
    ``run`` gives each candidate's verdict (default: :func:`run_case` in this process;
    :func:`isolated` runs them in the isolation worker, where a crash is a ``crash`` verdict).
    A crash shrinks like any other verdict; when the original did not crash, the shrink stops
    after :data:`MAX_CANDIDATE_CRASHES` candidates that did.
    """
    from conformance.cases import generated

    run = run or (lambda c: run_case(c, backend))
    original = original or run(case)
    program, choices = case.program, generated.choices_of(case)
    if not fails(original) or program is None or choices is None:
        return Shrunk(case, original, original, 1, False)
    db_dir.mkdir(parents=True, exist_ok=True)
    db = DirectoryBasedExampleDatabase(str(db_dir))
    key = f"conformance-shrink:{case.id}@{backend.name}".encode()
    # The secondary corpus: replayed, and shrunk (a primary entry counts as already shrunk).
    db.save(key + b".secondary", choices_to_bytes(tuple(choices)))
    shrinker = _Shrinker(case, backend, run, original, program, max_runs, progress)
    settings = Settings(database=db, phases=[Phase.reuse, Phase.shrink], max_examples=1, deadline=None,
                        suppress_health_check=list(HealthCheck))
    crashes = shrinker.crashes
    try:
        minimal = find(generated.programs(program.family, program.train), shrinker.still_fails, settings=settings,
                       database_key=key)
    except NoSuchExample:  # the saved choices did not replay (should not happen): keep the original
        return Shrunk(case, original, original, shrinker.runs, False, len(crashes), crashes[0] if crashes else "")
    shrunk_case, result = shrinker.last.get(repr(minimal)) or (case, original)
    if shrunk_case is not case:
        shrunk_case = generated.case_from_program(minimal, f"{case.id}-shrunk", case.seed,
                                                  f"shrunk from {case.id}: " + shrunk_case.description)
    return Shrunk(shrunk_case, result, original, shrinker.runs, minimal != program, len(crashes),
                  crashes[0] if crashes else "")


class _Shrinker:
    """Hypothesis's test while it shrinks: whether a candidate program fails as the original did, run within
    the budget and memoised (Hypothesis replays the saved example first and the minimal one at the end; the
    saved one is the original, whose verdict is known)."""

    def __init__(self, case: Case, backend: Backend, run: RunCase, original: Result, program: Any, max_runs: int,
                 progress: Callable[[str], None] | None) -> None:
        self.case, self.backend, self.run, self.max_runs, self.progress = case, backend, run, max_runs, progress
        self.runs = 0
        self.crashes: list[str] = []
        self.verdicts: dict[str, bool] = {repr(program): True}
        self.last: dict[str, tuple[Case, Result]] = {repr(program): (case, original)}
        self.want = (original.raw_status or original.status, failing_check(original))
        self.best = _n_ops(program)

    def report(self, improved: bool) -> None:
        if self.progress is not None and (improved or self.runs % PROGRESS_EVERY == 0):
            self.progress(f"shrinking {self.case.id} on {self.backend.name}: run {self.runs}/{self.max_runs}, "
                          f"{plural(self.best, 'op')} left" + (" (smaller program still fails)" if improved else ""))

    def still_fails(self, candidate: Any) -> bool:
        from conformance.cases import generated

        key_ = repr(candidate)
        if key_ in self.verdicts:
            return self.verdicts[key_]
        if self.runs >= self.max_runs or len(self.crashes) >= MAX_CANDIDATE_CRASHES:  # out of budget: nothing new
            return False
        self.runs += 1
        shrunk_case = generated.case_from_program(candidate, f"{self.case.id}-shrunk", self.case.seed)
        try:
            result = self.run(shrunk_case)
        except Exception:  # a candidate the reference itself cannot run is not our failure
            self.verdicts[key_] = False
            self.report(False)
            return False
        status = result.raw_status or result.status
        if status in (Status.CRASH, Status.TIMEOUT) and status != self.want[0]:
            self.crashes.append(result.reason)
        self.verdicts[key_] = (status, failing_check(result)) == self.want
        improved = self.verdicts[key_] and _n_ops(candidate) < self.best
        if self.verdicts[key_]:
            self.last[key_] = (shrunk_case, result)
            self.best = min(self.best, _n_ops(candidate))
        self.report(improved)
        return self.verdicts[key_]


def candidate_timeout_s(original: Result, timeout_s: float) -> float:
    """The time limit of each shrunk candidate of ``original`` (see :data:`CANDIDATE_TIMEOUT_FACTOR`)."""
    took = original.timing.get("isolated_wall_s", original.timing.get("pair_s"))
    if took is None:
        return timeout_s
    return min(timeout_s, max(CANDIDATE_MIN_TIMEOUT_S, CANDIDATE_TIMEOUT_FACTOR * took))


def isolated(spec: str, timeout_s: float) -> RunCase:
    """Verdicts from the shared isolation worker (``spec`` names the backend there): a crash or hang of
    the backend is that case's ``crash``/``timeout`` verdict, never this process's end."""
    from conformance.run.isolation import run_case_isolated

    return lambda case: run_case_isolated(case, spec, timeout_s)


# -- the standalone script -----------------------------------------------------------------

#: the runners' modules (real Python, checked by ruff and mypy), copied as text from this line on
_COPIED_FROM = "# ---- copied into the script from here ----\n"
_COMPILE_BODY = re.compile(r"    # <compile body>.*?    # </compile body>\n", re.DOTALL)


def _runner(module: str) -> str:
    """The text a script runs after its settings: ``module``'s, from the marker line on."""
    text = resources.files("conformance.run").joinpath(f"{module}.py").read_text(encoding="utf-8")
    return text.split(_COPIED_FROM, 1)[1]


_INDUCTOR = '''    # plain torch.compile, as `backend="inductor"` runs it
    compiled = torch.compile(model, backend="inductor", dynamic=False)
    return compiled'''

_ADAPTER = '''    # the backend's own adapter (torch-conformance adapter API)
    sys.path.insert(0, {root!r})
    from {module} import {cls}
    from conformance.api.case import Case, Workload

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


def _module_root(module_name: str) -> str:
    """The directory ``module_name`` is imported from (what goes on ``sys.path`` to import it again)."""
    file = Path(inspect.getfile(sys.modules[module_name])).resolve()
    root = file.parent
    for _ in range(module_name.count(".")):
        root = root.parent
    return str(root)


def _compile_body(case: Case, backend: Backend) -> str:
    if backend.name == "inductor":
        return _INDUCTOR
    cls = type(backend)
    return _ADAPTER.format(root=_module_root(cls.__module__), module=cls.__module__, cls=cls.__qualname__,
                           case_id=case.id, kind=case.kind, family=case.family)


def backend_spec(backend: Backend) -> str:
    """How a run names ``backend``: its registered name, or ``module:Class`` for an ad hoc one."""
    cls = type(backend)
    try:
        if type(discover().get(backend.name)) is cls:
            return backend.name
    except Exception:  # not registered (a planted test backend, a --backend module:Class)
        pass
    return f"{cls.__module__}:{cls.__qualname__}"


def _docsafe(text: str) -> str:
    return text.replace(chr(92), "/").replace(chr(34) * 3, chr(39) * 3)


def rerun_command(case_id: str, spec: str) -> str:
    """The pair's rerun command, ``--cases`` sources included (:mod:`conformance.run.rerun`)."""
    return rerun.rerun_command(case_id, spec)


def repro_source(case: Case, backend: Backend, result: Result, spec: str | None = None,
                 original_id: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """The script for ``case`` failing on ``backend`` with ``result``: exits 1 while the failing check fails.

    ``spec`` names the backend as the run did (default: :func:`backend_spec`); ``original_id``
    is the case the run failed on, when ``case`` was shrunk from it (for the rerun command);
    ``timeout_s`` the limit of a harness-based script's isolated run (a crash or a timeout).
    """
    from conformance.cases import generated

    spec = spec or backend_spec(backend)
    program = case.program if isinstance(case.program, generated.Program) else None
    check = failing_check(result) if fails(result) else None
    status = str(result.raw_status or result.status)
    # a crash or timeout is shown by the harness's own step (a worker's exit), not by a script's exit code
    # a program whose batch changes every call fails at a call's shapes the standalone script never makes
    standalone = (program is not None and (check is None or check in standalone_checks())
                  and status not in ("crash", "timeout") and _standalone_state(result) and not program.batches)
    state = failing_state(result) if check is not None else None
    rerun = rerun_command(original_id or case.id, spec)
    how = _how(backend, program, check, state, standalone)
    header = _repro_header(case, backend, result, program, check, status, state, how, rerun)
    consts = [
        "import copy",
        "import json",
        "import sys",
        "",
        "import torch",
        "",
        f"CASE_ID = {case.id!r}",
        f"SEED = {case.seed}",
        f"TRAIN = {case.trains}",
        f"FAILED_CHECK = {check!r}  # the check this repro is for: exit 1 while it fails",
        f"FAILED_STATUS = {status!r}",
        f"FAILED_STATE = {state!r}  # (call, piece of state) a parity failure names",
        f"RERUN = {rerun!r}",
    ]
    if not standalone:
        consts += _harness_consts(backend, spec, program, timeout_s)
        return "\n".join([header, "\n".join(consts), _runner("repro_harness")])
    assert program is not None
    return "\n".join([header, *_standalone_parts(case, backend, result, program, consts)])


def _how(backend: Backend, program: Any, check: str | None, state: tuple[str, str] | None, standalone: bool) -> str:
    """How the script shows the failure, and why it needs the harness where it does."""
    if standalone:
        return "Standalone: plain torch" + ("" if backend.name == "inductor" else " and the backend's adapter module")
    why = ("its batch changes on every call: the harness runs each call at its own shapes"
           if program is not None and program.batches else
           f"the {check!r} check needs the harness: a torch-only script cannot observe it"
           if program is not None else "the case is not generated: it is built by its registered builder")
    if program is not None and state is not None:
        why = f"{state[0]}'s {state[1]} is checked by the harness, which makes every call and records the state"
    return f"Harness-based ({why}); it runs the installed torch-conformance on the case"


def _repro_header(case: Case, backend: Backend, result: Result, program: Any, check: str | None, status: str,
                  state: tuple[str, str] | None, how: str, rerun: str) -> str:
    """The script's docstring: the failure, its reason, the case, how to run it, and the program."""
    return (
        f'"""Repro: {case.id} on backend {backend.name!r}: {result.raw_status or result.status}'
        f"{f' (check {check})' if check else ''}.\n\n"
        f"{_docsafe(result.reason)}\n\n"
        + (f"Failed state: {state[0]}: {_docsafe(state[1])} (FAILED_STATE).\n\n" if state is not None else "")
        + f"{_docsafe(case.description)}\n"
        f"Written by torch-conformance (torch {result.versions.get('torch', '?')}); "
        f"run it with plain `python`: exit status 1 means the failing check "
        f"({check or status}) still fails, 0 that it passes.\n"
        f"{how}.\n"
        f"Rerun in the harness: {rerun}\n"
        + (f"Program: {json.dumps(program.to_json(), separators=(',', ':'))}\n" if program is not None else "")
        + '"""\n'
    )


def _harness_consts(backend: Backend, spec: str, program: Any, timeout_s: float) -> list[str]:
    """A harness-based script's settings: where the harness and the backend are, and what to run."""
    harness_root = str(Path(__file__).resolve().parents[2])  # the directory holding conformance/
    roots = list(dict.fromkeys([harness_root, _module_root(type(backend).__module__)]))
    program_json = json.dumps(program.to_json(), separators=(",", ":")) if program is not None else None
    return [
        "import os",
        f"BACKEND_SPEC = {spec!r}",
        f"SEARCH_PATH = {roots!r}",
        f"CASE_SOURCES = {os.environ.get('CONFORMANCE_CASES', '')!r}",
        f"PROGRAM = {f'json.loads({program_json!r})' if program_json else None}",
        f"TIMEOUT_S = {timeout_s!r}  # a crash or timeout is run in the harness's isolation worker",
        "",
    ]


def _standalone_parts(case: Case, backend: Backend, result: Result, program: Any, consts: list[str]) -> list[str]:
    """A standalone script after its docstring: its settings with the figures it holds the backend to, the
    custom ops the program uses, the program as plain torch, and the runner."""
    from conformance.cases import gen_ops, generated

    memory = result.memory or MemoryFigures()
    consts = [
        *consts,
        f"RTOL, ATOL = {case.tolerance.rtol!r}, {case.tolerance.atol!r}",
        f"MODEL_PEAK_BYTES = {memory.model_peak_bytes!r}  # lifetime model ({memory.model_source})",
        f"MODEL_RESIDUAL_BYTES = {memory.model_residual_bytes!r}",
        f"HARNESS_MEASURED = {{'peak': {memory.measured_peak_bytes!r}, "
        f"'residual_per_step': {memory.residual_per_step!r}}}",
        f"EXACT = {backend.capabilities.exact_memory!r}  # exact backends must match the model byte for byte",
        f"PEAK_SLACK_BYTES = {backend.peak_slack_bytes!r}",
        "",
    ]
    parts = ["\n".join(consts)]
    if program.uses_custom_ops:
        parts.append("# ---- custom ops used by the program (plain torch.library) ----\n"
                     + inspect.getsource(gen_ops).split('"""', 2)[2].replace("import torch\n", "", 1))
    source = generated.program_source(program).replace("import torch\n", "", 1)
    parts.append("# ---- the program, as plain torch ----\n" + source)
    parts.append(_COMPILE_BODY.sub(lambda _: _compile_body(case, backend) + "\n", _runner("repro_standalone")))
    return parts


def write_repro(case: Case, backend_name: str | Backend, result: Result, path: Path | str,
                spec: str | None = None, original_id: str | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """Write the repro script for ``case``'s ``result`` on the backend to ``path``."""
    backend = discover().get(backend_name) if isinstance(backend_name, str) else backend_name
    if spec is None and isinstance(backend_name, str):
        spec = backend_name
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    source = repro_source(case, backend, result, spec, original_id, timeout_s)
    write_whole(path, lambda staged: staged.write_text(source, encoding="utf-8"))  # never a torn script
    return path


def _stderr(line: str) -> None:
    print(printable(line), file=sys.stderr, flush=True)


def _say(line: str) -> None:
    """A line for the terminal: ids, names and reasons come from cases and backends."""
    print(printable(line))


def main_repro(case_id: str, backend: str | Backend, out: Path | str, db_dir: Path | str = DEFAULT_DB,
               max_runs: int = DEFAULT_MAX_RUNS, no_shrink: bool = False,
               progress: Callable[[str], None] | None = _stderr, timeout_s: float | None = None) -> int:
    """``conformance repro CASE --backend B -o repro.py``: run, shrink (generated cases), write.

    0 when written; :data:`EXIT_NOTHING_TO_REPRODUCE` (nothing written) when the case does not
    fail on the backend.  Shrink progress goes to ``progress`` (stderr by default).  With
    ``timeout_s`` every run (the case's and each candidate's) is made in the isolation worker with
    that limit, so a backend that crashes or hangs gives a verdict (which shrinks like any other)
    instead of ending the command; a backend object (not a name or spec) runs in this process.
    """

    case = resolve(case_id)
    if case is None:
        raise CaseError(f"unknown case {case_id!r}")
    spec = backend if isinstance(backend, str) else None
    backend_obj = discover().get(backend) if isinstance(backend, str) else backend
    run: RunCase = (isolated(spec, timeout_s) if spec is not None and timeout_s is not None
                    else lambda c: run_case(c, backend_obj, spec=spec))
    original = run(case)
    if not fails(original):
        _say(f"{case.id} on {backend_obj.name}: {original.status}: no failing check on this backend, "
             f"nothing to reproduce (exit {EXIT_NOTHING_TO_REPRODUCE}, nothing written)")
        return EXIT_NOTHING_TO_REPRODUCE
    program = case.program
    if no_shrink or program is None:
        shrunk = Shrunk(case, original, original, 1, False)
    else:
        candidates = (isolated(spec, candidate_timeout_s(original, timeout_s))
                      if spec is not None and timeout_s is not None else run)
        shrunk = shrink(case, backend_obj, Path(db_dir), max_runs, original, progress, candidates)
    path = write_repro(shrunk.case, backend_obj, shrunk.result, out, spec, case.id, timeout_s or DEFAULT_TIMEOUT_S)
    check = failing_check(original)
    _say(f"{case.id} on {backend_obj.name}: {original.status}{f' (check {check})' if check else ''}: "
         f"{original.reason}")
    if program is None:
        _say("not shrunk: the case is not generated")
    elif not no_shrink:
        _say(f"shrunk in {plural(shrunk.runs, 'run')} to {plural(_n_ops(shrunk.case.program), 'op')}: "
             f"{shrunk.result.status}: {shrunk.result.reason}")
    if (note := shrunk.note()) is not None:
        _say(note)
    _say(f"wrote {path} (exit 1 while {check or original.status} fails); rerun in the harness: "
         f"{rerun_command(case.id, spec or backend_spec(backend_obj))}")
    return 0


def auto_repro(case: Case, backend: Backend, result: Result, results_dir: Path | str,
               max_runs: int = 20, spec: str | None = None,
               progress: Callable[[str], None] | None = None,
               run: RunCase | None = None) -> tuple[Path | None, str | None]:
    """For the run's plugin: write a failing case's repro next to the results, shrunk if generated.

    Writes ``<results_dir>/repros/<case>@<backend>.py`` (:func:`repro_path`; Hypothesis database in
    ``<results_dir>/.hypothesis``).  Returns the path (``None`` when the backend's verdict is no
    failure) and a note about the shrink, if any.  A generated case's shrink costs up to ``max_runs``
    extra engine runs, made by ``run`` (see :func:`shrink`).
    """
    if not fails(result):
        return None, None
    results_dir = Path(results_dir)
    shrunk = shrink(case, backend, results_dir / ".hypothesis", max_runs, result, progress, run)
    path = write_repro(shrunk.case, backend, shrunk.result, repro_path(results_dir, case.id, backend.name),
                       spec, case.id)
    return path, shrunk.note()


def repro_path(results_dir: Path, case_id: str, backend_name: str) -> Path:
    """``<results_dir>/repros/<case>@<backend>.py``, of safe names (:func:`pair_file_name`): whatever the
    id and the name hold, the file lies in that directory, and two pairs never share one."""
    return inside(results_dir / "repros", pair_file_name(case_id, backend_name, ".py"))


def run_repro(case: Case, backend: Backend, spec: str, result: Result, results_dir: Path | str,
              isolate: bool, timeout_s: float) -> tuple[str | None, str | None]:
    """:func:`auto_repro` for a run: when the run isolates, every shrink candidate runs in the isolation
    worker, so a backend that crashes or hangs on one costs that candidate, not the run.
    Returns ``(path, note)``."""
    if not fails(result):  # an unexpected pass (xpass): nothing to reproduce
        return None, None
    try:
        path, note = auto_repro(case, backend, result, results_dir, spec=spec,
                                run=isolated(spec, candidate_timeout_s(result, timeout_s)) if isolate else None)
    except Exception as exc:  # a repro that cannot be made must not cost the verdict
        return None, f"repro not written: {type(exc).__name__}: {exc}"
    return (str(path) if path is not None else None), note
