"""The conformance run inside pytest: case x backend pairs as test items, results as JSON lines.

:mod:`conformance.run.plugin` (the light ``pytest11`` entry point) turns this on with :func:`activate`
once a session is a conformance run; only then is torch imported.  Everything the CLI does goes
through here, so pytest's own machinery (``-k``, ``-x``, ``-n`` through pytest-xdist,
``--junitxml``) works on the suite.

The run's state (checked options, selection, isolation, baseline, interrupted) lives in
``config.stash[RUN_KEY]``; a pair's result goes from the test (:func:`execute_pair`) to its report
through ``item.stash[RESULT_KEY]``.  Each result travels on its test report (which pytest-xdist
ships to the controller), and the controller appends it to the run's staged results file as soon
as it arrives and moves that into place when the session ends (:mod:`conformance.output.outdir`), so an
interrupted run keeps every finished verdict and never truncates an earlier one.  When the
session ends the controller calls the ``pytest_conformance_finished`` hook with the run's
:class:`~conformance.run.stats.RunStats` (the CLI implements it).

Selection happens once, in the controller: an xdist worker gets the selected case ids and backend
specs in ``workerinput`` (``pytest_configure_node``) and only resolves those ids to live objects
(backend instances, case builders), which ``workerinput`` cannot carry.  Every worker so collects
the same items in the same order, as xdist needs, whatever the globs would match in its process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import time
import traceback
import uuid
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conformance.api.adapter import Backend, BackendError, BackendRegistry, discover
from conformance.api.case import (
    BROKEN_PLUGINS,
    LAZY,
    LEFT_OUT,
    SOURCES_ENV,
    UNAVAILABLE,
    Case,
    CaseError,
    all_cases,
    families,
    load_source,
    resolver_ids,
    select_cases,
)
from conformance.api.result import Result
from conformance.api.verdict import Status
from conformance.checks.baseline import Baseline
from conformance.checks.manifest import Manifest, ManifestError, apply, load_manifest
from conformance.output.outdir import OutDirError, RunDir, claim, held
from conformance.run import rerun
from conformance.run.interrupts import watch_signals
from conformance.run.options import RunOptions, hand_over
from conformance.run.stats import RunStats
from conformance.util.phases import pair_wall_s
from conformance.util.result_cache import default_root, merge_counts
from conformance.util.text import clip, plural, printable
from conformance.util.writes import DiskFull, no_room

if TYPE_CHECKING:
    from conformance.run.sharding import Shard

RESULT_ATTR = "conformance_result"
PLUGIN = "conformance-run"
WRITER = "conformance-writer"


@dataclass(frozen=True)
class Pair:
    case: Case
    backend: Backend
    manifest: Manifest
    spec: str  # how a worker process finds the backend again: its name or module:Class

    @property
    def id(self) -> str:
        return f"{self.case.id}@{self.backend.name}"


@dataclass
class Selection:
    """What a run covers; built once per process from the options, errors are usage errors."""

    backends: list[Backend]
    cases: list[Case]
    manifests: dict[str, Manifest]
    registry: BackendRegistry
    warnings: list[str] = field(default_factory=list)
    specs: dict[str, str] = field(default_factory=dict)

    def pairs(self) -> list[Pair]:
        return [Pair(c, b, self.manifests[b.name], self.specs.get(b.name, b.name))
                for b in self.backends for c in self.cases]


def select(backend_names: list[str], case_globs: list[str], generated: int = 0, hypothesis_seed: int = 0,
           remember: bool = False) -> Selection:
    """Resolve backends, cases and manifests; raises BackendError, CaseError or ManifestError.

    ``generated`` widens the default generated set by that many cases drawn from ``hypothesis_seed``.
    ``remember``: record the names for the next command's early refusals (:func:`record_catalog`) first."""
    registry = discover()
    if remember:
        record_catalog(registry)
    if generated:
        from conformance.cases.generated import register_generated

        register_generated(generated, hypothesis_seed)
    specs: dict[str, str] = {}
    if backend_names:
        backends = []
        for name in dict.fromkeys(backend_names):
            backend = registry.get(name)
            backends.append(backend)
            specs[backend.name] = name
    else:
        backends = registry.usable()
    cases = select_cases(case_globs)
    manifests = {b.name: load_manifest(b.name, getattr(b, "manifest_path", None)) for b in backends}
    warnings = [f"plugin {name}: {problem}" for name, problem in registry.broken.items()]
    warnings += [f"case plugin {name}: {problem}" for name, problem in BROKEN_PLUGINS.items()]
    for m in manifests.values():
        for e in m.entries:
            if e.reason.startswith("UNEXPLAINED"):
                warnings.append(f"manifest {m.path}: entry {e.label} still needs a reason")
        for e in m.unsized(c.id for c in cases):
            warnings.append(f"manifest {m.path}: entry {e.case!r} expects {e.status} without its excess "
                            "(excess = BYTES); it fails until --update-manifest records it")
    ids = [c.id for c in all_cases()]  # opt-in cases (the zoo) too
    if not case_globs:  # staleness only means something against the full case list
        for m in manifests.values():
            for e in m.stale(ids):
                if e.case.startswith(tuple(LAZY)):
                    continue  # a lazy family's case (the op sweep): not registered in a run that names none
                warnings.append(f"manifest {m.path}: entry {e.case!r} ({e.status}) matches no case: stale")
    return Selection(backends, cases, manifests, registry, warnings, specs)


def record_catalog(registry: BackendRegistry) -> None:
    """The backend names and case ids loaded here, recorded so that a later command can refuse a name outside
    them before it imports torch (:mod:`conformance.util.catalog`); a lazy family's ids are left to loading."""
    from conformance.util import catalog

    lazy_families = {family for family, _ in LAZY.values()}
    cases = [c for c in all_cases() if c.family not in lazy_families]
    sources = [s for s in os.environ.get(SOURCES_ENV, "").split(os.pathsep) if s]
    catalog.record(catalog.Catalog(
        backends=sorted(registry.backends), broken=sorted(registry.broken), ids=[c.id for c in cases],
        resolvers=resolver_ids(), lazy=list(LAZY), families=families(cases), unavailable=dict(UNAVAILABLE),
        left_out=dict(LEFT_OUT), lazy_families={family: f"{prefix}*" for prefix, (family, _) in LAZY.items()}),
        sources)


def new_backends(selected: Sequence[str], kept: Sequence[Result]) -> list[str]:
    """The selected backends that no verdict kept from earlier runs has (a plugin installed since): none when
    nothing is kept, as in a fresh folder every backend is new."""
    before = {r.backend for r in kept}
    return [name for name in selected if before and name not in before]


@dataclass
class RunState:
    """One session's run: checked options, what it covers, how pairs run; in ``config.stash[RUN_KEY]``."""

    values: dict[str, Any]  # the checked options by name (conformance.run.options.validate)
    isolate: bool
    timeout_s: float
    options: RunOptions  # what every pair's engine run is asked (steps)
    baseline: Baseline | None  # --baseline: the earlier run every pair is held to
    repro_dir: Path | None  # where failing generated cases' repros go (None: --no-auto-repro)
    selection: Selection | None = None  # resolved on first use, once per process
    interrupted: bool = False


RUN_KEY = pytest.StashKey[RunState]()
#: ``workerinput`` key of the controller's selection: ``{"cases": [ids], "backends": [specs]}``
SELECTION_KEY = "conformance_selection"
#: ``workerinput`` key of the run's directory of shared references (absent: each pair makes its own)
REFERENCES_KEY = "conformance_references"
#: where in the results directory a run keeps the references its pairs share, one folder per run (removed
#: when the run ends; a killed run's folder is removed by the next run that claims the directory)
REFERENCES_DIR = ".references"
RESULT_KEY = pytest.StashKey[Result]()


def activate(config: pytest.Config, values: dict[str, Any]) -> None:
    """Make this session a conformance run (once): state in the stash, the run's hooks registered."""
    if config.pluginmanager.has_plugin(PLUGIN):
        return
    out = Path(values["out"])
    baseline = None
    if values["baseline"] is not None:
        baseline = Baseline(values["baseline"], values["baseline_tolerance"],
                            f"baseline {config.getoption('conformance_baseline')}")
    if _is_worker(config):  # the controller's folder (none where the controller turned on late)
        references = config.workerinput.get(REFERENCES_KEY)  # type: ignore[attr-defined]
    else:
        references = str(out / REFERENCES_DIR / uuid.uuid4().hex)
    root = None if values["no_cache"] else default_root()
    state = RunState(values, bool(values["isolate"]), float(values["timeout"]),
                     RunOptions(steps=values["steps"], references=references,
                                result_cache=str(root) if root is not None else None),
                     baseline, out if values["auto_repro"] else None)
    config.stash[RUN_KEY] = state
    _keep_hypothesis_in(out / ".hypothesis")
    _quiet_torch()
    from conformance.run.isolation import prestart, run_environment

    run_environment(parallel_pairs=_is_worker(config))
    if state.isolate and _is_worker(config) and not values["cases"]:
        prestart(list(values["backend"] or []))  # an xdist worker's own worker starts while it collects
    config.pluginmanager.register(ConformanceRun(config, state), PLUGIN)
    if not _is_worker(config):
        config.pluginmanager.register(ResultWriter(config, state), WRITER)


def _selection(config: pytest.Config) -> Selection:
    state = config.stash[RUN_KEY]
    if state.selection is None:
        values = state.values
        handed: dict[str, list[str]] | None = (
            config.workerinput.get(SELECTION_KEY) if _is_worker(config) else None)  # type: ignore[attr-defined]
        try:
            for source in values["cases"]:
                load_source(source)
            if handed is not None:  # the controller's selection: resolve its ids, select nothing again
                state.selection = select(handed["backends"], handed["cases"])
                by_id = {c.id: c for c in state.selection.cases}
                state.selection.cases = [by_id[i] for i in handed["cases"]]  # the controller's order
            else:
                state.selection = select(values["backend"], values["case"], values["generated"],
                                         _int_seed(config.getoption("hypothesis_seed", None)))
        except (BackendError, CaseError, ManifestError) as exc:
            raise pytest.UsageError(str(exc)) from None
        if len(state.selection.backends) < 2:  # a case's references have no other pair to share them with
            state.options = replace(state.options, references=None)
    return state.selection


def _int_seed(value: object) -> int:
    """Hypothesis's own ``--hypothesis-seed`` (a string, or absent) seeds the generated cases too."""
    if value in (None, ""):
        return 0
    try:
        return int(str(value))
    except ValueError:
        raise pytest.UsageError(f"--hypothesis-seed must be an integer for generated cases, got {value!r}") from None


def _skip_done(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Resume: pairs that already have a verdict in the results directory are not run again."""
    done = _done_pairs(config)
    if not done:
        return
    keep = [i for i in items if (p := _pair_of(i)) is None or p.id not in done]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def _done_pairs(config: pytest.Config) -> set[str]:
    if _is_worker(config):  # an xdist worker: the controller sent them (pytest_configure_node)
        return set(config.workerinput.get("conformance_done", ()))  # type: ignore[attr-defined]
    writer = config.pluginmanager.get_plugin(WRITER)
    return writer.run_dir.done() if writer is not None else set()


def shard_pairs(pairs: Sequence[Pair], shard: Shard, durations_dir: Path | None) -> set[str]:
    """The ids of the pairs ``shard`` runs: the one place the split is made (the plugin deselects by it;
    the CLI checks that only these pairs' cases build, not the whole selection's)."""
    from conformance.run.sharding import PairCost, estimate, measured_durations, select_shard

    durations = measured_durations(durations_dir)
    return select_shard([PairCost(p.id, estimate(p.case.kind, p.case.trains, p.backend.cost_weight,
                                                 durations.get(p.id))) for p in pairs], shard)


def _select_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    values = config.stash[RUN_KEY].values
    shard = values["shard"]  # parsed (and checked) once, by conformance.run.options
    if shard is None:
        return
    pairs = {item.nodeid: _pair_of(item) for item in items}
    chosen = shard_pairs([p for p in pairs.values() if p is not None], shard, values["shard_durations"])
    keep = [i for i in items if (p := pairs[i.nodeid]) is None or p.id in chosen]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def _pair_of(item: pytest.Item) -> Pair | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("conformance_pair") if callspec is not None else None


def _write_repro(pair: Pair, result: Result, out: Path, state: RunState) -> None:
    """A failing case is written out as a repro script (a generated one shrunk first, by Hypothesis),
    in the isolation worker when the run isolates: a crash while shrinking costs only the repro."""
    from conformance.run.repro import run_repro

    try:
        with watch_signals() as watch:
            path, note = run_repro(pair.case, pair.backend, pair.spec, result, out, state.isolate, state.timeout_s)
    except KeyboardInterrupt as exc:
        if watch.from_user:
            raise
        path, note = None, f"no repro written: {_adapter_interrupt(exc)}"
    if note:
        result.notes.append(note)
    if path is not None:
        result.repro_file = str(path)
        result.notes.append(f"repro file: {path}")


def rerun_command(pair: Pair, steps: int | None = None) -> str:
    """The command that runs exactly this pair again (:func:`conformance.run.rerun.rerun_command`)."""
    return rerun.rerun_command(pair.case.id, pair.spec, steps)


def _raw_verdict(pair: Pair, state: RunState) -> Result:
    """The backend's verdict; an error outside the engine's own handling is this pair's ``fail-run``."""
    try:
        with watch_signals() as watch:
            raw = _engine_verdict(pair, state)
    except Exception as exc:  # the pair must still get its line in results.jsonl
        return Result(pair.case.id, pair.backend.name, Status.FAIL_RUN,
                      f"harness error outside the engine: {type(exc).__name__}: {exc}",
                      seed=pair.case.seed, kind=pair.case.kind, family=pair.case.family,
                      notes=[traceback.format_exc()])
    except KeyboardInterrupt as exc:
        if watch.from_user:  # Ctrl-C (or SIGTERM): the run stops, as it always did
            raise
        return Result(pair.case.id, pair.backend.name, Status.FAIL_RUN, _adapter_interrupt(exc),
                      seed=pair.case.seed, kind=pair.case.kind, family=pair.case.family,
                      notes=[traceback.format_exc()])
    if state.baseline is not None:
        raw = state.baseline.apply(raw)
    return raw


def _adapter_interrupt(exc: KeyboardInterrupt) -> str:
    said = f" ({exc})" if str(exc) else ""
    return (f"the backend raised KeyboardInterrupt{said} though no SIGINT came: adapter code must not "
            f"raise it (in-process, --no-isolate; a real Ctrl-C still stops the run)")


def _engine_verdict(pair: Pair, state: RunState) -> Result:
    if not state.isolate:
        from conformance.run.engine import run_case

        return run_case(pair.case, pair.backend, state.options, pair.spec)
    from conformance.run.isolation import run_isolated

    raw = run_isolated(pair.case.id, pair.spec, state.timeout_s, state.options)
    # a crash or timeout verdict is made without the backend: name it as the run knows it
    raw.backend = pair.backend.name
    raw.kind, raw.family, raw.seed = pair.case.kind, pair.case.family, pair.case.seed
    raw.versions = raw.versions or pair.backend.versions()
    return raw


def execute_pair(pair: Pair, item: pytest.Item) -> None:
    """Run one pair, attach its result to the test item, and turn the verdict into an outcome."""
    state = item.config.stash[RUN_KEY]
    result = apply(_raw_verdict(pair, state), pair.manifest)
    result.repro = rerun_command(pair, state.options.steps)
    if state.repro_dir is not None and not result.ok and result.status not in ("crash", "timeout"):
        t0 = time.perf_counter()
        _write_repro(pair, result, state.repro_dir, state)
        result.timing["repro_s"] = time.perf_counter() - t0
    item.stash[RESULT_KEY] = result  # pytest_runtest_makereport puts it on the report
    if result.status == "pass":
        return
    # pytest prints these on the terminal; results.jsonl keeps the raw reason
    if result.status == "skip":
        pytest.skip(printable(result.reason))
    if result.status == "xfail":
        pytest.xfail(printable(result.reason))
    pytest.fail(f"{result.status}: {printable(result.reason)}", pytrace=False)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _quiet_torch() -> None:
    """Graph-break warnings are recorded in results; they need not flood the terminal."""
    for name in ("torch._dynamo", "torch._inductor", "torch.fx.experimental.symbolic_shapes"):
        logging.getLogger(name).setLevel(logging.ERROR)


class ResultWriter:
    """Controller side: stage results as they arrive; show progress; print the summary; publish."""

    def __init__(self, config: pytest.Config, state: RunState) -> None:
        self.config = config
        self.state = state
        out = Path(state.values["out"])
        claimed = held(out)
        self.owns_dir = claimed is None  # plain pytest: the CLI did not claim the directory first
        try:
            self.run_dir: RunDir = claimed or claim(out, state.values["existing"])
        except OutDirError as exc:  # said in the CLI's terms: respelled for a plain pytest session
            raise pytest.UsageError(pytest_spelling(str(exc))) from None
        shutil.rmtree(self.run_dir.path / REFERENCES_DIR, ignore_errors=True)  # a killed run's, never read
        self.path = self.run_dir.results
        self.results: list[Result] = []
        self.recorded: set[str] = set()  # node ids that have their verdict
        self.failures: dict[str, str] = {}  # node id -> why pytest failed it (for pairs without a verdict)
        self.running: dict[str, str] = {}  # node id -> case@backend of each pair under way (named if interrupted)
        self.no_room = ""  # a verdict that found no room on the disk: the session stops there
        self.started = time.perf_counter()
        self.first_pair_s: float | None = None  # when the first pair started, from self.started
        self.progress = bool(state.values["progress"])
        self.total = 0
        self.bar: Any = None  # a rich Progress, on a terminal only
        self.task: Any = None

    def _announce(self, total: int) -> None:
        self.total = total
        if not (self.progress and total):
            return
        sel = _selection(self.config)  # an xdist controller collects nothing: resolve it here
        names = ", ".join(b.name for b in sel.backends)
        kept = f", {len(self.run_dir.kept)} kept from before" if self.run_dir.mode == "resume" else ""
        _echo(f"conformance: {plural(total, 'pair')} ({names}{kept}) -> {self.path}")
        new = new_backends([b.name for b in sel.backends], self.run_dir.kept)
        if new:
            before = ", ".join(sorted({r.backend for r in self.run_dir.kept}))
            _echo(f"conformance: {'backends' if len(new) > 1 else 'backend'} {', '.join(new)} not in the earlier "
                  f"runs kept in {self.run_dir.path} ({before}): {plural(len(new) * len(sel.cases), 'pair')} "
                  f"of {'them' if len(new) > 1 else 'it'} run now (--backend NAME chooses the backends)")
        for w in [*self.run_dir.warnings, *sel.warnings]:
            _echo(f"warning: {w}")
        where = "in a worker process that imports torch and warms up the backends first" \
            if self.state.values["isolate"] else "in this process"
        _echo(f"conformance: starting the pairs {where}; a pair's first compile takes seconds")

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._announce(sum(1 for item in session.items if _pair_of(item) is not None))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.total:  # every worker collects the same items: the first says how many
            self._announce(sum(1 for i in ids if "test_conformance[" in i))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["conformance_done"] = sorted(self.run_dir.done())
        hand_over(node.workerinput, self.state.values)
        sel = _selection(self.config)
        if self.state.options.references is not None:
            node.workerinput[REFERENCES_KEY] = self.state.options.references
        node.workerinput[SELECTION_KEY] = {"cases": [c.id for c in sel.cases],
                                           "backends": [sel.specs.get(b.name, b.name) for b in sel.backends]}

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        pair_id = _pair_id_of(nodeid)
        if pair_id is not None:
            self.running[nodeid] = pair_id
        if self.first_pair_s is None:
            self.first_pair_s = time.perf_counter() - self.started
        if self.bar is None and self.progress and sys.stderr.isatty() and self.total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("warming up", total=self.total)
        if self.bar is not None and "[" in nodeid:
            from rich.markup import escape

            pair = escape(printable(nodeid.split("[", 1)[1][:-1]))  # a Rich column: markup escaped too
            self.bar.update(self.task, description=f"running {pair}")

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        raw = getattr(report, RESULT_ATTR, None)
        if raw:
            self.recorded.add(report.nodeid)
            self._record(Result.from_json(json.loads(raw)))
        elif report.failed:
            self.failures.setdefault(report.nodeid, f"{report.when} failed: {_gist(report.longreprtext)}")

    @pytest.hookimpl
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        """A pair pytest finished without a verdict (an error in setup, a plugin) still gets a line."""
        self.running.pop(nodeid, None)
        pair_id = _pair_id_of(nodeid)
        if pair_id is None or nodeid in self.recorded:
            return
        case, _, backend = pair_id.partition("@")
        why = self.failures.get(nodeid, "no verdict was recorded")
        self.recorded.add(nodeid)
        self._record(Result(case, backend, Status.FAIL_RUN, f"no verdict: {why}"))

    def _record(self, result: Result) -> None:
        if self.no_room:
            return
        try:
            self.run_dir.append(result)
        except DiskFull as exc:  # the line is not there (cut off again): stop, keep what is whole
            self.no_room = _no_room_line(exc)
            self._stop_session()
            return
        self.results.append(result)
        if self.progress:
            self._show(result)

    def _stop_session(self) -> None:
        """No pair after this one: pytest ends the session after the current item, as ``-x`` does."""
        session = getattr(self.config, "_conformance_session", None)
        if session is not None:
            session.shouldfail = self.no_room

    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.config._conformance_session = session  # type: ignore[attr-defined]

    @pytest.hookimpl(wrapper=True, specname="pytest_sessionfinish")
    def _junit_with_room(self, session: pytest.Session) -> Generator[None, Any, Any]:
        """junit is written here (pytest's own plugin): one that finds no room is dropped, not left torn."""
        try:
            return (yield)
        except OSError as exc:
            if not no_room(exc):
                raise
            self.run_dir.staged_junit.unlink(missing_ok=True)
            self.no_room = self.no_room or _no_room_line(exc)
            return None

    def _show(self, result: Result) -> None:
        t = pair_wall_s(result.timing)
        mark = "ok " if result.ok else "BAD"
        line = (f"[{len(self.results)}/{self.total}] {mark} {result.case}@{result.backend}: "
                f"{result.status} ({t:.1f}s){' - ' + clip(result.reason, 160) if result.reason else ''}")
        if self.bar is not None:
            self.bar.console.print(printable(line), markup=False, highlight=False)
            self.bar.advance(self.task)
        else:
            _echo(line)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> Generator[None, Any, None]:
        outcome = yield
        if self.progress and getattr(report, RESULT_ATTR, None):
            category, _, word = outcome.get_result()
            outcome.force_result((category, "", word))

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        selection = self.state.selection
        if self.state.interrupted or self.no_room or not self.state.values["update_manifest"] or selection is None:
            return  # a manifest is rewritten from complete runs only
        from conformance.checks.manifest import write_updated

        for backend in selection.backends:
            path, notes = write_updated(selection.manifests[backend.name], self.results,
                                        getattr(backend, "manifest_path", None))
            _echo(f"manifest {path}: {len(notes)} change(s)")
            for note in notes:
                _echo(f"  {note}")

    def stats(self) -> RunStats:
        return RunStats(self.total, len(self.results), len(self.run_dir.kept), self.state.interrupted,
                        self.run_dir.published, tuple(self.running.values()), self.no_room)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if not self.results:
            return
        from conformance.output.summary import summary_table

        wall = time.perf_counter() - self.started
        summary_table(self.results, wall, self.path,
                      warnings=self.state.selection.warnings if self.state.selection else [],
                      cut_short=self.stats().cut_short)
        if self.state.values.get("profile_harness"):
            self._profile(wall)

    def _profile(self, wall: float) -> None:
        """``--profile-harness``: where the session's time went (the CLI adds its start-up and the report)."""
        from conformance.output.summary import cache_line, profile_table
        from conformance.run.isolation import startup_wait_s
        from conformance.util.phases import breakdown

        workers = self.config.getoption("numprocesses", None) or 0
        run_phases = {"startup": self.first_pair_s or 0.0,
                      "worker start": startup_wait_s(),
                      "repro": sum(r.timing.get("repro_s", 0.0) for r in self.results)}
        profile_table(breakdown([r.timing for r in self.results], wall, run_phases,
                                workers=workers if isinstance(workers, int) else 2))
        line = cache_line(merge_counts(r.cache for r in self.results))
        if line:
            _echo(line)

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """After every sessionfinish (junit is written by then): move the staged files into place."""
        shutil.rmtree(self.run_dir.path / REFERENCES_DIR, ignore_errors=True)  # the shared references
        try:
            self.run_dir.publish(len(self.results))
        except DiskFull as exc:  # the verdicts are in place; the junit that did not fit is not
            self.no_room = self.no_room or _no_room_line(exc)
        config.hook.pytest_conformance_finished(stats=self.stats())
        if self.owns_dir:
            self.run_dir.release()


def _no_room_line(exc: OSError) -> str:
    """The file a write found no room in, and why, for the run's one error line."""
    return f"{exc.filename}: {exc.strerror}"


def pytest_spelling(message: str) -> str:
    """A message naming ``conformance run``'s flags, with the plugin's flags instead."""
    from conformance.run.options import BY_NAME

    flags = {opt.cli: opt.pytest for opt in BY_NAME.values() if opt.cli and opt.pytest and not opt.foreign}
    existing = BY_NAME["existing"].pytest
    flags.update({"--overwrite": f"{existing} overwrite", "--resume": f"{existing} resume"})
    return re.sub(r"(?<![\w-])--[a-z][a-z-]*(?![\w-])", lambda m: flags.get(m.group(0), m.group(0)), message)


def _pair_id_of(nodeid: str) -> str | None:
    """``case@backend`` from a suite test's node id, or ``None`` for any other test."""
    _, sep, param = nodeid.partition("test_conformance[")
    return param[:-1] if sep and param.endswith("]") and "@" in param else None


def _gist(text: str) -> str:
    """The last non-blank line of a failure report: where pytest puts the error itself."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return clip(lines[-1] if lines else "unknown error", 300)


def _echo(line: str) -> None:
    """A line on the terminal: names, ids and reasons in it come from cases, backends and manifests."""
    print(printable(line), file=sys.stderr, flush=True)


class ConformanceRun:
    """The run's hooks on the items (every process: controller, xdist worker, plain session)."""

    def __init__(self, config: pytest.Config, state: RunState) -> None:
        self.config = config
        self.state = state

    @pytest.hookimpl
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "conformance_pair" not in metafunc.fixturenames:
            return
        pairs = _selection(metafunc.config).pairs()
        metafunc.parametrize("conformance_pair", pairs, ids=[p.id for p in pairs])

    @pytest.hookimpl
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        _select_shard(config, items)
        _skip_done(config, items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, Any, None]:
        outcome = yield
        if call.when != "call" or RESULT_KEY not in item.stash:
            return
        result = item.stash[RESULT_KEY]
        del item.stash[RESULT_KEY]
        report = outcome.get_result()
        setattr(report, RESULT_ATTR, json.dumps(result.to_json(), default=str))
        item.user_properties.append(("verdict", str(result.status)))
        if result.reason:
            item.user_properties.append(("reason", clip(result.reason, 500)))

    @pytest.hookimpl
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C, or SIGTERM turned into an interrupt by the CLI: end workers now, mark the run cut short."""
        self.state.interrupted = True

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.state.isolate:
            from conformance.run.isolation import shutdown

            # every verdict is in: the worker has nothing left to finish, and its interpreter's own
            # teardown (torch, the compilers) would cost the run a second or two for nothing
            shutdown(kill=True)


def _keep_hypothesis_in(directory: Path) -> None:
    """Hypothesis's own files (shrink database, caches) go under the results, not the current directory."""
    if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(directory)
