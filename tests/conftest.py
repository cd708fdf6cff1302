"""Test-session setup: the harness's tests write only to temporary directories.

Hypothesis keeps a cache (``.hypothesis/``) in the current directory, which for a test
run is the repository.  Point it, for this process and every subprocess it starts, at a
temporary directory removed when the session ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

import pytest

_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="conformance-tests-hypothesis-")
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _HYPOTHESIS_HOME


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HYPOTHESIS_HOME, ignore_errors=True)


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
