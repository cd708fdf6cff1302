"""Writes that a full disk cannot tear: a line is appended whole or not at all, a file is replaced whole.

A full disk (``ENOSPC``), a quota (``EDQUOT``) or a file-size limit (``EFBIG``: ``ulimit -f``, with
``SIGXFSZ`` ignored, as the command does) can stop a write part way.  A reader of ``results.jsonl``
would take the part written for data, or, for a last line, a killed run's.  So an appended line
that does not fit is cut off again (the file truncated back to its size before), and a whole file
is written beside its target and moved over it only once complete (the partial copy removed).
Either way the error is raised as :class:`DiskFull` (an ``OSError``) naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path

#: the errors that mean "no room": a full disk, a quota, a file-size limit
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class DiskFull(OSError):
    """No room to write ``filename`` (a full disk, a quota or a file-size limit); nothing half-written was left."""


def no_room(exc: BaseException) -> bool:
    """Whether ``exc`` says there is no room to write (see :data:`NO_ROOM`)."""
    return isinstance(exc, OSError) and exc.errno in NO_ROOM


def _disk_full(exc: OSError, path: Path) -> DiskFull:
    what = "a file-size limit (ulimit -f) stopped the write" if exc.errno == errno.EFBIG else \
        "no space left on the device"
    return DiskFull(exc.errno, what, str(path))


def append_line(path: Path, line: bytes) -> None:
    """Append ``line`` (one record, ending in a newline) whole, or leave ``path`` as it was and raise
    :class:`DiskFull` (any other ``OSError`` as it is)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        before = os.fstat(fd).st_size
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]  # a short write: the rest fails, or fits next time
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)  # the part that fitted is no record: cut it off again
            if no_room(exc):
                raise _disk_full(exc, path) from None
            raise
    finally:
        os.close(fd)


def write_whole(target: Path, write: Callable[[Path], object]) -> None:
    """Write ``target`` through ``write(staged)`` into a file beside it, then move that over it in one
    ``rename``; on any failure the staged file is removed and ``target`` is left as it was."""
    staged = target.with_name(f".{target.name}.{os.getpid()}.writing")
    try:
        write(staged)
        os.replace(staged, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            staged.unlink()
        if no_room(exc) and not isinstance(exc, DiskFull):
            raise _disk_full(exc, target) from None  # type: ignore[arg-type]
        raise


def write_bytes_whole(target: Path, data: bytes) -> None:
    """:func:`write_whole` of ``data``."""
    write_whole(target, lambda staged: staged.write_bytes(data))
