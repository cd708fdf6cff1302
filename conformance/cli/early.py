"""``conformance run``'s refusals of bad input, said before torch, the backends and the cases load.

A run imports torch, every backend and every case family before its first pair, and starts its isolation
worker first of all (seconds; a minute on a loaded machine).  None of that is needed to refuse a mistyped
option, an option value the table refuses, an ``--out`` that already holds a run, or a backend name or case
pattern that names nothing: the options come from the option table (standard library only), pytest's own
options from pytest's parser, the folder from the file system, and the names from the catalog an earlier
command recorded (:mod:`conformance.util.catalog`).  So :func:`refusal` says all of these first; where it
cannot tell (no catalog yet, a lazy family's pattern), the full check after loading still refuses, in the
same words.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn

from conformance.run.options import OptionError, Values, add_run_arguments, validate
from conformance.util.text import did_you_mean, printable

PROG = "conformance run"
_CHECKED: list[tuple[str, ...]] = []


class _Refused(Exception):
    """A refusal, as the whole line to print."""


class _RunParser(argparse.ArgumentParser):
    """``conformance run``'s options; a usage error is the one line the full parser would print."""

    def error(self, message: str) -> NoReturn:
        raise _Refused(f"{self.prog}: error: {message} (see {self.prog} --help)")


def run_parser() -> argparse.ArgumentParser:
    parser = _RunParser(prog=PROG, add_help=False)
    add_run_arguments(parser)
    return parser


def run_flags() -> list[str]:
    """Every long flag ``conformance run`` takes."""
    return [flag for action in run_parser()._actions for flag in action.option_strings if flag.startswith("--")]


def refusal(argv: list[str]) -> str | None:
    """The line that refuses ``conformance ARGV`` (a run), or ``None`` when nothing here refuses it."""
    if not argv or argv[0] != "run" or any(a in ("-h", "--help") for a in argv[1:]):
        return None
    try:
        _check(argv[1:])
    except _Refused as exc:
        return str(exc)
    _CHECKED.append(tuple(argv))
    return None


def checked(argv: list[str]) -> bool:
    """Whether :func:`refusal` just passed ``argv`` in this process (the launcher asks it first); said once."""
    if tuple(argv) not in _CHECKED:
        return False
    _CHECKED.remove(tuple(argv))
    return True


def _error(message: object) -> _Refused:
    return _Refused(f"conformance: error: {printable(message)}")


def _check(words: list[str]) -> None:
    from conformance.output.outdir import OutDirError, check_target, check_unused

    args, extra = run_parser().parse_known_args(words)
    try:
        validate(Values.of_namespace(args))
    except OptionError as exc:
        raise _error(exc) from None
    check_pytest_options(extra)  # a typo in an option is the first thing to hear of, not the folder
    out = Path(args.out)
    try:
        check_target(out)
    except OutDirError as exc:
        raise _error(exc) from None
    try:
        _check_names(args)
    except (OSError, RuntimeError, ValueError):  # a path the full check names better (a loop, a NUL byte)
        pass
    mode = "overwrite" if args.overwrite else "resume" if args.resume else "refuse"
    try:
        check_unused(out, mode)
    except (OutDirError, OSError) as exc:
        if isinstance(exc, OutDirError):
            raise _error(exc) from None  # an OSError here is the claim's to say, as it always has


def _check_names(args: argparse.Namespace) -> None:
    """Backend names and case patterns against the names an earlier command recorded."""
    from conformance.util import catalog

    sources: list[str] = [s for s in os.environ.get("CONFORMANCE_CASES", "").split(os.pathsep) if s]
    for source in args.cases:
        key = catalog.source_key(source)
        if key.endswith(".py") and not Path(key).is_file():
            raise _error(f"--cases {source}: no such file")
        sources.append(key)
    recorded = catalog.recorded(sources)
    if recorded is None:
        return
    for name in args.backend:
        said = recorded.backend_refusal(name)
        if said is not None:
            raise _error(said)
    if args.generated:  # widens the generated set: ids the catalog does not hold
        return
    for pattern in args.case:
        said = recorded.case_refusal(pattern)
        if said is not None:
            raise _error(said)


def check_pytest_options(extra: list[str]) -> None:
    """The options ``conformance run`` passes on to pytest, parsed as pytest would (without running it): one
    neither knows is a usage error naming it, with the closest ``conformance run`` option."""
    if not any(word.startswith("-") for word in extra):
        return
    import pytest
    from _pytest.config import _prepareconfig

    try:
        config = _prepareconfig([*extra, "-p", "no:cacheprovider"])
    except pytest.UsageError as exc:
        raise _error(usage_line(exc)) from None
    except Exception:  # anything else is pytest's to say when the run starts
        return
    config._ensure_unconfigure()


def usage_line(exc: Exception) -> str:
    """The line of pytest's usage text that says what is wrong; an option neither ``conformance run``
    nor pytest knows is named as a ``conformance run`` option, with the closest ones it has."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    said = next((ln.split("error: ", 1)[1] for ln in lines if "error: " in ln), lines[0] if lines else "usage error")
    if said.startswith("unrecognized arguments:"):
        words = said.split(":", 1)[1].split()
        unknown = [w for w in words if w.startswith("-")] or words
        named = "; ".join(f"{w}{did_you_mean(w.split('=')[0], run_flags())}" for w in unknown)
        return (f"unknown option{'s' if len(unknown) > 1 else ''} for 'conformance run': {named} (see "
                "'conformance run --help'; options it does not know go to pytest, which does not know "
                f"{'these' if len(unknown) > 1 else 'this one'} either)")
    return f"pytest: {said}" if said.startswith("argument") else said
