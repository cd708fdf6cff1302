"""The ``conformance`` command's entry point: start the isolation worker first, then load the CLI.

A run's pairs go to a worker process that imports torch, the compilers and every backend
before its first pair (seconds).  The command itself imports torch, checks the options, builds
the selected cases and starts pytest before its first pair too.  Spawning the worker before any
of that lets the two start-ups overlap instead of adding up.  Only a plain isolated run does
it: with ``-n`` the pairs run in pytest-xdist's workers (each starts its own), with
``--no-isolate`` in this process, and with ``--cases`` the worker must inherit the sources the
CLI loads first.
"""

from __future__ import annotations

import re
import sys
import time

from conformance.util import phases
from conformance.util.paths import caches_outside_tmp

_NO_PRESTART = re.compile(
    r"^(-n.*|--numprocesses.*|--workers.*|--dist.*|--no-isolate|--cases.*|-h|--help|--collect-only|--co)$")


def prestarts(argv: list[str]) -> bool:
    """Whether ``conformance ARGV`` will run pairs in this process's own isolated worker."""
    return bool(argv) and argv[0] == "run" and not any(_NO_PRESTART.match(a) for a in argv[1:])


def named_backends(argv: list[str]) -> list[str]:
    """The ``--backend`` values on the command line (none: the run takes every usable backend)."""
    named = []
    for i, arg in enumerate(argv):
        if arg == "--backend" and i + 1 < len(argv):
            named.append(argv[i + 1])
        elif arg.startswith("--backend="):
            named.append(arg.partition("=")[2])
    return named


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    phases.STARTED = time.perf_counter()
    caches_outside_tmp()  # before the worker starts: it loads the compilers
    if prestarts(argv):
        from conformance.run.isolation import prestart, run_environment

        run_environment(parallel_pairs=False)
        prestart(named_backends(argv))
    from conformance.cli.main import main as cli_main

    return cli_main(argv)
