"""The pytest plugin's entry point (``pytest11``): options and the switch that turns a run on.

pytest loads this module in every session where the package is installed, so it imports
only light modules (no torch).  It declares the run options from the one table
(:mod:`conformance.run.options`) and turns the run on (:func:`conformance.run.runner.activate`, which
imports torch) only when the session asks for it:

* ``--conformance``, or any ``--conformance-*`` option set (the ``conformance`` command always
  sets some), when the session is configured;
* or when the suite module (``conformance/run/suite.py``) is collected, as in
  ``pytest --pyargs conformance.run.suite``; an xdist controller, which collects nothing, turns on
  when its workers report the suite's items.

Any other session (the project's own ``pytest tests``) is left alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conformance.run import options
from conformance.run.stats import RunStats

SUITE = Path(__file__).resolve().with_name("suite.py")
SUITE_TEST = "test_conformance"
#: a usage error found while collecting the suite (raised when collection ends)
_REFUSED = pytest.StashKey[pytest.UsageError]()


class Hooks:
    """Hooks this plugin calls, for plugins such as the ``conformance`` command's."""

    @pytest.hookspec
    def pytest_conformance_finished(self, stats: RunStats) -> None:
        """The run's results are published (or it ended without verdicts); called once, on the controller."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(Hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "backend conformance suite")
    group.addoption("--conformance", action="store_true",
                    help="run the conformance suite's plugin in this session (implied by any --conformance-* "
                         "option and by collecting conformance.run.suite)")
    options.add_pytest_options(group)


def _activate(config: pytest.Config) -> None:
    """Check the options (one line naming the flag for a bad one), then turn the run on.  An xdist worker
    takes the options its controller checked (:func:`conformance.run.options.handed`)."""
    from conformance.util.environment import EnvironmentProblem, check_environment

    values = options.handed(config)  # an xdist worker: the controller checked them, once
    try:
        if values is None:
            values = options.validate(options.Values.of_config(config))
        check_environment()
    except (options.OptionError, EnvironmentProblem) as exc:
        raise pytest.UsageError(str(exc)) from None
    from conformance.run import runner

    runner.activate(config, values)


def is_active(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin("conformance-run")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("conformance") or options.given(options.Values.of_config(config)):
        share_cores(config, os.environ)
        _activate(config)


#: the variable torch's intra-op thread pool (OpenMP) reads its size from when a process starts
THREADS_VARIABLE = "OMP_NUM_THREADS"


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def share_cores(config: pytest.Config, environ: Any, cores: int | None = None) -> str | None:
    """Under ``-n N`` (N >= 2), give each process that runs pairs ``cores // N`` intra-op threads (at least
    one), by the environment the xdist workers, and their isolation workers, start with.

    By default every torch process takes a thread per core, so N workers on C cores run N x C threads, and
    OpenMP's threads spin while they wait for a core (a run of the default matrix with ``-n 2`` on 2 cores:
    117 s and 227 CPU-seconds, against 99 s and 187 with one thread each; the same 250 verdicts).  Left alone
    on an xdist worker (it inherits the controller's choice), without workers, and where the user set
    ``OMP_NUM_THREADS``.  The kernels' per-thread buffers are modelled with the process's own count, and a
    run's shared references are keyed by it, so every process of the run takes the same.  Returns what it set."""
    workers = config.getoption("numprocesses", None)
    if hasattr(config, "workerinput") or not isinstance(workers, int) or workers < 2 or THREADS_VARIABLE in environ:
        return None
    environ[THREADS_VARIABLE] = str(max(1, (cores or usable_cores()) // workers))
    return environ[THREADS_VARIABLE]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """Collecting the suite module turns the run on (before its tests are generated)."""
    if not is_active(parent.config) and file_path.resolve() == SUITE:
        try:
            _activate(parent.config)
        except pytest.UsageError as exc:  # raised once collection ends: one line, not a collection error
            parent.config.stash[_REFUSED] = exc


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config) -> None:
    if (refused := config.stash.get(_REFUSED, None)) is not None:
        raise refused


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """An xdist controller collects nothing: its workers' suite items turn it on, before any runs."""
    config = node.config
    if is_active(config) or not any(_is_suite_item(config, nodeid) for nodeid in ids):
        return
    _activate(config)
    writer = config.pluginmanager.get_plugin("conformance-writer")
    if writer is not None:  # registered during this hook: it missed this call
        writer.pytest_xdist_node_collection_finished(node, ids)


def _is_suite_item(config: pytest.Config, nodeid: str) -> bool:
    """A suite test's id: ``PATH::test_conformance[case@backend]``; PATH is empty for a module outside the
    rootdir (``--pyargs conformance.run.suite`` run from elsewhere), else it must be the suite's file."""
    path, _, name = nodeid.partition("::")
    if not (name.startswith(f"{SUITE_TEST}[") and name.endswith("]") and "@" in name):
        return False
    return not path or (config.rootpath / path).resolve() == SUITE
