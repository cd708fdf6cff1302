"""How a session ended: what the plugin hands the ``conformance`` command, and the runner fills in.

Its own module so that the light plugin (:mod:`conformance.run.plugin`) and the runner it turns on
can both name it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.util.text import plural


@dataclass
class RunStats:
    """How the session ended, for the CLI (exit code, report banner) once pytest returns."""

    total: int  # pairs this session set out to run (after -k, --shard and --resume)
    finished: int  # verdicts it made
    kept: int  # verdicts kept from before (--resume)
    interrupted: bool
    published: bool  # results.jsonl (and junit.xml) moved into place
    running: tuple[str, ...] = ()  # ``case@backend`` of the pairs under way when the session ended
    #: a write that found no room (the file and why, one line): the session stopped there
    no_room: str = ""

    @property
    def cut_short(self) -> str:
        """``interrupted after N of M pairs`` (or ``stopped ...`` for -x / --maxfail), else ``""``; the
        pairs that were under way named."""
        if self.interrupted:
            during = f" (during {', '.join(self.running)})" if self.running else ""
            return f"interrupted after {self.finished} of {plural(self.total, 'pair')}{during}"
        if self.finished < self.total:
            return f"stopped after {self.finished} of {plural(self.total, 'pair')}"
        return ""
