"""Test-session setup: the harness's tests write only to temporary directories.

Hypothesis keeps a cache (``.hypothesis/``) in the current directory, which for a test
run is the repository.  Point it, for this process and every subprocess it starts, at a
temporary directory removed when the session ends; so does the result cache (``$CONFORMANCE_RESULT_CACHE``:
the references and models the runs a test starts keep).

Each torch process of the session takes one intra-op thread: ``-n 2`` already runs two test
workers on two cores, and every CLI run and isolation worker a test starts would add an
OpenMP thread per core beside them (about 6% of the suite's CPU time went to that).  The
kernels' per-thread buffers are modelled with the process's own thread count, so verdicts do
not change; ``tests/transients/`` measures those entries with two threads.

A test marked ``full(ci=NODE)`` is a slower end-to-end variant of what the CI test ``NODE`` already
checks: it runs with ``CONFORMANCE_TESTS_FULL=1`` (``tox -e tests-full``, the nightly) and is
skipped, naming that test, in README's test command (CI's, which must stay under 15 minutes).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="conformance-tests-hypothesis-")
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _HYPOTHESIS_HOME
os.environ.setdefault("OMP_NUM_THREADS", "1")  # the processes this one starts (xdist workers, CLI runs)
# the runs a test starts keep references and models in a result cache of the session's own, never the user's
_RESULT_CACHE = tempfile.mkdtemp(prefix="conformance-tests-results-")
os.environ["CONFORMANCE_RESULT_CACHE"] = _RESULT_CACHE


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.sweep_sample import FULL_ENV, full

    if full():
        return
    for item in items:
        mark = item.get_closest_marker("full")
        if mark is not None:
            item.add_marker(pytest.mark.skip(
                reason=f"the full tier ({FULL_ENV}=1, tox -e tests-full); in CI: {mark.kwargs.get('ci')}"))


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HYPOTHESIS_HOME, ignore_errors=True)
    shutil.rmtree(_RESULT_CACHE, ignore_errors=True)


_TESTS = Path(__file__).parent
_MODULE_FIXTURE = re.compile(r"@pytest\.fixture\(scope=\"module\"")


def _files_with_a_module_fixture() -> frozenset[str]:
    """Test files that define a module-scoped fixture (a real run of the CLI, a browser), as node-id paths."""
    root = _TESTS.parent
    return frozenset(p.relative_to(root).as_posix() for p in _TESTS.glob("test_*.py")
                     if _MODULE_FIXTURE.search(p.read_text(encoding="utf-8")))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, a test dependency
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n``: each test is its own unit of work, as with ``--dist load``, except that a file with a
    module-scoped fixture goes to one worker whole.

    Split over two workers, such a file's fixture is made twice: for a sharded run of the op sweep,
    half a minute more of CI each time.  (pytest-xdist's own ``xdist_group`` marks do not reach its
    scheduler under pytest 9, whose node ids are no longer ``item._nodeid``.)  Grouped files go
    first (xdist orders units by their number of tests), so the single tests even out the end."""
    from xdist.scheduler import LoadScopeScheduling

    shared = _files_with_a_module_fixture()

    class SharedFixtureScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path in shared else nodeid

    return SharedFixtureScheduling(config, log)


def case_registry_saver() -> Callable[[], None]:
    """The case registry and its ``--cases`` bookkeeping as they are now; call the result to put them back
    (a test that registers cases from a file must not leak them into other tests)."""
    from conformance.api import case as case_mod

    case_mod.all_cases()  # the built-in cases load once per process: snapshot them, or restoring drops them
    registry, loaded = dict(case_mod._REGISTRY), set(case_mod._LOADED_SOURCES)
    env = os.environ.get(case_mod.SOURCES_ENV)

    def restore() -> None:
        case_mod._REGISTRY.clear()
        case_mod._REGISTRY.update(registry)
        case_mod._LOADED_SOURCES.clear()
        case_mod._LOADED_SOURCES.update(loaded)
        if env is None:
            os.environ.pop(case_mod.SOURCES_ENV, None)
        else:
            os.environ[case_mod.SOURCES_ENV] = env

    return restore
