"""The ``conformance`` command: a thin layer over the pytest plugin.

``conformance run`` validates its input first (unknown backends or cases, bad
manifests, cases that fail to build: one line, exit 2) and then runs pytest on
the suite; any argument it does not know goes to pytest unchanged.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from conformance.adapter import BackendError
from conformance.case import CaseError
from conformance.manifest import ManifestError
from conformance.plugin import DEFAULT_OUT, Selection, select

EXIT_USAGE = 2


class UsageFailure(Exception):
    """Bad input: reported as one line, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conformance", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run cases on backends (unknown options go to pytest)")
    run.add_argument("--backend", action="append", default=[], metavar="NAME",
                     help="backend name or package.module:Class (repeatable; default: all usable here)")
    run.add_argument("--case", action="append", default=[], metavar="GLOB", help="case id or glob (repeatable)")
    _add_cases_argument(run)
    run.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"results directory (default: {DEFAULT_OUT})")
    run.add_argument("-n", "--workers", default=None, metavar="N", help="pytest-xdist workers (a number or 'auto')")
    run.add_argument("--shard", default=None, metavar="I/N",
                     help="run shard I of N of the selected pairs (balanced by expected cost)")
    run.add_argument("--shard-durations", default=None, metavar="DIR",
                     help="previous results directory whose timings weigh the shards")
    run.add_argument("--update-manifest", action="store_true",
                     help="rewrite each selected backend's manifest from this run, keeping reasons")
    run.add_argument("--generated", type=int, default=0, metavar="N",
                     help="add N generated cases (drawn from --hypothesis-seed) to the default set")
    run.add_argument("--hypothesis-seed", type=int, default=0, metavar="S",
                     help="seed the --generated cases are drawn from (default 0)")
    run.add_argument("--no-auto-repro", action="store_true",
                     help="do not shrink failing generated cases into standalone repros")
    run.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                     help="each pair in a reusable worker process: a crash or hang is that pair's "
                          "crash/timeout verdict, not the end of the run (default: on)")
    run.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                     help="per-pair time limit when isolated (default: 600)")
    run.add_argument("--report", default=None, metavar="SITE_DIR",
                     help="where the HTML report goes (default: DIR/report)")
    run.add_argument("--no-report", action="store_true", help="do not build the HTML report")
    run.add_argument("--history", type=Path, default=None, metavar="PATH",
                     help="SQLite run history the report records this run in (default: ./conformance-history.sqlite)")
    run.add_argument("--no-history", action="store_true", help="do not record this run in the history")
    from conformance.report import add_report_arguments

    add_report_arguments(sub.add_parser("report", help="build the HTML dashboard from results directories"))
    merge = sub.add_parser("merge", help="combine shard results directories into one")
    merge.add_argument("dirs", nargs="+", metavar="DIR")
    merge.add_argument("-o", "--out", required=True, metavar="DIR")
    repro = sub.add_parser("repro", help="shrink a failing case and write a standalone repro script")
    repro.add_argument("case", metavar="CASE")
    repro.add_argument("--backend", required=True, metavar="NAME")
    repro.add_argument("-o", "--out", default="repro.py", metavar="FILE")
    repro.add_argument("--hypothesis-db", default=None, metavar="DIR",
                       help="Hypothesis example database (default: conformance-results/.hypothesis)")
    repro.add_argument("--max-runs", type=int, default=80, metavar="N", help="engine runs the shrink may spend")
    repro.add_argument("--no-shrink", action="store_true")
    _add_cases_argument(repro)
    lst = sub.add_parser("list", help="list backends or cases")
    lst.add_argument("what", choices=["backends", "cases"])
    lst.add_argument("--generated", type=int, default=0, metavar="N")
    lst.add_argument("--hypothesis-seed", type=int, default=0, metavar="S")
    lst.add_argument("--backend", action="append", default=[], metavar="NAME")
    lst.add_argument("--case", action="append", default=[], metavar="GLOB")
    _add_cases_argument(lst)
    return parser


def _add_cases_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", action="append", default=[], metavar="MODULE",
                        help="a module (my_pkg.cases) or file (my_cases.py) that registers cases; repeatable")


def _load_case_sources(sources: list[str]) -> None:
    """``--cases`` sources, loaded before anything selects cases (workers inherit them)."""
    from conformance.case import load_source

    try:
        for source in sources:
            load_source(source)
    except CaseError as exc:
        raise UsageFailure(str(exc)) from None


def _validate(backends: list[str], cases: list[str], build: bool, generated: int = 0, seed: int = 0) -> Selection:
    if generated < 0:
        raise UsageFailure("--generated must be >= 0")
    try:
        selection = select(backends, cases, generated, seed)
    except (BackendError, CaseError, ManifestError) as exc:
        raise UsageFailure(str(exc)) from None
    if build:
        for case in selection.cases:
            try:
                case.build()
            except Exception as exc:
                raise UsageFailure(f"case {case.id} failed to build: {type(exc).__name__}: {exc}") from None
    if not selection.backends:
        raise UsageFailure("no backend can run on this machine (see 'conformance list backends')")
    return selection


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    _validate(args.backend, args.case, build=True, generated=args.generated, seed=args.hypothesis_seed)
    import pytest

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pytest_args = [
        "--pyargs", "conformance.suite", "-qq", "--no-header", "-p", "no:cacheprovider",
        "--rootdir", str(out.resolve()), "-o", "console_output_style=classic",
        "--conformance-out", str(out), "--conformance-progress", "--junitxml", str(out / "junit.xml"),
        "-W", "ignore::UserWarning",
    ]
    for b in args.backend:
        pytest_args += ["--backend", b]
    for c in args.case:
        pytest_args += ["--case", c]
    for source in args.cases:
        pytest_args += ["--cases", source]
    if args.workers:
        pytest_args += ["-n", str(args.workers)]
    if args.shard:
        from conformance.sharding import Shard

        try:
            Shard.parse(args.shard)
        except ValueError as exc:
            raise UsageFailure(str(exc)) from None
        pytest_args += ["--shard", args.shard]
        if args.shard_durations:
            pytest_args += ["--shard-durations", args.shard_durations]
    if args.update_manifest:
        pytest_args.append("--update-manifest")
    if args.generated:
        pytest_args += ["--generated", str(args.generated), "--hypothesis-seed", str(args.hypothesis_seed)]
    if args.no_auto_repro:
        pytest_args.append("--no-auto-repro")
    pytest_args.append("--isolate" if args.isolate else "--no-isolate")
    if args.timeout is not None:
        if args.timeout <= 0:
            raise UsageFailure("--timeout must be positive")
        pytest_args += ["--timeout", str(args.timeout)]
    code = int(pytest.main([*pytest_args, *extra]))
    if code in (0, 1) and not args.no_report and (out / "results.jsonl").exists():
        _build_run_report(args, out)
    return 0 if code == 0 else (EXIT_USAGE if code == 4 else 1)


def _build_run_report(args: argparse.Namespace, out: Path) -> None:
    """The report of this run, also when verdicts failed: that is when people look at it."""
    from conformance import history
    from conformance.report import build_report

    site = Path(args.report) if args.report else out / "report"
    hist = None if args.no_history else (args.history or history.DEFAULT_HISTORY)
    try:
        index = build_report([out], site, hist)
    except Exception as exc:  # a report problem must not hide the verdicts
        print(f"conformance: warning: report not built: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    print(f"report: {index.resolve().as_uri()}", file=sys.stderr)


def cmd_merge(args: argparse.Namespace) -> int:
    from conformance.merge import MergeError, merge

    try:
        results = merge([Path(d) for d in args.dirs], Path(args.out))
    except (MergeError, ValueError) as exc:
        raise UsageFailure(str(exc)) from None
    print(f"merged {len(results)} results from {len(args.dirs)} directories into {args.out}")
    return 0


def cmd_repro(args: argparse.Namespace) -> int:
    from conformance.repro import main_repro

    db = Path(args.hypothesis_db) if args.hypothesis_db else Path(DEFAULT_OUT) / ".hypothesis"
    try:
        return main_repro(args.case, args.backend, Path(args.out), db, args.max_runs, args.no_shrink)
    except (BackendError, CaseError) as exc:
        raise UsageFailure(str(exc)) from None


def cmd_list(args: argparse.Namespace) -> int:
    if args.what == "cases":
        selection = _validate([], args.case or ["*"], build=False, generated=args.generated,
                              seed=args.hypothesis_seed)
        cases = selection.cases
        n_gen = sum(c.id.startswith("gen-") for c in cases)
        print(f"{len(cases)} cases, {n_gen} of them generated (ids carry family and seed; widen with "
              f"--generated N --hypothesis-seed S)")
        for c in cases:
            req = f"  requires: {', '.join(sorted(c.requires))}" if c.requires else ""
            print(f"{c.id:32s} {c.kind:11s} {c.family:10s} seed={c.seed}{req}  {c.description}")
        from conformance.case import BROKEN_PLUGINS, UNAVAILABLE

        for family, reason in UNAVAILABLE.items():
            print(f"family {family}: not registered here: {reason}")
        for name, problem in BROKEN_PLUGINS.items():
            print(f"case plugin {name}: broken: {problem}")
        return 0
    try:
        selection = select(args.backend, ["*"] if not args.case else args.case)
    except (BackendError, CaseError, ManifestError) as exc:
        raise UsageFailure(str(exc)) from None
    registry = selection.registry
    backends = selection.backends if args.backend else list(registry.backends.values())
    for b in backends:
        why = b.unavailable_reason()
        state = "usable" if why is None else f"cannot run here: {why}"
        versions = ", ".join(f"{k} {v}" for k, v in b.versions().items()) if why is None else ""
        print(f"{b.name:16s} {state}")
        print(f"{'':16s} capabilities: {', '.join(b.capabilities.describe())}")
        if versions:
            print(f"{'':16s} versions: {versions}")
    for name, problem in registry.broken.items():
        print(f"{name:16s} broken plugin: {problem}")
    return 0


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE"):  # `conformance list cases | head` should not trace back
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command != "run" and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        _load_case_sources(getattr(args, "cases", []))
        if args.command == "run":
            return cmd_run(args, extra)
        if args.command == "merge":
            return cmd_merge(args)
        if args.command == "repro":
            return cmd_repro(args)
        if args.command == "report":
            from conformance.report import main_report

            return main_report(args)
        return cmd_list(args)
    except UsageFailure as exc:
        print(f"conformance: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
