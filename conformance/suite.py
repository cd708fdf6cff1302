"""The conformance suite as a pytest module: one test per case x backend pair.

The plugin parametrizes it from ``--backend`` and ``--case``; run it through
``conformance run`` or directly: ``pytest --pyargs conformance.suite --backend eager``.
"""

from __future__ import annotations

from conformance.plugin import Pair, execute_pair


def test_conformance(conformance_pair: Pair) -> None:
    execute_pair(conformance_pair)
