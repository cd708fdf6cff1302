"""Telling a user's Ctrl-C from a ``KeyboardInterrupt`` an adapter raises itself.

With ``--no-isolate`` a pair's adapter code runs in the run's own process.  A
``KeyboardInterrupt`` escaping it used to end the whole run (exit 130, no verdict for that
pair or any later one), although nobody pressed Ctrl-C: the adapter raised it.  While a pair
runs, the process's SIGINT and SIGTERM handlers are wrapped to note that a signal came
(and then do exactly what they did before).  A ``KeyboardInterrupt`` with no signal noted is
the adapter's fault, and becomes that pair's verdict; with one noted, it is the user's, and
stops the run as before.  Isolated pairs need none of this: the worker's death is the pair's
``crash``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

WATCHED = (signal.SIGINT, signal.SIGTERM)


@dataclass
class SignalWatch:
    """Whether SIGINT or SIGTERM arrived while the watch was on (``None``: it could not watch)."""

    received: int | None = None
    watching: bool = True

    @property
    def from_user(self) -> bool:
        """Whether a ``KeyboardInterrupt`` now is the user's (a signal came, or it cannot be told): re-raise it."""
        return not self.watching or self.received is not None


@contextlib.contextmanager
def watch_signals() -> Iterator[SignalWatch]:
    """Note SIGINT / SIGTERM while the block runs; their handlers still run as before."""
    watch = SignalWatch()
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        watch.watching = False
        yield watch
        return
    previous: dict[signal.Signals, Any] = {}
    for signum in WATCHED:
        handler = signal.getsignal(signum)
        if callable(handler):  # SIG_DFL / SIG_IGN raise no KeyboardInterrupt: nothing to tell apart
            previous[signum] = handler
            signal.signal(signum, _noting(watch, handler))
    try:
        yield watch
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _noting(watch: SignalWatch, handler: Any) -> Any:
    def noted(signum: int, frame: FrameType | None) -> Any:
        if watch.received is None:
            watch.received = signum
        return handler(signum, frame)

    return noted
