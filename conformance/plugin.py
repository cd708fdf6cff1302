"""The pytest plugin: case x backend pairs as test items, results as JSON lines.

Everything the CLI does goes through here, so pytest's own machinery (``-k``,
``-x``, ``-n`` through pytest-xdist, ``--junitxml``) works on the suite.  Each
result travels on its test report (which pytest-xdist ships to the controller),
and the controller appends it to the run's staged results file as soon as it
arrives and moves that into place when the session ends (:mod:`conformance.outdir`),
so an interrupted run keeps every finished verdict and never truncates an earlier one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
import traceback
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.adapter import Backend, BackendError, BackendRegistry, discover
from conformance.baseline import BaselineError, Tolerance, apply_baseline, load_baseline
from conformance.case import BROKEN_PLUGINS, Case, CaseError, all_cases, load_source, select_cases
from conformance.engine import DEFAULT_STEPS, RunOptions
from conformance.manifest import Manifest, ManifestError, apply, load_manifest
from conformance.outdir import MODES, OutDirError, RunDir, claim, held
from conformance.result import Result, append_result
from conformance.text import clip, plural
from conformance.verdict import Status

RESULT_ATTR = "conformance_result"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_OUT = "conformance-results"


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


def select(backend_names: list[str], case_globs: list[str], generated: int = 0, hypothesis_seed: int = 0) -> Selection:
    """Resolve backends, cases and manifests; raises BackendError, CaseError or ManifestError.

    ``generated`` widens the default generated set by that many cases drawn from ``hypothesis_seed``."""
    if generated:
        from conformance.cases.generated import register_generated

        register_generated(generated, hypothesis_seed)
    registry = discover()
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
                warnings.append(f"manifest {m.path}: entry {e.case!r} still needs a reason")
            if e.unsized:
                warnings.append(f"manifest {m.path}: entry {e.case!r} expects {e.status} without its excess "
                                "(excess = BYTES); it fails until --update-manifest records it")
    ids = [c.id for c in all_cases()]  # opt-in cases (the zoo) too
    if not case_globs:  # staleness only means something against the full case list
        for m in manifests.values():
            for e in m.stale(ids):
                warnings.append(f"manifest {m.path}: entry {e.case!r} ({e.status}) matches no case: stale")
    return Selection(backends, cases, manifests, registry, warnings, specs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "backend conformance suite")
    group.addoption("--backend", action="append", default=[], metavar="NAME",
                    help="backend to run (repeatable; name or package.module:Class). Default: all usable here.")
    group.addoption("--case", action="append", default=[], metavar="GLOB",
                    help="case id or glob (repeatable). Default: all cases.")
    group.addoption("--cases", action="append", default=[], metavar="MODULE",
                    help="a module or .py file that registers cases (repeatable); workers load it too")
    group.addoption("--conformance-out", default=DEFAULT_OUT, metavar="DIR",
                    help=f"where results.jsonl goes (default: ./{DEFAULT_OUT})")
    group.addoption("--conformance-existing", choices=MODES, default="refuse",
                    help="what to do when the results directory already holds files: refuse (default), "
                         "overwrite them, or resume (run only the pairs without a verdict there)")
    group.addoption("--conformance-progress", action="store_true",
                    help="one progress line per verdict and a summary table (the CLI's display)")
    group.addoption("--shard", default=None, metavar="I/N",
                    help="run only shard I of N (deterministic, balanced by expected cost)")
    group.addoption("--shard-durations", default=None, metavar="DIR",
                    help="a previous results directory whose timings weigh the shards")
    group.addoption("--update-manifest", action="store_true",
                    help="rewrite each selected backend's manifest from this run's verdicts")
    group.addoption("--generated", type=int, default=0, metavar="N",
                    help="add N generated cases, drawn from Hypothesis's --hypothesis-seed (default 0), "
                         "to the default set")
    group.addoption("--auto-repro", action=argparse.BooleanOptionalAction, default=True,
                    help="shrink each unexpectedly failing generated case and write a standalone repro "
                         "under DIR/repros (default: on)")
    group.addoption("--isolate", action=argparse.BooleanOptionalAction, default=True,
                    help="run each pair in a reusable worker process, so a crash or hang costs one "
                         "verdict (crash/timeout) and not the run (default: on)")
    group.addoption("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                    help=f"per-pair time limit with --isolate (default: {DEFAULT_TIMEOUT_S:g})")
    group.addoption("--steps", type=int, default=DEFAULT_STEPS, metavar="N",
                    help=f"probed calls per pair, each with fresh inputs; the residual must stay exact over all "
                         f"of them (default: {DEFAULT_STEPS})")
    group.addoption("--baseline", default=None, metavar="DIR",
                    help="an earlier results directory: a pair whose measured peak or residual grew beyond "
                         "--baseline-tolerance fails")
    group.addoption("--baseline-tolerance", default="0", metavar="BYTES|PCT",
                    help="growth allowed over the baseline: bytes (default 0: any growth fails) or a percentage")


_SELECTION: Selection | None = None


def _selection(config: pytest.Config) -> Selection:
    global _SELECTION
    if _SELECTION is None:
        try:
            for source in config.getoption("cases"):
                load_source(source)
            _SELECTION = select(config.getoption("backend"), config.getoption("case"),
                                config.getoption("generated"), _int_seed(config.getoption("hypothesis_seed", None)))
        except (BackendError, CaseError, ManifestError) as exc:
            raise pytest.UsageError(str(exc)) from None
    return _SELECTION


def _int_seed(value: object) -> int:
    """Hypothesis's own ``--hypothesis-seed`` (a string, or absent) seeds the generated cases too."""
    if value in (None, ""):
        return 0
    try:
        return int(str(value))
    except ValueError:
        raise pytest.UsageError(f"--hypothesis-seed must be an integer for generated cases, got {value!r}") from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_pair" not in metafunc.fixturenames:
        return
    pairs = _selection(metafunc.config).pairs()
    metafunc.parametrize("conformance_pair", pairs, ids=[p.id for p in pairs])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _select_shard(config, items)
    _skip_done(config, items)


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


def _select_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    spec = config.getoption("shard", None)
    if not spec:
        return
    from conformance.sharding import PairCost, Shard, estimate, measured_durations, select_shard

    try:
        shard = Shard.parse(spec)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    durations = measured_durations(Path(d) if (d := config.getoption("shard_durations")) else None)
    pairs = {item.nodeid: _pair_of(item) for item in items}
    costs = [
        PairCost(p.id, estimate(p.case.kind, p.case.trains, p.backend.cost_weight, durations.get(p.id)))
        for p in pairs.values() if p is not None
    ]
    chosen = select_shard(costs, shard)
    keep = [i for i in items if (p := pairs[i.nodeid]) is None or p.id in chosen]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def _pair_of(item: pytest.Item) -> Pair | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("conformance_pair") if callspec is not None else None


_ISOLATION: tuple[bool, float] = (False, DEFAULT_TIMEOUT_S)
_REPRO_DIR: Path | None = None
_OPTIONS = RunOptions()
_BASELINE: tuple[dict[tuple[str, str], Result], Tolerance, str] | None = None


def _write_repro(pair: Pair, result: Result, out: Path) -> None:
    """A failing generated case is shrunk (Hypothesis) and written out as a standalone script."""
    from conformance.repro import auto_repro

    try:
        path = auto_repro(pair.case, pair.backend, result, out)
    except Exception as exc:  # a repro that cannot be made must not cost the verdict
        result.notes.append(f"repro not written: {type(exc).__name__}: {exc}")
        return
    if path is not None:
        result.repro_file = str(path)
        result.notes.append(f"repro file: {path}")


def rerun_command(pair: Pair) -> str:
    """The command that runs exactly this pair again: an ad hoc backend by its ``module:Class`` spec."""
    return shlex.join(["conformance", "run", "--case", pair.case.id, "--backend", pair.spec])


def _raw_verdict(pair: Pair) -> Result:
    """The backend's verdict; an error outside the engine's own handling is this pair's ``fail-run``."""
    try:
        raw = _engine_verdict(pair)
    except Exception as exc:  # the pair must still get its line in results.jsonl
        return Result(pair.case.id, pair.backend.name, Status.FAIL_RUN,
                      f"harness error outside the engine: {type(exc).__name__}: {exc}",
                      seed=pair.case.seed, kind=pair.case.kind, family=pair.case.family,
                      notes=[traceback.format_exc()])
    if _BASELINE is not None:
        earlier, tolerance, source = _BASELINE
        raw = apply_baseline(raw, earlier.get((raw.case, raw.backend)), tolerance, source)
    return raw


def _engine_verdict(pair: Pair) -> Result:
    isolate, timeout_s = _ISOLATION
    if not isolate:
        from conformance.engine import run_case

        return run_case(pair.case, pair.backend, _OPTIONS, pair.spec)
    from conformance.isolation import run_isolated

    raw = run_isolated(pair.case.id, pair.spec, timeout_s, _OPTIONS)
    # a crash or timeout verdict is made without the backend: name it as the run knows it
    raw.backend = pair.backend.name
    raw.kind, raw.family, raw.seed = pair.case.kind, pair.case.family, pair.case.seed
    raw.versions = raw.versions or pair.backend.versions()
    return raw


def execute_pair(pair: Pair) -> None:
    """Run one pair, attach its result to the test, and turn the verdict into an outcome."""
    result = apply(_raw_verdict(pair), pair.manifest)
    result.repro = rerun_command(pair)
    if _REPRO_DIR is not None and not result.ok and result.status not in ("crash", "timeout"):
        _write_repro(pair, result, _REPRO_DIR)
    _CURRENT_RESULTS.append(result)
    if result.status == "pass":
        return
    if result.status == "skip":
        pytest.skip(result.reason)
    if result.status == "xfail":
        pytest.xfail(result.reason)
    pytest.fail(f"{result.status}: {result.reason}", pytrace=False)


_CURRENT_RESULTS: list[Result] = []


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _quiet_torch() -> None:
    """Graph-break warnings are recorded in results; they need not flood the terminal."""
    for name in ("torch._dynamo", "torch._inductor", "torch.fx.experimental.symbolic_shapes"):
        logging.getLogger(name).setLevel(logging.ERROR)


@dataclass
class RunStats:
    """How the session ended, for the CLI (exit code, report banner) once pytest returns."""

    total: int  # pairs this session set out to run (after -k, --shard and --resume)
    finished: int  # verdicts it made
    kept: int  # verdicts kept from before (--resume)
    interrupted: bool
    published: bool  # results.jsonl (and junit.xml) moved into place

    @property
    def cut_short(self) -> str:
        """``interrupted after N of M pairs`` (or ``stopped ...`` for -x / --maxfail), else ``""``."""
        if self.interrupted:
            return f"interrupted after {self.finished} of {plural(self.total, 'pair')}"
        if self.finished < self.total:
            return f"stopped after {self.finished} of {plural(self.total, 'pair')}"
        return ""


LAST_RUN: RunStats | None = None
WRITER = "conformance-writer"
_INTERRUPTED = False


class ResultWriter:
    """Controller side: stage results as they arrive; show progress; print the summary; publish."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        out = Path(config.getoption("conformance_out"))
        claimed = held(out)
        self.owns_dir = claimed is None  # plain pytest: the CLI did not claim the directory first
        try:
            self.run_dir: RunDir = claimed or claim(out, config.getoption("conformance_existing"))
        except OutDirError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.path = self.run_dir.results
        self.results: list[Result] = []
        self.recorded: set[str] = set()  # node ids that have their verdict
        self.failures: dict[str, str] = {}  # node id -> why pytest failed it (for pairs without a verdict)
        self.started = time.perf_counter()
        self.progress = config.getoption("conformance_progress")
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
        for w in [*self.run_dir.warnings, *sel.warnings]:
            _echo(f"warning: {w}")

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

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self.bar is None and self.progress and sys.stderr.isatty() and self.total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("starting", total=self.total)
        if self.bar is not None and "[" in nodeid:
            self.bar.update(self.task, description=f"running {nodeid.split('[', 1)[1][:-1]}")

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
        pair_id = _pair_id_of(nodeid)
        if pair_id is None or nodeid in self.recorded:
            return
        case, _, backend = pair_id.partition("@")
        why = self.failures.get(nodeid, "no verdict was recorded")
        self.recorded.add(nodeid)
        self._record(Result(case, backend, Status.FAIL_RUN, f"no verdict: {why}"))

    def _record(self, result: Result) -> None:
        self.results.append(result)
        append_result(self.run_dir.staged_results, result)
        if self.progress:
            self._show(result)

    def _show(self, result: Result) -> None:
        t = sum(result.timing.values())
        mark = "ok " if result.ok else "BAD"
        line = (f"[{len(self.results)}/{self.total}] {mark} {result.case}@{result.backend}: "
                f"{result.status} ({t:.1f}s){' - ' + clip(result.reason, 160) if result.reason else ''}")
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
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
        if _INTERRUPTED or not self.config.getoption("update_manifest") or _SELECTION is None:
            return  # a manifest is rewritten from complete runs only
        from conformance.manifest import write_updated

        for backend in _SELECTION.backends:
            path, notes = write_updated(_SELECTION.manifests[backend.name], self.results,
                                        getattr(backend, "manifest_path", None))
            _echo(f"manifest {path}: {len(notes)} change(s)")
            for note in notes:
                _echo(f"  {note}")

    def stats(self) -> RunStats:
        return RunStats(self.total, len(self.results), len(self.run_dir.kept), _INTERRUPTED, self.run_dir.published)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if not self.results:
            return
        from conformance.summary import summary_table

        summary_table(self.results, time.perf_counter() - self.started, self.path,
                      warnings=_SELECTION.warnings if _SELECTION else [], cut_short=self.stats().cut_short)

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """After every sessionfinish (junit is written by then): move the staged files into place."""
        global LAST_RUN
        self.run_dir.publish(len(self.results))
        LAST_RUN = self.stats()
        if self.owns_dir:
            self.run_dir.release()


def _pair_id_of(nodeid: str) -> str | None:
    """``case@backend`` from a suite test's node id, or ``None`` for any other test."""
    _, sep, param = nodeid.partition("test_conformance[")
    return param[:-1] if sep and param.endswith("]") and "@" in param else None


def _gist(text: str) -> str:
    """The last non-blank line of a failure report: where pytest puts the error itself."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return clip(lines[-1] if lines else "unknown error", 300)


def _echo(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    if call.when != "call" or "conformance_pair" not in getattr(item, "fixturenames", ()):
        return
    report = outcome.get_result()
    if _CURRENT_RESULTS:
        result = _CURRENT_RESULTS.pop()
        setattr(report, RESULT_ATTR, json.dumps(result.to_json(), default=str))
        item.user_properties.append(("verdict", str(result.status)))
        if result.reason:
            item.user_properties.append(("reason", clip(result.reason, 500)))
    _CURRENT_RESULTS.clear()


def pytest_configure(config: pytest.Config) -> None:
    if not _runs_suite(config):
        return
    global _ISOLATION, _REPRO_DIR, _OPTIONS, _BASELINE, _INTERRUPTED
    _INTERRUPTED = False
    _ISOLATION = (bool(config.getoption("isolate")), float(config.getoption("timeout")))
    try:
        _OPTIONS = RunOptions(steps=int(config.getoption("steps")))
        baseline = config.getoption("baseline")
        if baseline:
            _BASELINE = (load_baseline(Path(baseline)), Tolerance.parse(config.getoption("baseline_tolerance")),
                         f"baseline {baseline}")
    except (ValueError, BaselineError) as exc:
        raise pytest.UsageError(str(exc)) from None
    _REPRO_DIR = Path(config.getoption("conformance_out")) if config.getoption("auto_repro") else None
    _keep_hypothesis_in(Path(config.getoption("conformance_out")) / ".hypothesis")
    _quiet_torch()
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if not _is_worker(config):
        config.pluginmanager.register(ResultWriter(config), WRITER)


def _keep_hypothesis_in(directory: Path) -> None:
    """Hypothesis's own files (shrink database, caches) go under the results, not the current directory."""
    if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(directory)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """Ctrl-C, or SIGTERM turned into an interrupt by the CLI: end workers now, mark the run cut short."""
    global _INTERRUPTED
    _INTERRUPTED = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if _ISOLATION[0]:
        from conformance.isolation import shutdown

        shutdown(kill=_INTERRUPTED)


def _runs_suite(config: pytest.Config) -> bool:
    """Only a session that collects the suite writes results; the project's own tests do not."""
    args = [str(a) for a in config.args]
    return any("conformance.suite" in a or a.endswith("suite.py") for a in args) or bool(
        config.getoption("backend") or config.getoption("case")
    )
