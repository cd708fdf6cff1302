"""No process outlives its pair: what a pair's backend started is found and ended when the pair ends.

On Linux a process that calls ``prctl(PR_SET_CHILD_SUBREAPER)`` becomes the parent of every orphan
among its descendants, instead of init: a child the adapter started in a new session, or a
daemon that double-forked, stays in the subreaper's tree, where ``/proc`` shows it.  So

* the isolation worker (and, under ``--no-isolate``, the run's own process) is a subreaper, and
  after each pair kills every descendant that was not there before the pair (:func:`sweep`);
* the process that owns the worker is a subreaper too: when a worker dies mid-pair, its
  orphans come to it, and it kills every descendant it did not have before the worker started.

Inductor's own compile worker pool (started by the first compile, reused by every later one) is
torch's, not the pair's, and is left running.  Elsewhere than Linux, nothing is swept.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
#: processes of torch's own that outlive a pair on purpose (inductor's compile worker pool)
TORCH_OWN = ("torch/_inductor/compile_worker",)
_SUBREAPER = False


def supported() -> bool:
    return sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def become_subreaper() -> bool:
    """Make this process the parent of its descendants' orphans (once); False where that is not possible."""
    global _SUBREAPER
    if _SUBREAPER or not supported():
        return _SUBREAPER
    libc = ctypes.CDLL(None, use_errno=True)
    _SUBREAPER = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _SUBREAPER


def _parents() -> dict[int, int]:
    """pid -> ppid of every process (zombies aside: they are gone but for their exit status)."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # after the command name, which may hold anything
        if fields and fields[0] != b"Z":
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(root: int | None = None) -> set[int]:
    """Every live process below ``root`` (this process by default)."""
    if not supported():
        return set()
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def _torch_own(pids: set[int]) -> set[int]:
    """The processes among ``pids`` that are torch's compile workers, with everything below them."""
    own = {p for p in pids if any(mark in _cmdline(p) for mark in TORCH_OWN)}
    return own | {d for p in own for d in descendants(p)}


def sweep(before: set[int], root: int | None = None) -> list[str]:
    """Kill every descendant of ``root`` that is not in ``before`` (torch's compile workers aside) and reap
    those that are this process's children; returns each one killed, described (``pid 12 (sleep 300)``)."""
    if not supported():
        return []
    root = os.getpid() if root is None else root
    killed: dict[int, str] = {}
    for _ in range(5):  # a process may start another while we look: look again until none is left
        left = descendants(root) - before
        left -= _torch_own(left)
        left -= set(killed)
        if not left:
            break
        for pid in sorted(left):
            killed[pid] = _cmdline(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _reap(set(killed))
    return [f"pid {pid} ({_clip(cmd)})" for pid, cmd in sorted(killed.items())]


def kill(pids: set[int]) -> list[str]:
    """Kill ``pids`` (a dying worker's tree, found while it was alive) and reap those that are ours."""
    described = {pid: _cmdline(pid) for pid in pids - _torch_own(pids)}  # torch's pool ends unnamed
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    _reap(set(pids))
    return [f"pid {pid} ({_clip(cmd)})" for pid, cmd in sorted(described.items())]


def _reap(pids: set[int], wait_s: float = 2.0) -> None:
    """Collect the exit status of those of ``pids`` that are our children (orphans we adopted included)."""
    deadline = time.monotonic() + wait_s
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child: its own parent reaps it
                pending.discard(pid)
                continue
            if done:
                pending.discard(pid)
        if pending:
            time.sleep(0.01)


def note(killed: list[str]) -> str | None:
    if not killed:
        return None
    return f"left processes running after the pair: {', '.join(killed)}; killed"


def _clip(text: str, chars: int = 80) -> str:
    return text if len(text) <= chars else text[: chars - 3] + "..."
