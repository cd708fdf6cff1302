"""Crash isolation: run each case in a reusable worker process, so a crash costs one verdict.

A backend that segfaults, aborts or hangs (the IREE compiler does the first on
``while_loop`` graphs) must not take the run down.  :class:`WorkerPool` keeps one
worker subprocess (a fresh interpreter: no threads inherited from torch or the IREE runtime)
and sends it a :class:`Request` (case id, backend name or module:Class spec, options) as a JSON line; the worker runs
:func:`conformance.run.engine.run_case` and sends the :class:`Result` back in a :class:`Reply`.

* The worker dies by a signal (or exits): the case's verdict is ``crash`` with the
  signal's name and the tail of what the worker wrote to stderr.
* No verdict within ``timeout_s``: the worker is killed; the verdict is ``timeout``.

Either way the next case gets a fresh worker.

What a worker writes on stdout and stderr goes to a temporary file that has no name
(``tempfile.TemporaryFile``: ``O_TMPFILE`` on Linux, unlinked at once elsewhere), read back
for a crash's stderr tail: the temporary directory holds nothing of a run, however it ends
(passed, failed, interrupted, or killed outright).

A request may carry a generated program instead of naming a registered case
(:func:`run_case_isolated`): that is how a shrink (:func:`conformance.run.repro.shrink`) runs
its candidates, so a backend that crashes or hangs on a shrunk candidate gives that
candidate a ``crash``/``timeout`` verdict and the shrink goes on with a fresh worker.
Workers are reused across cases otherwise, so the cost of isolation is one pipe round
trip per case plus one interpreter start (``import torch``) per worker, not per case.

Workers are forked from a fork server (:func:`fork_server_main`): one interpreter per pool that has
imported torch, the engine and the backends' modules and does nothing else (no torch op has run
in it, no backend is warmed up).  A worker it forks starts in milliseconds instead of the seconds
an interpreter takes to import torch, which is what a crash costs the next pair (the IREE
compiler's ``while_loop`` crashes are in the default matrix).  A ``conformance run`` forks its first
server from itself (:func:`prestart`), right after importing torch and the engine and before anything
else: it needs those imports anyway, and the server then costs no second ``import torch``.  The worker
is forked twice and the middle process exits, so the worker is this process's child (a subreaper adopts it): its exit
status, signal included, reaches the pool as a spawned worker's does.  The fork server is used
where a subreaper is possible (Linux) and the environment and working directory are still those
it started with (its imports read them); otherwise, or when it is gone, or with
``CONFORMANCE_FORK_SERVER=0``, a worker is a fresh interpreter.

A worker runs in its own session and process group, so a terminal's Ctrl-C reaches only
the run, which then ends the worker's whole group itself (with whatever the backend
spawned).  It also dies with its parent: on Linux the kernel sends it SIGKILL when the
parent dies (``PR_SET_PDEATHSIG``), elsewhere a watchdog thread notices the orphaning.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, NoReturn

from conformance.api.result import Result, Status
from conformance.probes import native_heap
from conformance.run import reaper
from conformance.run.options import RunOptions
from conformance.util.paths import caches_outside_tmp
from conformance.util.text import clip_start, code_roots, traceback_tail, without_escapes

if TYPE_CHECKING:
    from collections.abc import Callable

    from conformance.api.case import Case

STDERR_TAIL_CHARS = 3000
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ORPHAN_POLL_S = 1.0


def die_with_parent(parent_pid: int) -> None:
    """End this worker when the run that started it ends, even by SIGKILL (no cleanup of its own runs then)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:
        threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the request above took effect
        os._exit(1)


def _exit_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(ORPHAN_POLL_S)
    os._exit(1)


@dataclass(frozen=True)
class Request:
    """One pair for the worker, one JSON line on its stdin: the case (a registered one by its id, or
    a generated ``program`` run under that id: a shrink's candidate), the backend as the run named
    it, and the run's options."""

    case_id: str
    spec: str
    options: RunOptions = field(default_factory=RunOptions)
    #: ``{"program": Program.to_json(), "seed": int}``, or ``None`` for the registered case
    program: dict[str, Any] | None = None

    def to_line(self) -> str:
        return json.dumps({"case": self.case_id, "backend": self.spec, "options": self.options.to_json(),
                           "program": self.program}) + "\n"

    @classmethod
    def from_line(cls, line: str | bytes) -> Request:
        data = json.loads(line)
        return cls(str(data["case"]), str(data["backend"]), RunOptions.from_json(data.get("options")),
                   data.get("program"))


@dataclass(frozen=True)
class Reply:
    """One line from the worker on its reply pipe: ``ready`` (with its pid), ``ok`` (a
    :class:`Result`'s JSON) or ``error`` (a harness error outside the engine); ``recycle``: the pair
    left state the worker could not restore, so it ends after this reply."""

    kind: str
    payload: Any = None
    recycle: bool = False

    def to_line(self) -> str:
        return json.dumps({"kind": self.kind, "payload": self.payload, "recycle": self.recycle}, default=str) + "\n"

    @classmethod
    def from_line(cls, line: str | bytes) -> Reply:
        data = json.loads(line)
        return cls(str(data["kind"]), data.get("payload"), bool(data.get("recycle")))


def worker_main(reply_fd: int, parent_pid: int, warm: list[str] | None = None) -> None:
    """Worker loop: one JSON request per stdin line, one JSON reply line each.

    A request is a :class:`Request`, a reply a :class:`Reply`."""
    import faulthandler

    die_with_parent(parent_pid)
    faulthandler.enable()  # a Python traceback of the crashing case lands in the stderr tail
    native_heap.start_tracking()  # before any compile: a runtime's pools are then known by their pointers
    reply = os.fdopen(reply_fd, "w", encoding="utf-8")

    def send(kind: str, payload: Any, recycle: bool = False) -> None:
        reply.write(Reply(kind, payload, recycle).to_line())
        reply.flush()

    from conformance.api.adapter import discover
    from conformance.run import engine

    registry = discover()
    if warm is not None:
        from conformance.api.case import all_cases

        all_cases()  # the case registry (the zoo's model libraries, Hypothesis for generated ones)
        _warm_up(registry, warm)
    send("ready", os.getpid())  # a case's clock starts after interpreter start-up
    for line in sys.stdin:
        try:
            request = Request.from_line(line)
            case = _program_case(request.case_id, request.program) if request.program else _case(request.case_id)
            result = engine.run_case(case, registry.get(request.spec), request.options, request.spec, recyclable=True)
            send("ok", result.to_json(), engine.NEEDS_RECYCLE)
        except Exception as exc:  # an error outside the engine's own handling (resolving the case, its options)
            error = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            send("error", error, engine.NEEDS_RECYCLE)
        if engine.NEEDS_RECYCLE:  # a pair left state that could not be restored: this worker ends here
            break


def _warm_up(registry: Any, specs: list[str]) -> None:
    """Each backend's one-time start-up costs (``Backend.warm_up``), every usable one without ``specs``.

    A warm-up that fails is left for the pairs to meet: it decides nothing."""
    try:
        backends = [registry.get(s) for s in specs] if specs else registry.usable()
    except Exception:
        return
    for backend in backends:
        try:
            if backend.unavailable_reason() is None:
                backend.warm_up()
        except Exception:
            pass


#: ``0``: every worker is a fresh interpreter (no fork server)
FORK_SERVER_ENV = "CONFORMANCE_FORK_SERVER"
#: environment variables that change while a run goes on and that no import reads (pytest's current test):
#: a forked worker gets their values of the moment, and they do not make the server stale
VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST"})
#: the names a forked worker and the fork server give themselves (``ps -o comm``, ``/proc/PID/comm``): both
#: show the server's command line, which a fork keeps
WORKER_NAME, FORK_SERVER_NAME = "conformance-wkr", "conformance-fs"
PR_SET_NAME = 15  # <linux/prctl.h>
#: torch.cuda.is_available() asks NVML, not the CUDA driver, with this set (torch/cuda/__init__.py)
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
#: the fork server's exit status when a child forked from it could not use a device the imports initialised
FORK_UNSAFE_EXIT = 3


def _name_process(name: str) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
ADOPTION_WAIT_S = 10.0  # the forked worker waits this long at most for this process to adopt it
FORK_ANSWER_TIMEOUT_S = 300.0  # a fork server's imports and fork, at most (a worker's start-up allowance)
CLOSING_ANSWER_S = 2.0  # the same, from a server the pool has killed: its socket closes as it dies


def fork_server_main(control_fd: int, parent_pid: int, preload: list[str] | None = None) -> None:
    """The fork server's loop: import what every worker imports, then fork one worker per request.

    A request is a JSON message on the control socket (``SOCK_SEQPACKET``) carrying the worker's
    stdin, reply pipe and log as file descriptors; the answer is the worker's pid.  Nothing runs
    here that starts threads or touches a backend: a fork copies only the forking thread."""
    die_with_parent(parent_pid)
    _name_process(FORK_SERVER_NAME)
    control = socket.socket(fileno=control_fd)
    # torch.cuda.is_available() in an import would initialise the CUDA driver, after which torch refuses CUDA
    # in every forked child; NVML answers the same question without that, for the imports only
    nvml_check = os.environ.get(NVML_CHECK_ENV)
    os.environ[NVML_CHECK_ENV] = "1"
    native_heap.start_tracking()  # from the first import: numpy's and the runtimes' memory is known
    import torch  # noqa: F401  (the import a worker pays for)

    from conformance.api.adapter import discover
    from conformance.run import engine

    registry = discover()
    _import_quietly(WORKER_PRELOAD)
    engine.warm_cache_keys()  # every worker's result cache keys hold them
    if preload is not None:  # the run's backends (every registered one for []) name the compilers' packages
        _preload(registry, preload)
    native_heap.rescan()  # torch's libraries, loaded since, are excluded code
    if nvml_check is None:
        del os.environ[NVML_CHECK_ENV]
    else:
        os.environ[NVML_CHECK_ENV] = nvml_check
    lost = devices_lost_in_a_fork()
    if lost:
        print(f"conformance fork server: a worker forked after these imports could not use {', '.join(lost)} "
              "(its runtime was initialised in this process); the pool starts fresh interpreters instead",
              file=sys.stderr, flush=True)
        sys.exit(FORK_UNSAFE_EXIT)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 3)
        except OSError:
            break
        if not message:  # the pool closed its end
            break
        try:
            pid = _fork_worker(control, fds, json.loads(message), parent_pid)
        finally:
            for fd in fds:
                os.close(fd)
        control.send(json.dumps({"pid": pid}).encode())


def devices_lost_in_a_fork() -> list[str]:
    """The torch device runtimes a child forked from this process could not use.

    torch refuses a device in a forked child ("Cannot re-initialize CUDA in forked subprocess") once the
    parent initialised its runtime; a backend's import can do that.  A fork asks a child, which is what a
    worker forked from here would be."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(read_end)
            import torch

            lost = [name for name in ("cuda", "xpu", "mtia")
                    if getattr(getattr(torch, name, None), "_is_in_bad_fork", lambda: False)()]
            os.write(write_end, json.dumps(lost).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        data = answer.read()
    os.waitpid(child, 0)
    return list(json.loads(data)) if data else ["an unknown device (the child could not tell)"]


#: what every worker imports whatever its backend: each pair's trace of the user-level step (``make_fx``) imports
#: inductor's config and with it ``torch._dynamo`` (two seconds of CPU), in each worker a crash or a hang replaces
WORKER_PRELOAD = ("torch._inductor.config",)


def _preload(registry: Any, specs: list[str]) -> None:
    """Import the ``preload_modules`` of the backends ``specs`` name (every registered one for none); what
    fails to import is left to the worker."""
    try:
        backends = [registry.get(s) for s in specs] if specs else list(registry.backends.values())
    except Exception:
        return
    for backend in backends:
        _import_quietly(getattr(backend, "preload_modules", ()))


def _import_quietly(modules: Iterable[str]) -> None:
    """Import each of ``modules``; one that fails is left to the worker that needs it (its error is its pair's)."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:
            pass


def _fork_worker(control: socket.socket, fds: list[int], request: dict[str, Any], parent_pid: int) -> int:
    """Fork a worker that this server's parent adopts: fork, fork again, and the middle process exits."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read_end)
        worker = os.fork()
        if worker == 0:
            os.close(write_end)
            _run_forked_worker(control, fds, request, parent_pid)  # never returns
        os.write(write_end, str(worker).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pid_pipe:
        data = pid_pipe.read()
    os.waitpid(middle, 0)  # once it is reaped, the worker has its new parent
    return int(data) if data else -1


def _run_forked_worker(control: socket.socket, fds: list[int], request: dict[str, Any], parent_pid: int) -> None:
    """In the forked worker: its own session, the pool's pipes as stdin/stdout/stderr, then the worker
    loop; it ends as an interpreter does (exit functions run), never back in the server's loop."""

    def body() -> None:
        control.close()
        _name_process(WORKER_NAME)
        os.setsid()  # its own process group: the pool ends the group, as it does a spawned worker's
        stdin_fd, reply_fd, log_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        for fd in (stdin_fd, log_fd):
            if fd > 2:
                os.close(fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # the worker loop reads it to the end
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])  # the run's environment at this spawn, as a fresh interpreter's
        deadline = time.monotonic() + ADOPTION_WAIT_S
        while os.getppid() != parent_pid and time.monotonic() < deadline:
            time.sleep(0.001)  # the middle process is exiting: then the pool's process adopts this one
        worker_main(reply_fd, parent_pid, request.get("warm"))

    _end_as_an_interpreter(body)


def _end_as_an_interpreter(body: Callable[[], None]) -> NoReturn:
    """Run ``body`` in a forked child, then end it as an interpreter ends (its exit functions run, its
    streams flushed, ``sys.exit``'s status or 1 after a traceback), never back in the code that forked it."""
    code = 0
    try:
        body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class _Child:
    """A child this process forked itself: the part of ``subprocess.Popen`` the pool uses."""

    def __init__(self, pid: int) -> None:
        self._pid: int | None = pid
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        assert self._pid is not None
        return self._pid

    def poll(self) -> int | None:
        if self.returncode is None and self.pid > 0:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, with its status
                self.returncode = 1
                return self.returncode
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode


class _Forked(_Child):
    """A worker the fork server forked and this process adopted.  Its pid is the server's answer, read when
    first needed (the server may still be importing)."""

    def __init__(self, server: _ForkServer, stdin: IO[bytes]) -> None:
        super().__init__(0)
        self._server = server
        self._pid = None
        self.stdin: IO[bytes] | None = stdin

    @property
    def pid(self) -> int:
        if self._pid is None:
            self._pid = self._server.answer()
            if self._pid <= 0:
                self.returncode = 1  # never forked: the server died
        return self._pid


def imports_for_workers() -> None:
    """Import what a fork server imports before it forks (torch, the engine, the backends' registry), under the
    same guard: an import that asks ``torch.cuda.is_available()`` asks NVML, and initialises no device."""
    nvml_check = os.environ.get(NVML_CHECK_ENV)
    os.environ[NVML_CHECK_ENV] = "1"
    try:
        import torch  # noqa: F401

        from conformance.api.adapter import discover
        from conformance.run import engine  # noqa: F401

        discover()
    finally:
        if nvml_check is None:
            del os.environ[NVML_CHECK_ENV]
        else:
            os.environ[NVML_CHECK_ENV] = nvml_check


def _fork_server_here(control: socket.socket, log: IO[bytes], env: dict[str, str], preload: list[str] | None) -> int:
    """Fork this process into a fork server; its pid.

    Only where this process has done nothing but :func:`imports_for_workers` (and read its arguments): the
    server is then the interpreter a ``python -m conformance.run.isolation --fork-server`` would be once
    its imports are done, without paying for them again (``import torch``: two seconds of CPU per run).
    The child is made into that interpreter: its own session, default signal handlers, the log as its
    stdout and stderr, no other inherited descriptor, the pool's environment and import path."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent_pid = os.getpid()
    pid = os.fork()
    if pid:
        return pid

    def body() -> None:
        os.setsid()
        for signum in signal.valid_signals():
            handler = signal.getsignal(signum)
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        keep = control.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 16)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.argv = [__file__, "--fork-server", str(keep), str(parent_pid),
                    *(["--preload", *preload] if preload is not None else [])]
        fork_server_main(keep, parent_pid, preload)

    _end_as_an_interpreter(body)


@dataclass
class _ForkServer:
    """The pool's fork server: its process, this end of its control socket, and what it started with."""

    process: subprocess.Popen[bytes] | _Child
    control: socket.socket
    env: dict[str, str]
    cwd: str
    log: IO[bytes]
    pending: int = 0  # requests sent whose answer has not been read
    closing: bool = False  # killed while an answer was pending: it is read without waiting long

    @classmethod
    def start(cls, env: dict[str, str], preload: list[str] | None, here: bool = False) -> _ForkServer:
        """Start one; it imports the ``preload_modules`` of the backends ``preload`` names (``[]``: all).
        ``here``: fork it from this process, which has imported what a server imports and done nothing else."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = tempfile.TemporaryFile(prefix="conformance-fork-server-", suffix=".log")
        process: subprocess.Popen[bytes] | _Child
        try:
            if here:
                process = _Child(_fork_server_here(theirs, log, env, preload))
            else:
                process = subprocess.Popen(
                    [sys.executable, "-m", "conformance.run.isolation", "--fork-server", str(theirs.fileno()),
                     str(os.getpid()), *(["--preload", *preload] if preload is not None else [])],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(theirs.fileno(),), env=env,
                    start_new_session=True)
        except BaseException:
            mine.close()
            log.close()
            raise
        finally:
            theirs.close()
        return cls(process, mine, dict(env), os.getcwd(), log)

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a worker forked now is the one a fresh interpreter would be: the server is alive and the
        environment (but for what changes per test: :data:`VOLATILE_ENV`) and directory are those its
        imports read."""
        def lasting(e: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in e.items() if k not in VOLATILE_ENV}

        return self.process.poll() is None and lasting(env) == lasting(self.env) and os.getcwd() == self.cwd

    def fork(self, stdin: int, reply: int, log: int, warm: list[str] | None, env: dict[str, str]) -> None:
        """Ask for a worker on these file descriptors, with ``env`` as its environment (the run's now)."""
        socket.send_fds(self.control, [json.dumps({"warm": warm, "cwd": os.getcwd(), "env": env}).encode()],
                        [stdin, reply, log])
        self.pending += 1

    def answer(self) -> int:
        """The pid of the worker last asked for (-1 when the server died first, or did not answer within
        :data:`FORK_ANSWER_TIMEOUT_S`: a preload that hangs; the server is ended then)."""
        self.control.settimeout(CLOSING_ANSWER_S if self.closing else FORK_ANSWER_TIMEOUT_S)
        try:
            data = self.control.recv(1 << 16)
        except TimeoutError:
            _kill_group(self.process)
            data = b""
        except OSError:
            data = b""
        self.pending -= 1
        if not data:
            return -1
        return int(json.loads(data)["pid"])

    def refusal(self) -> str:
        """The server's reason, when it exited rather than fork workers that could not use a device."""
        try:
            code = self.process.wait(1.0)  # its control socket closed as it exited
        except subprocess.TimeoutExpired:
            return ""
        if code != FORK_UNSAFE_EXIT:
            return ""
        size = os.fstat(self.log.fileno()).st_size
        lines = os.pread(self.log.fileno(), min(size, 4096), max(0, size - 4096)).decode(errors="replace")
        return lines.strip().splitlines()[-1] if lines.strip() else "the fork server refused to fork"

    def close(self, kill: bool = False) -> None:
        self.control.close()  # the server's loop ends at EOF
        if kill:
            _kill_group(self.process)
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            _kill_group(self.process)
            self.process.wait()
        self.log.close()


def _fork_server_wanted() -> bool:
    return os.environ.get(FORK_SERVER_ENV, "1") != "0" and reaper.supported()


def _program_case(case_id: str, program: dict[str, Any]) -> Case:
    """A generated program sent with the request (a shrink's candidate), as a case under ``case_id``."""
    from conformance.cases import generated

    return generated.case_from_program(generated.Program.from_json(program["program"]), case_id,
                                       int(program["seed"]))


def _case(case_id: str) -> Case:
    """The case the run selected, by its id: the run's selection is not made again here."""
    from conformance.api.case import CaseError, resolve

    case = resolve(case_id)
    if case is None:
        raise CaseError(f"unknown case {case_id!r}")
    return case


@dataclass
class _Worker:
    process: subprocess.Popen[bytes] | _Forked
    replies: IO[bytes]
    log: IO[bytes]  # the worker's stdout and stderr: a nameless temporary file, read with pread
    cases_run: int = 0
    ready: bool = False  # it said "ready": imports done, backends discovered
    #: this process's descendants before the worker started: any other one left when it is gone was its
    before: set[int] = field(default_factory=set)
    warming: bool = False  # it warms backends up before saying so

    def stderr_size(self) -> int:
        return os.fstat(self.log.fileno()).st_size

    def stderr_tail(self, offset: int = 0) -> str:
        try:
            size = self.stderr_size()
            start = max(offset, size - 4 * STDERR_TAIL_CHARS)  # UTF-8: at most 4 bytes a character
            data = os.pread(self.log.fileno(), size - start, start)
        except (OSError, ValueError):
            return ""
        return clip_start(data.decode("utf-8", errors="replace"), STDERR_TAIL_CHARS)

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class WorkerPool:
    """One reusable worker subprocess, respawned after a crash or a timeout."""

    start_timeout_s: float = 300.0  # interpreter start-up (imports torch), not counted against a case
    #: backends the next worker warms up before it says it is ready ([] every usable one, None none)
    warm: list[str] | None = None
    spawn_count: int = 0
    startup_wait_s: float = 0.0  # time the run waited for workers to start (beyond what overlapped)
    fork_count: int = 0  # workers the fork server forked (of spawn_count)
    #: fork the first fork server from this process (:func:`prestart`: it has imported what a server imports)
    server_here: bool = False
    _worker: _Worker | None = field(default=None, repr=False)
    _server: _ForkServer | None = field(default=None, repr=False)
    _no_server: bool = field(default=False, repr=False)  # a forked worker failed to start: no fork server again
    fork_server_refusal: str = ""  # why the fork server would not fork (a device its imports initialised)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the worker now and wait until it is ready (otherwise the first case starts it)."""
        self._ensure()

    def spawn(self) -> None:
        """Start the worker without waiting for it: its imports overlap whatever the run does first."""
        if self._worker is None or not self._worker.alive():
            self._discard()
            self._worker = self._spawn()

    def _ensure(self) -> _Worker:
        if self._worker is not None and self._worker.alive() and self._worker.ready:
            return self._worker
        self.spawn()
        worker = self._worker
        assert worker is not None
        t0 = time.perf_counter()
        got = _wait(worker, self.start_timeout_s)
        self.startup_wait_s += time.perf_counter() - t0
        if got is None or got.kind != "ready":
            tail = worker.stderr_tail()
            self._discard()
            if isinstance(worker.process, _Forked) and self._server is not None:
                self.fork_server_refusal = self._server.refusal()
                if self.fork_server_refusal:
                    warnings.warn(self.fork_server_refusal, RuntimeWarning, stacklevel=2)
                self._server.close(kill=True)  # a forked worker that cannot start: fresh interpreters from now on
                self._server, self._no_server = None, True
                return self._ensure()
            if worker.warming:  # a warm-up decides nothing: start one without it
                return self._ensure()
            raise RuntimeError(f"conformance worker failed to start: {got!r}\n{tail}")
        worker.ready = True
        return worker

    def _spawn(self) -> _Worker:
        subreaper = reaper.become_subreaper()  # a dying worker's orphans (its backend's children) come to us
        env = dict(os.environ)
        # The worker imports what the parent can: planted test adapters, ad hoc module:Class specs.
        env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env = native_heap.worker_environment(env)  # the native memory domain's observer, preloaded
        server = self._fork_server(env) if subreaper else None
        before = reaper.descendants()  # the fork server among them: it outlives every worker
        rfd, wfd = os.pipe()
        log = tempfile.TemporaryFile(prefix="conformance-worker-", suffix=".log")
        process: subprocess.Popen[bytes] | _Forked | None = None
        try:
            if server is not None:
                process = self._fork(server, wfd, log, env)
            if process is None:
                process = subprocess.Popen(
                    [sys.executable, "-m", "conformance.run.isolation", "--worker", str(wfd), str(os.getpid()),
                     *(["--warm", *self.warm] if self.warm is not None else [])],
                    stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(wfd,), env=env,
                    start_new_session=True,  # its own process group: Ctrl-C goes to the run, which ends it
                )
        except BaseException:
            os.close(rfd)
            log.close()
            raise
        finally:
            os.close(wfd)
        self.spawn_count += 1
        warming, self.warm = self.warm is not None, None  # a respawn serves the next pair at once
        return _Worker(process, os.fdopen(rfd, "rb"), log, warming=warming, before=before)

    def _fork_server(self, env: dict[str, str]) -> _ForkServer | None:
        """The fork server that can fork this worker (started with the pool's first worker), or ``None``."""
        if self._no_server or not _fork_server_wanted():
            return None
        if self._server is not None and not self._server.serves(env):
            self._server.close(kill=True)  # gone, or the environment changed: its imports read the old one
            self._server = None
        if self._server is None:
            here, self.server_here = self.server_here, False  # once: this process goes on to run things
            here = here and env.get("LD_PRELOAD") == os.environ.get("LD_PRELOAD")  # a fork keeps this one's
            try:
                self._server = _ForkServer.start(env, self.warm, here)  # the run's backends, as its first worker warms
            except OSError:
                return None
        return self._server

    def _fork(self, server: _ForkServer, reply: int, log: IO[bytes], env: dict[str, str]) -> _Forked | None:
        """Ask the fork server for a worker on these pipes; ``None`` when it is gone (a fresh interpreter then)."""
        stdin_r, stdin_w = os.pipe()
        try:
            server.fork(stdin_r, reply, log.fileno(), self.warm, env)
        except OSError:
            os.close(stdin_w)
            server.close(kill=True)
            self._server = None
            return None
        finally:
            os.close(stdin_r)
        self.fork_count += 1
        return _Forked(server, os.fdopen(stdin_w, "wb"))

    def _ask(self, request: Request, timeout_s: float) -> tuple[_Worker, int, Reply | None, float]:
        """Send one request and wait for its reply: (worker, stderr offset, reply or None, seconds waited).

        The clock starts before the request is written: the worker may begin at once."""
        worker = self._ensure()
        offset = worker.stderr_size()
        assert worker.process.stdin is not None
        t0 = time.perf_counter()
        worker.process.stdin.write(request.to_line().encode())
        worker.process.stdin.flush()
        got = _wait(worker, timeout_s)
        elapsed = time.perf_counter() - t0
        if got is not None and got.recycle:
            # the pair left state the worker could not restore: the next pair gets a fresh worker
            self._discard()
        return worker, offset, got, elapsed

    def _failed(self, worker: _Worker, elapsed: float, timeout_s: float, offset: int = 0) -> tuple[str | None, str]:
        """After no reply: discard the worker.  Returns its exit described (``None`` when it hung and was
        killed) and what it wrote on stderr since ``offset``."""
        if elapsed < timeout_s:  # the reply pipe closed: the worker is exiting; let it finish dying
            try:
                worker.process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        hung = worker.alive()
        code = None if hung else worker.process.wait()
        tail = worker.stderr_tail(offset)
        killed = self._discard()
        if killed:
            tail = f"{tail}\n{reaper.note(killed)}" if tail else reaper.note(killed) or ""
        return (None if code is None else describe_exit(code)), tail

    def run(self, case_id: str, backend: str, timeout_s: float, options: RunOptions | None = None,
            program: dict[str, Any] | None = None) -> Result:
        """The verdict of one case, ``crash``/``timeout`` included; never raises for the backend's faults.

        ``program`` (``{"program": Program.to_json(), "seed": int}``): run that generated program
        under ``case_id`` instead of the registered case of that id."""
        request = Request(case_id, backend, options or RunOptions(), program)
        worker, offset, got, elapsed = self._ask(request, timeout_s)
        worker.cases_run += 1
        if got is not None:
            kind, payload = got.kind, got.payload
            if kind == "ok":
                result = Result.from_json(payload)
                result.timing["isolated_wall_s"] = elapsed
                return result
            error = payload if isinstance(payload, dict) else {"error": str(payload)}
            return _placeholder(case_id, backend, Status.FAIL_RUN,
                                f"harness error in the worker, outside the engine: {error.get('error', '')}",
                                traceback_tail(str(error.get("traceback", "")), 4000, code_roots()), elapsed)
        what, tail = self._failed(worker, elapsed, timeout_s, offset)
        if what is None:
            return _placeholder(case_id, backend, Status.TIMEOUT, f"no verdict within {timeout_s:g} s (worker killed)",
                                elapsed=elapsed)
        return _placeholder(case_id, backend, Status.CRASH, what, tail, elapsed)

    def close(self, kill: bool = False) -> None:
        """Let the worker finish its loop (a few seconds at most), or with ``kill`` end it at once."""
        worker = self._worker
        if kill and self._server is not None and self._server.pending:
            # a worker asked for whose pid was never read (an interrupt came first): end the server, so the
            # answer the discard below reads is its end of the socket closing, not up to FORK_ANSWER_TIMEOUT_S
            _kill_group(self._server.process)
            self._server.closing = True
        if not kill and worker is not None and worker.alive() and worker.process.stdin is not None:
            try:
                worker.process.stdin.close()  # EOF: the worker loop ends
                worker.process.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._discard()
        if self._server is not None:
            self._server.close(kill=kill)
            self._server = None

    def _discard(self) -> list[str]:
        """End the worker and everything it left running; returns what was left besides it (described)."""
        worker, self._worker = self._worker, None
        if worker is None:
            return []
        tree = reaper.descendants(worker.process.pid) if worker.alive() else set()
        _kill_group(worker.process)  # SIGKILL: a hung native call ignores SIGTERM
        killed = reaper.kill(tree)  # in other sessions too, which the group misses
        worker.process.wait()
        # what it left when it died first: adopted by this process (a subreaper), killed here
        killed += reaper.sweep(worker.before | {worker.process.pid})
        if worker.process.stdin is not None:
            try:
                worker.process.stdin.close()
            except OSError:
                pass
        worker.replies.close()
        worker.log.close()
        return killed


def _kill_group(process: subprocess.Popen[bytes] | _Child) -> None:
    """SIGKILL the worker's process group: the worker and anything its backend started.

    Only while the worker is not yet reaped: until then its pid, the group's id, cannot be reused.
    """
    if process.returncode is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait(worker: _Worker, timeout_s: float) -> Reply | None:
    """The worker's next reply, or ``None`` if it died or the time ran out."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([worker.replies], [], [], min(left, 0.5))
        if ready:
            line = worker.replies.readline()
            if not line:  # EOF: the worker is gone
                return None
            try:
                return Reply.from_line(line)
            except (json.JSONDecodeError, KeyError, TypeError):  # died mid-write
                return None
        elif not worker.alive():
            return None


def describe_exit(code: int | None) -> str:
    """``-11`` -> ``worker killed by signal SIGSEGV (11)``."""
    if code is None:
        return "worker vanished (exit status unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker killed by signal {name} ({-code})"
    return f"worker exited with status {code} before giving a verdict"


def _placeholder(
    case_id: str, backend: str, status: Status, reason: str, detail: str = "", elapsed: float | None = None
) -> Result:
    """A result for a case whose worker gave none, with what the parent knows of the case."""
    from conformance.run.engine import repro_command

    result = Result(case_id, backend, status, without_escapes(reason))
    try:
        case = _case(case_id)
        result.seed, result.kind, result.family = case.seed, case.kind, case.family
        result.repro = repro_command(case, backend)
    except Exception:  # an unknown case id still gets its verdict line
        pass
    if elapsed is not None:
        result.timing["isolated_wall_s"] = elapsed
    if detail:
        result.notes.append(without_escapes(detail))
    return result


_DEFAULT_POOL: WorkerPool | None = None


def run_environment(parallel_pairs: bool) -> None:
    """Settings a run's processes share, set before any worker is spawned (workers inherit them).

    Where pairs run in parallel (pytest-xdist's ``-n``), inductor compiles in its worker's own
    thread: a pool of compile subprocesses per worker would oversubscribe the cores ``-n`` already
    shares out.  A single worker keeps inductor's parallel compile, as a user's script would.
    Inductor's cache goes outside the temporary directory (:func:`caches_outside_tmp`)."""
    caches_outside_tmp()
    if parallel_pairs:
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def prestart(warm: list[str]) -> None:
    """Spawn the shared worker now, so its start-up overlaps the run's own: the compilers, and the ``warm``
    backends' first-use costs (every usable backend when empty).

    Called first thing in a command (:mod:`conformance.cli.launch`): this process imports torch and the
    engine, which it needs anyway, and forks the fork server from itself, so the run pays for that import
    once instead of twice (half the CPU time of a small run's start-up on a two-core machine)."""
    global _DEFAULT_POOL
    if _DEFAULT_POOL is None:
        here = _fork_server_wanted() and threading.active_count() == 1 and reaper.become_subreaper()
        if here:
            imports_for_workers()
        _DEFAULT_POOL = WorkerPool(warm=warm, server_here=here)
    _DEFAULT_POOL.spawn()


def startup_wait_s() -> float:
    """Seconds this process waited for its shared worker to start."""
    return _DEFAULT_POOL.startup_wait_s if _DEFAULT_POOL is not None else 0.0


def run_isolated(case_id: str, backend_name_or_spec: str, timeout_s: float,
                 options: RunOptions | None = None) -> Result:
    """Run one case in the module's shared worker pool (reused across calls)."""
    global _DEFAULT_POOL
    if _DEFAULT_POOL is None:
        _DEFAULT_POOL = WorkerPool()
    return _DEFAULT_POOL.run(case_id, backend_name_or_spec, timeout_s, options)


def run_case_isolated(case: Case, backend_name_or_spec: str, timeout_s: float,
                      options: RunOptions | None = None) -> Result:
    """Run ``case`` in the shared worker; a generated case travels as its program (a shrunk candidate
    has no id the worker could resolve)."""
    program = {"program": case.program.to_json(), "seed": case.seed} if case.program is not None else None
    global _DEFAULT_POOL
    if _DEFAULT_POOL is None:
        _DEFAULT_POOL = WorkerPool()
    result = _DEFAULT_POOL.run(case.id, backend_name_or_spec, timeout_s, options, program)
    result.kind, result.family, result.seed = case.kind, case.family, case.seed  # also for crash and timeout
    return result


def kill_now() -> None:
    """SIGKILL every process below this one (the shared worker, the fork server, what a backend started):
    a second Ctrl-C.  Nothing is waited for: they are this process's children, and it is about to exit."""
    for pid in reaper.descendants():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def shutdown(kill: bool = False) -> None:
    """Stop the shared worker: gracefully, or at once (``kill``) when the run was interrupted."""
    global _DEFAULT_POOL
    if _DEFAULT_POOL is not None:
        _DEFAULT_POOL.close(kill=kill)
        _DEFAULT_POOL = None


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--worker" and (len(sys.argv) == 4 or sys.argv[4] == "--warm"):
        worker_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[5:] if len(sys.argv) > 4 else None)
    elif len(sys.argv) >= 4 and sys.argv[1] == "--fork-server" and (len(sys.argv) == 4 or sys.argv[4] == "--preload"):
        fork_server_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[5:] if len(sys.argv) > 4 else None)
    else:
        sys.exit("usage: python -m conformance.run.isolation --worker REPLY_FD PARENT_PID (started by WorkerPool)")
