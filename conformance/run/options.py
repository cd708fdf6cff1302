"""The run options: one table, from which both entry points declare and check them.

``conformance run`` (argparse) and the pytest plugin (``pytest_addoption``) are both
generated from :data:`OPTIONS`: each :class:`Option` names its ``conformance run`` flag,
its pytest flag (prefixed ``--conformance-``, as pytest's own plugins prefix theirs), its
type, default, help and checker.  :func:`validate` is the one place a value is checked;
both entry points call it and report its :class:`OptionError` as one line naming the flag
as that entry point spells it.  The CLI builds its pytest arguments from the table
(:func:`forward`): it checks, claims the results directory, and forwards.

Standard library only: the pytest plugin imports this module in every pytest session.
"""

from __future__ import annotations

import argparse
import math
import pickle
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

from conformance.util.paths import EXISTING_MODES, path_arg

DEFAULT_OUT = "conformance-results"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_STEPS = 3
#: the most ``--generated`` cases one run draws: drawing is cheap, but every case is a pair per backend
#: (seconds each), so 10 000 is already a day of pairs; a larger count is a typo, refused at once
#: (drawing 10**12 of them would hold the run silent for hours before its first pair)
MAX_GENERATED = 10_000


@dataclass(frozen=True)
class RunOptions:
    """What a run asks of every pair (the same in every worker process)."""

    steps: int = DEFAULT_STEPS
    #: the run's directory of references shared by a case's pairs (:mod:`conformance.checks.references`);
    #: ``None``: each pair makes its own
    references: str | None = None
    #: the result cache's folder (:mod:`conformance.util.result_cache`: references and models kept across
    #: runs); ``None``: off (``--no-cache``)
    result_cache: str | None = None

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, **({"references": self.references} if self.references is not None else {}),
                **({"result_cache": self.result_cache} if self.result_cache is not None else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> RunOptions:
        return cls(**(data or {}))
#: what a run does with a results directory that already holds files

Side = Literal["cli", "pytest"]
Kind = Literal["value", "append", "flag", "switch"]


class OptionError(ValueError):
    """A bad option value; its message is one line and names the flag."""


class Values:
    """The options as one entry point parsed them: values by name, flags as that entry point spells them."""

    def __init__(self, side: Side, get: Callable[[Option], Any]) -> None:
        self.side = side
        self._get = get

    def __getitem__(self, name: str) -> Any:
        return self._get(BY_NAME[name])

    def flag(self, name: str) -> str:
        return BY_NAME[name].flag(self.side)

    @classmethod
    def of_namespace(cls, args: argparse.Namespace) -> Values:
        """``conformance run``'s parsed arguments."""
        return cls("cli", lambda opt: getattr(args, opt.name))

    @classmethod
    def of_mapping(cls, side: Side, mapping: Mapping[str, Any]) -> Values:
        return cls(side, lambda opt: mapping[opt.name])

    @classmethod
    def of_config(cls, config: Any) -> Values:
        """A pytest session's options (``config.getoption``); options another plugin owns may be absent."""
        return cls("pytest", lambda opt: config.getoption(opt.pytest_dest, opt.default))


Check = Callable[[Any, str, Values], Any]


@dataclass(frozen=True)
class Option:
    """One run option, as both entry points know it."""

    name: str  # attribute name on ``conformance run``'s namespace
    help: str
    cli: str | None = None  # ``conformance run``'s flag (None: pytest only)
    pytest: str | None = None  # the pytest flag (None: the CLI's own concern)
    kind: Kind = "value"  # value, append (repeatable), flag (store_true), switch (--x / --no-x)
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    check: Check | None = None  # (value, flag, values) -> the checked value; raises OptionError
    cli_short: str | None = None  # a short alias on the CLI ("-n")
    foreign: str | None = None  # the pytest flag's dest when another plugin declares it (xdist's -n)
    with_option: str | None = None  # forwarded only together with this option (and then always)
    group: str | None = None  # mutually exclusive group on the CLI

    @property
    def parsed_default(self) -> Any:
        """The default as argparse stores it (it runs a string default through ``type``)."""
        if self.kind == "append":
            return []
        if self.kind == "flag":
            return False
        if isinstance(self.default, str) and self.type is not None:
            return self.type(self.default)
        return self.default

    @property
    def pytest_dest(self) -> str:
        return self.foreign or f"conformance_{self.name}"

    def flag(self, side: Side) -> str:
        """The flag as that side spells it (in messages): ``--timeout`` / ``--conformance-timeout``."""
        if side == "cli":
            assert self.cli is not None
            return f"{self.cli_short}/{self.cli}" if self.cli_short else self.cli
        assert self.pytest is not None
        return self.pytest

    def checked(self, value: Any, values: Values) -> Any:
        """``value`` checked (and parsed) by this option's checker; raises :class:`OptionError`.  A value holding
        a NUL byte is refused first: no path or name can hold one (the OS refuses it with a ValueError)."""
        if isinstance(value, (str, PurePath)) and "\x00" in str(value):
            raise OptionError(f"{self.flag(values.side)}: the value holds a NUL byte, which no path or name can")
        return self.check(value, self.flag(values.side), values) if self.check else value

    def _kwargs(self, pytest_side: bool) -> dict[str, Any]:
        kw: dict[str, Any] = {"help": self.help}
        if self.kind == "append":
            kw.update(action="append", default=[])
        elif self.kind == "flag":
            kw.update(action="store_true", default=False)
        elif self.kind == "switch":
            kw.update(action=argparse.BooleanOptionalAction, default=self.default)
        else:
            kw["default"] = self.default
            if self.type is not None:
                kw["type"] = self.type
            if self.choices is not None:
                kw["choices"] = self.choices
        if self.metavar is not None and self.kind in ("value", "append"):
            kw["metavar"] = self.metavar
        kw["dest"] = self.pytest_dest if pytest_side else self.name
        return kw

    def add_to_argparse(self, parser: Any) -> None:
        """Declare the CLI flag on an argparse parser (or group)."""
        assert self.cli is not None
        flags = [self.cli_short, self.cli] if self.cli_short else [self.cli]
        parser.add_argument(*flags, **self._kwargs(pytest_side=False))

    def add_to_pytest(self, group: Any) -> None:
        """Declare the pytest flag on a ``parser.getgroup(...)``."""
        assert self.pytest is not None and not self.foreign
        group.addoption(self.pytest, **self._kwargs(pytest_side=True))

    def forward(self, value: Any, given: Callable[[str], Any]) -> list[str]:
        """The pytest arguments that carry ``value`` (the CLI's) to the plugin."""
        assert self.pytest is not None
        if value is None or (self.with_option is not None and not given(self.with_option)):
            return []
        if self.with_option is None and value == self.parsed_default:
            return []
        if self.kind == "append":
            return [a for v in value for a in (self.pytest, str(v))]
        if self.kind == "flag":
            return [self.pytest] if value else []
        if self.kind == "switch":
            return [self.pytest if value else "--no-" + self.pytest[2:]]
        return [self.pytest, str(value)]


# --------------------------------------------------------------------------- checkers


def _positive_seconds(value: float | None, flag: str, values: Values) -> float:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if not (math.isfinite(value) and value > 0):
        raise OptionError(f"{flag} must be a positive number of seconds, got {value:g}")
    return float(value)


def _steps(value: int | None, flag: str, values: Values) -> int:
    if value is None:
        return DEFAULT_STEPS
    if value < 1:
        raise OptionError(f"{flag} must be a whole number >= 1, got {value}")
    return int(value)


def _not_negative(value: int, flag: str, values: Values) -> int:
    if value < 0:
        raise OptionError(f"{flag} must be >= 0")
    return value


def _generated(value: int, flag: str, values: Values) -> int:
    _not_negative(value, flag, values)
    if value > MAX_GENERATED:
        raise OptionError(f"{flag} must be at most {MAX_GENERATED} generated cases per run, got {value} "
                          f"(draw more with further runs under other {values.flag('hypothesis_seed')} values)")
    return value


def _workers(value: str | None, flag: str, values: Values) -> str | None:
    """pytest-xdist's -n: a count (0 = no workers), 'auto' or 'logical'."""
    if value is None or value in ("auto", "logical") or value.isdigit():
        return value
    raise OptionError(f"{flag} must be a whole number >= 0, 'auto' or 'logical', got {value!r}")


def _shard(value: str | None, flag: str, values: Values) -> Any:
    """The one place a shard spec is parsed: a :class:`conformance.run.sharding.Shard` or None."""
    if value is None:
        return None
    from conformance.run.sharding import Shard

    try:
        return Shard.parse(value, flag)
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def _shard_durations(value: Path | None, flag: str, values: Values) -> Path | None:
    if value is None:
        return None
    if values["shard"] is None:
        raise OptionError(f"{flag} weighs shards: it needs {values.flag('shard')} I/N")
    from conformance.output.records import RecordsError, read_usable

    path = Path(value)
    try:
        read_usable(path / "results.jsonl" if path.is_dir() else path)
    except RecordsError as exc:
        raise OptionError(f"{flag}: {exc}") from None
    return path


def _tolerance(value: str, flag: str, values: Values) -> Any:
    from conformance.checks.baseline import BaselineError, Tolerance

    try:
        return Tolerance.parse(value)
    except BaselineError as exc:
        raise OptionError(str(exc)) from None


def _baseline(value: Path | None, flag: str, values: Values) -> Any:
    """The earlier run's results by pair (loaded once it is checked), or None."""
    if value is None:
        return None
    from conformance.checks.baseline import BaselineError, load_baseline

    try:
        return load_baseline(Path(value))
    except BaselineError as exc:
        raise OptionError(str(exc)) from None


def _report(value: Path | None, flag: str, values: Values) -> Path | None:
    return None if values["no_report"] else _writable_dir(value, flag, values)


def _writable_dir(value: Path | None, flag: str, values: Values) -> Path | None:
    if value is None:
        return None
    from conformance.output.outdir import OutDirError, check_target

    try:
        check_target(Path(value), flag)
    except OutDirError as exc:
        raise OptionError(str(exc)) from None
    return Path(value)


def _history(value: Path | None, flag: str, values: Values) -> Path | None:
    """The run history a run's report records it in (None with --no-history)."""
    if values["no_history"]:
        return None
    from conformance.output import history

    path = Path(value) if value else Path(values["out"]) / history.HISTORY_NAME
    try:
        history.check(path)
    except history.HistoryError as exc:
        raise OptionError(str(exc)) from None
    return path


# --------------------------------------------------------------------------- the table

OPTIONS: tuple[Option, ...] = (
    Option("backend", "backend name or package.module:Class (repeatable; default: all usable here)",
           "--backend", "--conformance-backend", "append", metavar="NAME"),
    Option("case", "case id or glob (repeatable; default: the default case set)",
           "--case", "--conformance-case", "append", metavar="GLOB"),
    Option("cases", "a module (my_pkg.cases) or file (my_cases.py) that registers cases; repeatable "
                    "(isolated and xdist workers load it too)",
           "--cases", "--conformance-cases", "append", metavar="MODULE"),
    Option("out", f"results directory (default: {DEFAULT_OUT})", "--out", "--conformance-out",
           type=path_arg, default=DEFAULT_OUT, metavar="DIR", check=_writable_dir),
    Option("overwrite", "DIR may hold an earlier run: replace its results once this run has verdicts",
           "--overwrite", kind="flag", group="existing"),
    Option("resume", "keep the verdicts in DIR and run only the selected pairs that lack one",
           "--resume", kind="flag", group="existing"),
    Option("existing", "what to do when the results directory already holds files: refuse (default), "
                       "overwrite them, or resume (run only the pairs without a verdict there)",
           pytest="--conformance-existing", choices=EXISTING_MODES, default="refuse"),
    Option("progress", "one progress line per verdict and a summary table (the CLI's display)",
           pytest="--conformance-progress", kind="flag"),
    Option("workers", "pytest-xdist workers (a number or 'auto')", "--workers", "-n", cli_short="-n",
           foreign="numprocesses", metavar="N", check=_workers),
    Option("shard", "run shard I of N of the selected pairs (deterministic, balanced by expected cost)",
           "--shard", "--conformance-shard", metavar="I/N", check=_shard),
    Option("shard_durations", "previous results directory whose timings weigh the shards",
           "--shard-durations", "--conformance-shard-durations", type=path_arg, metavar="DIR",
           check=_shard_durations, with_option="shard"),
    Option("update_manifest", "rewrite each selected backend's manifest from this run, keeping reasons",
           "--update-manifest", "--conformance-update-manifest", "flag"),
    Option("generated", f"add N generated cases (drawn from --hypothesis-seed) to the default set "
                        f"(at most {MAX_GENERATED})",
           "--generated", "--conformance-generated", type=int, default=0, metavar="N", check=_generated),
    # Hypothesis's own pytest option seeds the generated cases too (and its shrinks)
    Option("hypothesis_seed", "seed the --generated cases are drawn from (default 0)",
           "--hypothesis-seed", "--hypothesis-seed", type=int, default=0, metavar="S",
           foreign="hypothesis_seed", with_option="generated"),
    Option("auto_repro", "write a repro script under DIR/repros for each unexpected failure (a generated "
                         "case shrunk first, in the isolation worker) (default: on)",
           "--auto-repro", "--conformance-auto-repro", "switch", default=True),
    Option("isolate", "each pair in a reusable worker process: a crash or hang is that pair's "
                      "crash/timeout verdict, not the end of the run (default: on)",
           "--isolate", "--conformance-isolate", "switch", default=True),
    Option("timeout", f"per-pair time limit when isolated (default: {DEFAULT_TIMEOUT_S:g})",
           "--timeout", "--conformance-timeout", type=float, metavar="SECONDS", check=_positive_seconds),
    Option("steps", f"probed calls per pair, each with fresh inputs (default: {DEFAULT_STEPS}); the residual "
                    "must stay exact over all of them; every call (these and the two before them) is checked for "
                    "parity, results and state",
           "--steps", "--conformance-steps", type=int, metavar="N", check=_steps),
    Option("baseline", "an earlier results directory (the last nightly, another torch version): a pair whose "
                       "measured peak or residual grew beyond the baseline tolerance fails",
           "--baseline", "--conformance-baseline", type=path_arg, metavar="DIR", check=_baseline),
    Option("baseline_tolerance", "growth allowed over the baseline: bytes, or a percentage such as 5%% "
                                 "(default 0: any growth fails, as the CPU allocator measures bytes exactly)",
           "--baseline-tolerance", "--conformance-baseline-tolerance", default="0", metavar="BYTES|PCT",
           check=_tolerance, with_option="baseline"),
    Option("report", "where the HTML report goes (default: DIR/report)", "--report", type=path_arg,
           metavar="SITE_DIR", check=_report),
    Option("no_report", "do not build the HTML report", "--no-report", kind="flag"),
    Option("profile_harness", "after the summary, print where the run's time went (per phase: build, compile, "
                              "reference, model, probe, judge, isolation, repro, report)",
           "--profile-harness", "--conformance-profile-harness", "flag"),
    Option("history", "SQLite run history the report records this run in (default: DIR/history.sqlite)",
           "--history", type=path_arg, metavar="PATH", check=_history),
    Option("no_history", "do not record this run in the history", "--no-history", kind="flag"),
    Option("no_cache", "make every reference and lifetime model again: do not read or write the result cache "
                       "($XDG_CACHE_HOME/torch-conformance/results)",
           "--no-cache", "--conformance-no-cache", "flag"),
)

BY_NAME: Mapping[str, Option] = {opt.name: opt for opt in OPTIONS}
#: the options the pytest plugin declares itself (others' flags, such as xdist's -n, are only forwarded)
PYTEST_OPTIONS = tuple(opt for opt in OPTIONS if opt.pytest and not opt.foreign)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``conformance run``'s options, from the table."""
    groups: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.cli is None:
            continue
        target: Any = parser
        if opt.group is not None:
            if opt.group not in groups:
                groups[opt.group] = parser.add_mutually_exclusive_group()
            target = groups[opt.group]
        opt.add_to_argparse(target)


def add_pytest_options(group: Any) -> None:
    """The plugin's options, from the table."""
    for opt in PYTEST_OPTIONS:
        opt.add_to_pytest(group)


def validate(values: Values) -> dict[str, Any]:
    """Check every option the entry point declares, in table order; the checked values by name.

    Raises :class:`OptionError` (one line, naming the flag) for the first bad one.  Options another
    plugin owns on the pytest side (xdist's -n) are that plugin's to check there.
    """
    checked: dict[str, Any] = {}
    for opt in OPTIONS:
        declared = opt.cli if values.side == "cli" else (opt.pytest if not opt.foreign else None)
        if declared is None:
            continue
        checked[opt.name] = opt.checked(values[opt.name], values)
    return checked


#: ``workerinput`` key of the options the controller checked, pickled as :func:`validate` returned them: an
#: xdist worker takes them as they are (the loaded baseline, the parsed shard, the checked folders) and parses
#: nothing again
CHECKED_KEY = "conformance_checked_options"


def hand_over(workerinput: MutableMapping[str, object], checked: Mapping[str, object]) -> None:
    """Give an xdist worker the controller's checked options (:data:`CHECKED_KEY`)."""
    workerinput[CHECKED_KEY] = pickle.dumps(dict(checked))


def handed(config: Any) -> dict[str, Any] | None:
    """The checked options an xdist worker's controller handed it, or None (not a worker, or a controller
    that turned the run on only as its workers collected: each worker then checks its own)."""
    data = getattr(config, "workerinput", {}).get(CHECKED_KEY)
    return pickle.loads(data) if data is not None else None  # this run's own controller wrote it


def given(values: Values) -> list[str]:
    """The plugin's own options a pytest session was given (set away from their defaults)."""
    return [opt.name for opt in PYTEST_OPTIONS if values[opt.name] != opt.parsed_default]


def pytest_flag(name: str) -> str:
    flag = BY_NAME[name].pytest
    assert flag is not None, name
    return flag


def forward(args: argparse.Namespace) -> list[str]:
    """The pytest arguments that carry ``conformance run``'s options to the plugin, from the table."""
    out: list[str] = []
    for opt in OPTIONS:
        if opt.cli and opt.pytest:
            out += opt.forward(getattr(args, opt.name), lambda name: getattr(args, name))
    return out
