"""The pytest plugin: case x backend pairs as test items, results as JSON lines.

Everything the CLI does goes through here, so pytest's own machinery (``-k``,
``-x``, ``-n`` through pytest-xdist, ``--junitxml``) works on the suite.  Each
result travels on its test report (which pytest-xdist ships to the controller),
and the controller appends it to ``results.jsonl`` as soon as it arrives, so an
interrupted run keeps every finished verdict.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.adapter import Backend, BackendError, BackendRegistry, discover
from conformance.case import BROKEN_PLUGINS, Case, CaseError, all_cases, load_source, select_cases
from conformance.manifest import Manifest, ManifestError, apply, load_manifest
from conformance.result import Result, append_result

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


def execute_pair(pair: Pair) -> None:
    """Run one pair, attach its result to the test, and turn the verdict into an outcome."""
    isolate, timeout_s = _ISOLATION
    if isolate:
        from conformance.isolation import run_isolated

        raw = run_isolated(pair.case.id, pair.spec, timeout_s)
        # a crash or timeout verdict is made without the backend: name it as the run knows it
        raw.backend = pair.backend.name
        raw.kind, raw.family, raw.seed = pair.case.kind, pair.case.family, pair.case.seed
        raw.versions = raw.versions or pair.backend.versions()
    else:
        from conformance.engine import run_case

        raw = run_case(pair.case, pair.backend)
    result = apply(raw, pair.manifest)
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


class ResultWriter:
    """Controller side: append results as they arrive; show progress; print the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.out = Path(config.getoption("conformance_out"))
        self.path = self.out / "results.jsonl"
        self.results: list[Result] = []
        self.started = time.perf_counter()
        self.progress = config.getoption("conformance_progress")
        self.total = 0
        self.bar: Any = None  # a rich Progress, on a terminal only
        self.task: Any = None
        self.out.mkdir(parents=True, exist_ok=True)
        self.path.write_text("", encoding="utf-8")

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = sum(1 for item in session.items if "conformance_pair" in getattr(item, "fixturenames", ()))
        if self.progress and self.total:
            sel = _SELECTION
            names = ", ".join(b.name for b in sel.backends) if sel else "?"
            _echo(f"conformance: {self.total} pairs ({names}) -> {self.path}")
            for w in sel.warnings if sel else []:
                _echo(f"warning: {w}")

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
        if not raw:
            return
        result = Result.from_json(json.loads(raw))
        self.results.append(result)
        append_result(self.path, result)
        if self.progress:
            t = sum(result.timing.values())
            mark = "ok " if result.ok else "BAD"
            line = (f"[{len(self.results)}/{self.total}] {mark} {result.case}@{result.backend}: "
                    f"{result.status} ({t:.1f}s){' - ' + result.reason[:160] if result.reason else ''}")
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
        if not self.config.getoption("update_manifest") or _SELECTION is None:
            return
        from conformance.manifest import write_updated

        for backend in _SELECTION.backends:
            path, notes = write_updated(_SELECTION.manifests[backend.name], self.results,
                                        getattr(backend, "manifest_path", None))
            _echo(f"manifest {path}: {len(notes)} change(s)")
            for note in notes:
                _echo(f"  {note}")

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if not self.results:
            return
        from conformance.summary import summary_table

        summary_table(self.results, time.perf_counter() - self.started, self.path,
                      warnings=_SELECTION.warnings if _SELECTION else [])


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
        item.user_properties.append(("verdict", result.status))
        if result.reason:
            item.user_properties.append(("reason", result.reason[:500]))
    _CURRENT_RESULTS.clear()


def pytest_configure(config: pytest.Config) -> None:
    if not _runs_suite(config):
        return
    global _ISOLATION, _REPRO_DIR
    _ISOLATION = (bool(config.getoption("isolate")), float(config.getoption("timeout")))
    _REPRO_DIR = Path(config.getoption("conformance_out")) if config.getoption("auto_repro") else None
    _quiet_torch()
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if not _is_worker(config):
        config.pluginmanager.register(ResultWriter(config), "conformance-writer")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _ISOLATION[0]:
        from conformance.isolation import shutdown

        shutdown()


def _runs_suite(config: pytest.Config) -> bool:
    """Only a session that collects the suite writes results; the project's own tests do not."""
    args = [str(a) for a in config.args]
    return any("conformance.suite" in a or a.endswith("suite.py") for a in args) or bool(
        config.getoption("backend") or config.getoption("case")
    )
