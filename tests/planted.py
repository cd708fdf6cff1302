"""Planted-fault backends for the harness's own tests (not registered as entry points)."""

from __future__ import annotations

from typing import Any

from conformance.backends.eager import EagerBackend

#: Values the leaky backend keeps: the leak, on purpose.
KEPT: list[Any] = []


def _keep_tanh(label: str, value: Any) -> None:
    """Keep every ``tanh`` result alive forever, as a backend with a stale reference would."""
    if label.split(":")[-1].startswith("tanh"):
        KEPT.append(value)


class LeakyEagerBackend(EagerBackend):
    """``eager`` with one planted lifetime fault: ``tanh`` intermediates never die."""

    name = "eager-leaky"
    node_hook = staticmethod(_keep_tanh)

