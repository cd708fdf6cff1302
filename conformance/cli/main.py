"""The ``conformance`` command: a thin layer over the pytest plugin.

``conformance run`` validates its input first (unknown backends or cases, bad
manifests, cases that fail to build, unusable paths: one line, exit 2) before it
touches the output directory, and then runs pytest on the suite; any argument it
does not know goes to pytest unchanged.  SIGINT and SIGTERM end a run cleanly: the
finished verdicts, junit and report are kept and the exit code is 128 + the signal.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from conformance.checks.manifest import ManifestError
from conformance.cli import early
from conformance.cli.early import usage_line
from conformance.output.outdir import OutDirError, RunDir, check_target, claim
from conformance.run.options import (
    BY_NAME,
    DEFAULT_OUT,
    OptionError,
    Values,
    add_run_arguments,
    forward,
    path_arg,
    pytest_flag,
)
from conformance.run.stats import RunStats
from conformance.util import phases
from conformance.util.paths import caches_outside_tmp
from conformance.util.text import plural, printable
from conformance.util.writes import no_room

if TYPE_CHECKING:  # torch comes with these: only the commands that select cases import them
    from conformance.api.case import Case
    from conformance.run.runner import Selection

EXIT_USAGE = 2
#: pytest's exit codes the CLI translates.
PYTEST_INTERRUPTED, PYTEST_USAGE_ERROR, PYTEST_NO_TESTS = 2, 4, 5


class UsageFailure(Exception):
    """Bad input: reported as one line, exit code 2."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during a run; pytest unwinds it like Ctrl-C (sessionfinish, junit, cleanup)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage text is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="conformance", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run cases on backends (unknown options go to pytest)")
    add_run_arguments(run)
    from conformance.output.report import add_report_arguments

    add_report_arguments(sub.add_parser("report", help="build the HTML dashboard from results directories"))
    merge = sub.add_parser("merge", help="combine shard results directories into one")
    merge.add_argument("dirs", type=path_arg, nargs="+", metavar="DIR")
    merge.add_argument("-o", "--out", type=path_arg, required=True, metavar="DIR")
    merge.add_argument("--overwrite", action="store_true", help="replace results already in DIR")
    diff = sub.add_parser("diff", help="what changed per pair between two results directories")
    diff.add_argument("before", type=path_arg, metavar="A")
    diff.add_argument("after", type=path_arg, metavar="B")
    diff.add_argument("--all", action="store_true", help="every pair, not only those that changed")
    cov = sub.add_parser("coverage", help="the module sweep's (mod-*) and op sweep's (op-*) tables of a results "
                                          "directory, as Markdown")
    cov.add_argument("dir", type=path_arg, metavar="DIR")
    cov.add_argument("--all-left-out", action="store_true",
                     help="list every op the sweep leaves out, not only those of the ops the run ran")
    repro = sub.add_parser(
        "repro", help="write a repro script for a failing case (generated cases shrunk first)",
        description="Run CASE on the backend; if it fails, write a script that exits 1 while the failing check "
                    "(parity, peak, residual, program, backward-inputs, ...) still fails and 0 once it passes. "
                    "Exit status: 0 written; 3 the case does not fail on this backend (nothing written); "
                    "2 bad input.")
    repro.add_argument("case", metavar="CASE")
    repro.add_argument("--backend", required=True, metavar="NAME")
    repro.add_argument("-o", "--out", type=path_arg, default="repro.py", metavar="FILE")
    repro.add_argument("--hypothesis-db", type=path_arg, default=None, metavar="DIR",
                       help="Hypothesis example database (default: conformance-results/.hypothesis)")
    repro.add_argument("--max-runs", type=int, default=80, metavar="N", help="engine runs the shrink may spend")
    repro.add_argument("--no-shrink", action="store_true")
    for name in ("isolate", "timeout"):  # every run (the case's, each shrink candidate's) isolated, as in a run
        BY_NAME[name].add_to_argparse(repro)
    _add_cases_argument(repro)
    tri = sub.add_parser("triage", help="a run's failures grouped by cause, new ones first",
                         description="Group the failures of a results directory by cause signature (counts, first "
                                     "seen in the run history, smallest repro), new causes on top. Exit 0; 2 on "
                                     "bad input.")
    tri.add_argument("dir", type=path_arg, metavar="DIR", help="a results directory (or its results.jsonl)")
    tri.add_argument("--history", type=path_arg, default=None, metavar="PATH",
                     help="run history to read first sightings from (default: DIR/history.sqlite if present)")
    tri.add_argument("--no-history", action="store_true", help="ignore the run history")
    tri.add_argument("--limit", type=int, default=None, metavar="N", help="show the first N groups only")
    lst = sub.add_parser("list", help="list backends or cases")
    lst.add_argument("what", choices=["backends", "cases"])
    for name in ("generated", "hypothesis_seed", "backend", "case"):
        BY_NAME[name].add_to_argparse(lst)
    _add_cases_argument(lst)
    return parser


def _add_cases_argument(parser: argparse.ArgumentParser) -> None:
    BY_NAME["cases"].add_to_argparse(parser)


def _check_environment() -> None:
    """The settings read from the environment (``CONFORMANCE_OP_SAMPLES``), before anything imports them."""
    from conformance.util.environment import EnvironmentProblem, check_environment

    try:
        check_environment()
    except EnvironmentProblem as exc:
        raise UsageFailure(str(exc)) from None


def _load_case_sources(sources: list[str]) -> None:
    """``--cases`` sources, loaded before anything selects cases (workers inherit them)."""
    if not sources:
        return
    from conformance.api.case import CaseError, load_source

    try:
        for source in sources:
            load_source(source)
    except CaseError as exc:
        raise UsageFailure(str(exc)) from None


def _validate(backends: list[str], cases: list[str], build: bool, generated: int = 0, seed: int = 0,
              shard: str | None = None, shard_durations: str | None = None) -> Selection:
    try:
        BY_NAME["generated"].checked(generated, Values.of_mapping("cli", {"generated": generated}))
    except OptionError as exc:
        raise UsageFailure(str(exc)) from None
    selection = _select(backends, cases, generated, seed)
    if build:
        for case in _shard_cases(selection, shard, shard_durations):
            try:
                case.build(optimizer=False)  # the worker makes the optimizer: a first one imports torch._dynamo
            except (Exception, SystemExit) as exc:  # a builder that exits is a case that failed to build
                raise UsageFailure(f"case {case.id} failed to build: {type(exc).__name__}: {exc}") from None
    if not selection.backends:
        raise UsageFailure("no backend can run on this machine (see 'conformance list backends')")
    return selection


def _select(backends: list[str], cases: list[str], generated: int = 0, seed: int = 0) -> Selection:
    """The run's backends and cases, a refusal as one usage line.  This is where the CLI imports torch and
    the backends: ``report``, ``merge``, ``diff``, ``triage`` and ``coverage`` never select, and start at once."""
    from conformance.api.adapter import BackendError
    from conformance.api.case import CaseError
    from conformance.run.runner import select

    try:
        return select(backends, cases, generated, seed, remember=True)
    except (BackendError, CaseError, ManifestError) as exc:
        raise UsageFailure(str(exc)) from None


def _shard_cases(selection: Selection, shard: str | None, durations: str | None) -> list[Case]:
    """The cases a run builds before pytest starts (to refuse one that cannot build, in one line): with
    ``--shard``, those of the shard's pairs only; a shard of the op sweep would otherwise build all of
    its 2,300 cases first, for minutes, on every machine of a sharded nightly."""
    if shard is None:
        return selection.cases
    from conformance.run.runner import shard_pairs
    from conformance.run.sharding import Shard

    chosen = shard_pairs(selection.pairs(), Shard.parse(shard), Path(durations) if durations else None)
    return [c for c in selection.cases if any(f"{c.id}@{b.name}" in chosen for b in selection.backends)]


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    started = phases.STARTED if phases.STARTED is not None else time.perf_counter()
    out = Path(args.out)  # the options, the folder and the names are checked already (early.refusal)
    with _signals_interrupt() as caught:  # from here on a Ctrl-C (or SIGTERM) ends the run cleanly, a second at once
        _validate(args.backend, args.case, build=True, generated=args.generated, seed=args.hypothesis_seed,
                  shard=args.shard, shard_durations=args.shard_durations)
        run_dir = _claim(out, "overwrite" if args.overwrite else "resume" if args.resume else "refuse")
        caught.run_dir = run_dir
        timing: dict[str, float] = {}
        finished = _RunFinished()
        try:
            timing["before pytest"] = time.perf_counter() - started
            plugins = [_OneLineUsageErrors(), finished]
            code = int(pytest.main([*_pytest_args(args, run_dir), *extra], plugins=plugins))
            return _finish(args, run_dir, code, caught.signum, finished.stats, timing)
        finally:
            caught.run_dir = None
            run_dir.release()
            if finished.stats is not None and finished.stats.finished and not finished.stats.no_room:
                _say_wall_time(time.perf_counter() - started, timing)


def _say_wall_time(wall: float, timing: dict[str, float]) -> None:
    """The last line of every run that made verdicts: how long the whole command took, and the parts
    outside pytest's session (a usage error stays one line)."""
    parts = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in timing.items())
    print(f"conformance: wall time {wall:.1f}s" + (f" ({parts})" if parts else ""), file=sys.stderr)


def _claim(out: Path, mode: str) -> RunDir:
    try:
        return claim(out, mode)
    except OutDirError as exc:
        raise UsageFailure(str(exc)) from None


def _history_path(args: argparse.Namespace, out: Path) -> Path:
    from conformance.output import history

    return Path(args.history) if args.history else out / history.HISTORY_NAME


def _pytest_args(args: argparse.Namespace, run_dir: RunDir) -> list[str]:
    """The session's own settings, then every run option as the table forwards it."""
    out = run_dir.path
    return [
        "--pyargs", "conformance.run.suite", "-qq", "--no-header", "-p", "no:cacheprovider",
        "--rootdir", str(out.resolve()), "-o", "console_output_style=classic",
        pytest_flag("existing"), run_dir.mode, pytest_flag("progress"),
        "--junitxml", str(run_dir.staged_junit), "-W", "ignore::UserWarning",
        "--tb=no", "-rN",  # the run's own summary names each failure once, with its repro; pytest's would repeat it
        *forward(args),
    ]


@dataclass
class _Caught:
    signum: int | None = None
    run_dir: RunDir | None = None  # the directory the run holds, once claimed
    watchdog: threading.Timer | None = None  # ends a cleanup that takes too long


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[_Caught]:
    """SIGINT and SIGTERM raise :class:`Interrupted` once, and the run cleans up (its worker ended, its verdicts
    published, the lock released); a second one, or a cleanup that takes longer than :data:`CLEANUP_S`, ends
    the command at once (:func:`_end_now`)."""
    caught = _Caught()

    def handler(signum: int, frame: FrameType | None) -> None:
        if caught.signum is None:
            caught.signum = signum
            caught.watchdog = threading.Timer(CLEANUP_S, _end_now, (caught, signum, "its cleanup took too long"))
            caught.watchdog.daemon = True
            caught.watchdog.start()
            raise Interrupted(signum)
        _end_now(caught, signum, f"{signal.Signals(signum).name} again")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        if caught.watchdog is not None:
            caught.watchdog.cancel()  # cleaned up in time
        for s, h in previous.items():
            signal.signal(s, h)


#: seconds an interrupted run may spend on its cleanup before it ends without finishing it
CLEANUP_S = 10.0


def _end_now(caught: _Caught, signum: int, why: str) -> None:
    """End the command now: the run's processes killed, its finished verdicts moved into place (a rename),
    its lock released, one line; no junit, report or history.  Called from a signal handler or the
    cleanup's watchdog thread: only system calls, nothing that waits."""
    isolation = sys.modules.get("conformance.run.isolation")
    if isolation is not None:
        with contextlib.suppress(Exception):
            isolation.kill_now()
    run_dir = caught.run_dir
    where = ""
    if run_dir is not None:
        run_dir.end_now()
        where = f"; finished verdicts kept in {run_dir.results}" if run_dir.published else \
            f"; {run_dir.path} left as it was"
    with contextlib.suppress(OSError):
        sys.stdout.flush()
        sys.stderr.flush()
    os.write(2, printable(f"conformance: interrupted ({why}): ended at once{where}\n").encode(errors="replace"))
    os._exit(128 + signum)


def _finish(args: argparse.Namespace, run_dir: RunDir, code: int, signum: int | None,
            stats: RunStats | None, timing: dict[str, float]) -> int:
    """Report what ran, and turn pytest's exit code into the CLI's."""
    interrupted = signum is not None or code == PYTEST_INTERRUPTED
    if stats is not None and stats.no_room:  # a full disk: no report written into it either
        kept = f"{plural(stats.finished, 'verdict')} before it kept in {run_dir.results}" if stats.published \
            else f"{run_dir.path} left as it was"
        raise UsageFailure(f"no room to write: {stats.no_room}; {kept}")
    if stats is not None and stats.published and not args.no_report:
        t0 = time.perf_counter()
        _build_run_report(args, run_dir.path, stats)
        timing["report"] = time.perf_counter() - t0
    if interrupted:
        _say_interrupted(stats, run_dir, signum)
        return 128 + (signum or signal.SIGINT)
    if code == PYTEST_NO_TESTS:
        return _nothing_ran(args, run_dir, stats)
    if code == PYTEST_USAGE_ERROR:
        return EXIT_USAGE
    return 0 if code == 0 else 1


def _say_interrupted(stats: RunStats | None, run_dir: RunDir, signum: int | None) -> None:
    name = signal.Signals(signum).name if signum else "KeyboardInterrupt"
    if stats is None or not stats.published:
        during = f" (during {', '.join(stats.running)})" if stats is not None and stats.running else ""
        print(printable(f"conformance: interrupted ({name}) before any verdict{during}; {run_dir.path} left as it was"),
              file=sys.stderr)
        return
    print(f"conformance: {stats.cut_short} ({name}); finished verdicts kept in {run_dir.results}",
          file=sys.stderr)


def _nothing_ran(args: argparse.Namespace, run_dir: RunDir, stats: RunStats | None) -> int:
    if stats is not None and stats.kept:
        print(f"conformance: nothing left to resume: every selected pair has a verdict in {run_dir.results}",
              file=sys.stderr)
        return 0
    if args.shard:
        print(f"conformance: shard {args.shard} holds no pair of this selection; nothing to run", file=sys.stderr)
        return 0
    raise UsageFailure(f"no case x backend pair left to run (deselected by -k/-m?); {run_dir.path} left as it was")


def _build_run_report(args: argparse.Namespace, out: Path, stats: RunStats) -> None:
    """The report of this run, also when verdicts failed or it was cut short: that is when people look at it."""
    from conformance.output.report import build_report

    site = Path(args.report) if args.report else out / "report"
    note = stats.cut_short if stats.interrupted else ""
    hist = None if args.no_history or stats.interrupted else _history_path(args, out)  # history: complete runs
    try:
        index = build_report([out], site, hist, note=note,
                             warn=lambda line: print(f"conformance: warning: {printable(line)}", file=sys.stderr))
    except Exception as exc:  # a report problem must not hide the verdicts; a full disk is the run's error
        if no_room(exc):
            raise UsageFailure(f"no room to write the report: {exc.filename}: {exc.strerror}; "  # type: ignore[attr-defined]
                               f"the verdicts are in {out / 'results.jsonl'}") from None
        if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            raise UsageFailure(f"no room to record the run in its history {hist}: the disk is full; the verdicts "
                               f"are in {out / 'results.jsonl'}") from None
        print(printable(f"conformance: warning: report not built: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return
    print(f"report: {index.resolve().as_uri()}", file=sys.stderr)


class _RunFinished:
    """pytest plugin: keeps the run's stats (the plugin's ``pytest_conformance_finished``) for after pytest returns."""

    def __init__(self) -> None:
        self.stats: RunStats | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_conformance_finished(self, stats: RunStats) -> None:
        self.stats = stats


class _OneLineUsageErrors:
    """pytest plugin: a usage error from pytest (an unknown option...) becomes the CLI's one-line error; an
    interrupt's traceback is cut to its last frame before pytest renders it (the run names what it
    interrupted itself, and rendering the whole stack reads every module's source: seconds under load)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        excinfo.traceback = excinfo.traceback[-1:]

    @pytest.hookimpl(wrapper=True)
    def pytest_cmdline_parse(self, pluginmanager: Any, args: list[str]) -> Any:
        try:
            return (yield)
        except pytest.UsageError as exc:
            raise UsageFailure(usage_line(exc)) from None

    @pytest.hookimpl(wrapper=True)
    def pytest_cmdline_main(self, config: pytest.Config) -> Any:
        try:
            return (yield)
        except pytest.UsageError as exc:
            raise UsageFailure(usage_line(exc)) from None


def cmd_merge(args: argparse.Namespace) -> int:
    from conformance.output.merge import MergeError, merge

    def warn(line: str) -> None:
        print(f"conformance merge: warning: {printable(line)}", file=sys.stderr)

    try:
        results = merge([Path(d) for d in args.dirs], Path(args.out), overwrite=args.overwrite, warn=warn)
    except (MergeError, OutDirError) as exc:
        raise UsageFailure(str(exc)) from None
    print(f"merged {len(results)} results from {len(args.dirs)} directories into {args.out}")
    return 0


def cmd_coverage(args: argparse.Namespace) -> int:
    from conformance.output.coverage import (
        coverage,
        markdown,
        op_coverage,
        op_markdown,
        sweep_cases,
        sweep_left_out,
    )
    from conformance.output.records import RecordsError, read_usable

    path = Path(args.dir) / "results.jsonl" if Path(args.dir).is_dir() else Path(args.dir)
    try:
        loaded = read_usable(path)
    except RecordsError as exc:
        raise UsageFailure(str(exc)) from None
    for problem in loaded.problems:
        print(f"conformance coverage: warning: {printable(problem.describe(path))}", file=sys.stderr)
    table, ops = coverage(loaded.results), op_coverage(loaded.results)
    if table is None and ops is None:
        raise UsageFailure(f"{args.dir}: no module or op sweep results (run with --case 'mod-*' or --case 'op-*')")
    if table is not None:  # a step without a verdict: not in this run (a shard's), or no such case in the sweep
        from conformance.api.case import select_cases

        print(markdown(table, {c.id for c in select_cases(["mod-*"])}))  # (names escaped cell by cell)
    if ops is not None:
        ops.left_out = sweep_left_out(ops, every=args.all_left_out)  # what this torch release's sweep leaves out
        sweep_cases(ops)
        print(("\n" if table is not None else "") + op_markdown(ops))
    return 0


def cmd_triage(args: argparse.Namespace) -> int:
    from conformance.checks.cause import fill_cause
    from conformance.output.history import HistoryError
    from conformance.output.records import RecordsError
    from conformance.output.triage import render_text, triage_dir

    if args.history is not None and args.no_history:
        raise UsageFailure("--history and --no-history exclude each other")
    if args.limit is not None and args.limit < 1:
        raise UsageFailure(f"--limit {args.limit}: must be at least 1")
    try:
        found, warnings = triage_dir(Path(args.dir), args.history, not args.no_history, fill_cause)
    except (RecordsError, HistoryError) as exc:
        raise UsageFailure(str(exc)) from None
    for line in warnings:
        print(f"conformance triage: warning: {printable(line)}", file=sys.stderr)
    for line in render_text(found, args.limit):
        print(printable(line))
    return 0


def cmd_repro(args: argparse.Namespace) -> int:
    from conformance.api.adapter import BackendError
    from conformance.api.case import CaseError
    from conformance.run.repro import main_repro

    db = Path(args.hypothesis_db) if args.hypothesis_db else Path(DEFAULT_OUT) / ".hypothesis"
    _check_repro_options(args, Path(args.out), db)
    if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:  # Hypothesis's caches beside its database, not in cwd
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(db)
    try:
        timeout = BY_NAME["timeout"].checked(args.timeout, Values.of_mapping("cli", vars(args)))
    except OptionError as exc:
        raise UsageFailure(str(exc)) from None
    try:
        return main_repro(args.case, args.backend, Path(args.out), db, args.max_runs, args.no_shrink,
                          timeout_s=timeout if args.isolate else None)
    except (BackendError, CaseError, ManifestError) as exc:
        raise UsageFailure(str(exc)) from None


def _check_repro_options(args: argparse.Namespace, out: Path, db: Path) -> None:
    """Paths and the case, before a shrink spends minutes on them."""
    from conformance.api.case import resolve

    if args.max_runs < 1:
        raise UsageFailure(f"--max-runs must be >= 1, got {args.max_runs}")
    try:
        if out.is_dir():
            raise OutDirError(f"-o {out}: is a directory; name the script file to write")
        check_target(out.parent, f"-o {out}:")
        check_target(db, "--hypothesis-db")
    except OutDirError as exc:
        raise UsageFailure(str(exc)) from None
    case = resolve(args.case)
    if case is None:
        raise UsageFailure(f"unknown case {args.case!r} (see 'conformance list cases')")


def cmd_list(args: argparse.Namespace) -> int:
    if args.what == "cases":
        selection = _validate([], args.case or ["*"], build=False, generated=args.generated,
                              seed=args.hypothesis_seed)
        cases = selection.cases
        n_gen = sum(c.id.startswith("gen-") for c in cases)
        n_default = sum(c.in_default for c in cases)
        _say(f"{len(cases)} cases, {n_default} of them (marked *) run by a 'conformance run' that names no "
             f"--case, {n_gen} generated (ids carry family and seed; widen with --generated N "
             f"--hypothesis-seed S)")
        by_family: dict[str, list[str]] = {}
        for c in cases:
            by_family.setdefault(c.family, []).append("*" if c.in_default else "")
        from conformance.api.case import LAZY

        lazy = [f"{family} (registered when a --case names it: --case '{prefix}*' or --case {family})"
                for prefix, (family, _) in LAZY.items() if family not in by_family]  # named, not built: cheap
        _say("families: " + ", ".join([*(f"{family} ({len(marks)}, {marks.count('*')} by default)"
                                         for family, marks in by_family.items()), *lazy]))
        for c in cases:
            req = f"  requires: {', '.join(sorted(c.requires))}" if c.requires else ""
            mark = "*" if c.in_default else " "
            _say(f"{mark} {c.id:32s} {c.kind:11s} {c.family:16s} seed={c.seed}{req}  {c.description}")
        from conformance.api.case import BROKEN_PLUGINS, LEFT_OUT, UNAVAILABLE

        patterns = args.case or ["*"]
        for label, reason in LEFT_OUT.items():
            if any(fnmatch.fnmatchcase(label, p) or fnmatch.fnmatchcase(f"{label}-x", p) for p in patterns):
                _say(f"  left out: {label}: {reason}")
        for family, reason in UNAVAILABLE.items():
            _say(f"family {family}: not registered here: {reason}")
        for name, problem in BROKEN_PLUGINS.items():
            _say(f"case plugin {name}: broken: {problem}")
        return 0
    selection = _select(args.backend, ["*"] if not args.case else args.case)
    registry = selection.registry
    backends = selection.backends if args.backend else list(registry.backends.values())
    for b in backends:
        why = b.unavailable_reason()
        state = "usable" if why is None else f"cannot run here: {why}"
        versions = ", ".join(f"{k} {v}" for k, v in b.versions().items()) if why is None else ""
        _say(f"{b.name:16s} {state}")
        _say(f"{'':16s} capabilities: {', '.join(b.capabilities.describe())}")
        if versions:
            _say(f"{'':16s} versions: {versions}")
    for name, problem in registry.broken.items():
        _say(f"{name:16s} broken plugin: {problem}")
    return 0


def _say(line: str) -> None:
    """A listing line: names, descriptions and problems come from case and backend packages."""
    print(printable(line))


def main(argv: list[str] | None = None) -> int:
    caches_outside_tmp()
    if hasattr(signal, "SIGPIPE"):  # `conformance list cases | head` should not trace back
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if hasattr(signal, "SIGXFSZ"):  # a file-size limit (ulimit -f): the write fails (EFBIG) and is said, no core dump
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    argv = sys.argv[1:] if argv is None else argv
    if not early.checked(argv):  # `python -m conformance.cli`, or a caller in process: the launcher's checks
        said = early.refusal(argv)
        if said is not None:
            print(said, file=sys.stderr)
            return EXIT_USAGE
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command != "run" and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command in ("run", "list", "repro"):
            _check_environment()
        _load_case_sources(getattr(args, "cases", []))
        if args.command == "run":
            return cmd_run(args, extra)
        if args.command == "merge":
            return cmd_merge(args)
        if args.command == "repro":
            return cmd_repro(args)
        if args.command == "triage":
            return cmd_triage(args)
        if args.command == "diff":
            from conformance.checks.baseline import BaselineError, main_diff

            try:
                return main_diff(args.before, args.after, args.all)
            except BaselineError as exc:
                raise UsageFailure(str(exc)) from None
        if args.command == "coverage":
            return cmd_coverage(args)
        if args.command == "report":
            from conformance.output.report import main_report

            return main_report(args)
        return cmd_list(args)
    except UsageFailure as exc:
        print(f"conformance: error: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Interrupted as exc:
        print(f"conformance: interrupted ({signal.Signals(exc.signum).name})", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("conformance: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except OSError as exc:  # a path the checks above did not foresee: still one line naming it
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(printable(f"conformance: error: {where}{exc.strerror or exc}"), file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
