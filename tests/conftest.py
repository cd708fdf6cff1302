"""Test-session setup: the harness's tests write only to temporary directories.

Hypothesis keeps a cache (``.hypothesis/``) in the current directory, which for a test
run is the repository.  Point it, for this process and every subprocess it starts, at a
temporary directory removed when the session ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="conformance-tests-hypothesis-")
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _HYPOTHESIS_HOME


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HYPOTHESIS_HOME, ignore_errors=True)
