"""The ``conformance`` command's entry point: start the isolation worker first, then load the CLI.

A run's pairs go to a worker process that imports torch, the compilers and every backend
before its first pair (seconds).  The command itself imports torch, checks the options, builds
the selected cases and starts pytest before its first pair too.  So the command imports torch
and the engine first and forks the worker's fork server from itself (one ``import torch`` per
run, not two), and the server's imports of the compilers and the worker's warm-up overlap the
rest of the command's start-up instead of adding up.  Only a plain isolated run does
it: with ``-n`` the pairs run in pytest-xdist's workers (each starts its own), with
``--no-isolate`` in this process, and with ``--cases`` the worker must inherit the sources the
CLI loads first.  Such a run first executes itself again with the native heap observer preloaded
(:func:`conformance.util.native_preload.reexec_with_preload`, before any import), so that its fork
server and workers record the native memory domain.

Bad input is refused before any of that (:mod:`conformance.cli.early`): a mistyped option, backend or case
and a used ``--out`` are known without torch, and said in a second instead of after the worker's start.

A Ctrl-C while all that imports (the first second or two) ends the command at once with one
line and exit status 130: nothing is written yet, and a traceback from inside torch's imports
(or a library that swallows the interrupt in its own) helps nobody.  So this module imports
only what the interpreter has already loaded before it installs that handler.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

#: arguments that keep a run's pairs out of this process's own early worker
_NO_PRESTART = r"^(-n.*|--numprocesses.*|--workers.*|--dist.*|--no-isolate|--cases.*|-h|--help|--collect-only|--co)$"


def prestarts(argv: list[str]) -> bool:
    """Whether ``conformance ARGV`` will run pairs in this process's own isolated worker."""
    import re

    return bool(argv) and argv[0] == "run" and not any(re.match(_NO_PRESTART, a) for a in argv[1:])


def says_progress(argv: list[str]) -> bool:
    """Whether ``conformance ARGV`` is a run (not its ``--help``): a run shows its progress from the start."""
    return bool(argv) and argv[0] == "run" and not any(a in ("-h", "--help") for a in argv[1:])


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
    """The command: the early worker, the CLI's imports (a Ctrl-C meanwhile ends it at once), the CLI."""
    started = time.perf_counter()
    return interruptible(lambda: _main(sys.argv[1:] if argv is None else argv, started, argv is None))


def _main(argv: list[str], started: float, own_process: bool = False) -> int:
    if own_process and prestarts(argv):  # the fork server it forks from itself records the native domain
        from conformance.util.native_preload import reexec_with_preload

        reexec_with_preload(sys.orig_argv[1:])
    with_handler = importing()
    try:  # bad input is refused before torch loads and the worker starts (in a second, not a minute)
        from conformance.cli.early import refusal

        said = refusal(argv)
    finally:
        imported(with_handler)
    if said is not None:
        print(said, file=sys.stderr)
        return 2
    with_handler = importing()
    if says_progress(argv) and os.isatty(2):  # a person watching: a first line before the imports and warm-up
        os.write(2, b"conformance run: starting (importing torch, loading the backends and cases)\n")
    try:
        from conformance.util import phases
        from conformance.util.paths import caches_outside_tmp

        phases.STARTED = started
        caches_outside_tmp()  # before the worker starts: it loads the compilers
        if prestarts(argv):
            from conformance.run.isolation import prestart, run_environment

            run_environment(parallel_pairs=False)
            prestart(named_backends(argv))
        from conformance.cli.main import main as cli_main
    finally:
        imported(with_handler)
    return cli_main(argv)


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    """SIGINT while the command imports: nothing is written yet, so it ends here, before a library that
    swallows ``KeyboardInterrupt`` in its own imports can hide it, or its traceback can be printed."""
    os.write(2, b"conformance: interrupted\n")
    os._exit(128 + signum)  # an early worker dies with its parent (die_with_parent)


def importing() -> object:
    """From now until :func:`imported`: a Ctrl-C ends the command at once (one line, exit 130).  Returns the
    handler to put back.  A background job, which ignores SIGINT, keeps ignoring it.  A file-size limit
    (``ulimit -f``) makes a write fail (``EFBIG``, said in one line) rather than kill the command with a core."""
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _exit_at_once)
    return previous


def imported(previous: object) -> None:
    """The SIGINT handler :func:`importing` replaced, back: the CLI's own interrupt handling takes over."""
    signal.signal(signal.SIGINT, previous)  # type: ignore[arg-type]


#: the exit statuses of a command a signal ended (SIGINT, SIGTERM: 128 + the signal)
SIGNAL_EXITS = frozenset({128 + signal.SIGINT, 128 + signal.SIGTERM})


def interruptible(command: Callable[[], int]) -> int:
    """``command()``, but a ``KeyboardInterrupt`` it lets out is one line and exit status 130.  A command a
    signal ended has cleaned up (verdicts published, lock released, line said): it exits at once, without
    the interpreter's teardown of torch and the compilers (seconds on a loaded machine)."""
    try:
        code = command()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not trace back out of the exit
        isolation = sys.modules.get("conformance.run.isolation")
        if isolation is not None:  # a worker started early (prestart) ends with the command
            try:
                isolation.shutdown(kill=True)
            except Exception:
                pass
        print("conformance: interrupted", file=sys.stderr)
        code = 128 + signal.SIGINT
    if code in SIGNAL_EXITS:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the early worker and the fork server die with this process (die_with_parent)
    return code
