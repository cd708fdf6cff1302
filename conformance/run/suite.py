"""The conformance suite as a pytest module: one test per case x backend pair.

The plugin parametrizes it from ``--conformance-backend`` and ``--conformance-case``; collecting
this module turns the plugin on.  Run it through ``conformance run`` or directly:
``pytest --pyargs conformance.run.suite --conformance-backend eager``.
"""

from __future__ import annotations

import pytest

from conformance.run.runner import Pair, execute_pair


def test_conformance(conformance_pair: Pair, request: pytest.FixtureRequest) -> None:
    execute_pair(conformance_pair, request.node)
