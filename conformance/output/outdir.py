"""A run's output directory: one run at a time in it, and nothing an earlier run wrote is lost.

* **Lock.** ``DIR/.conformance.lock`` is held (``flock``) for the whole run; a second run on
  the same directory stops with a one-line error.  The kernel drops the lock when its
  holder dies, however it dies, so a killed run never leaves the directory locked; the lock
  file it leaves is taken over by the next run, which says so in one line (its pid).
* **Refuse, unless told.** A directory that already holds anything is refused unless
  the user says what to do with it: ``overwrite`` (replace the run's own files) or
  ``resume`` (keep every verdict there and run only the pairs that lack one).
* **Fresh file, moved into place.** Verdicts are appended, each flushed, to
  ``results.jsonl.partial`` (and junit to ``junit.xml.partial``); when the run ends --
  finished, failed or interrupted -- with at least one new verdict, they are moved over
  ``results.jsonl`` and ``junit.xml`` in one ``rename`` each.  A run that makes no
  verdict (bad input, nothing selected) leaves the directory as it found it; one killed
  outright leaves its finished verdicts in the ``.partial`` file, which ``resume`` reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from conformance.util.paths import EXISTING_MODES, symlink_loop
from conformance.util.writes import DiskFull, write_bytes_whole, write_whole

if TYPE_CHECKING:  # the results schema (jsonschema) loads only where results are read: refusals answer at once
    from conformance.api.result import Result

RESULTS = "results.jsonl"
JUNIT = "junit.xml"
PARTIAL = ".partial"
LOCK = ".conformance.lock"
MODES = EXISTING_MODES


class OutDirError(ValueError):
    """The output directory cannot be used; the message is one line naming it."""


@dataclass
class RunDir:
    """A claimed (locked) output directory and the files this run stages in it."""

    path: Path
    mode: str
    lock_fd: int
    created: bool = False  # this run made the directory: removed again if it ends with nothing in it
    kept: list[Result] = field(default_factory=list)  # resume: verdicts already there
    kept_from_partial: bool = False  # some came from a killed run's .partial: publishing keeps them
    warnings: list[str] = field(default_factory=list)
    staging: bool = False  # this run has started its own staged files (a killed run's are not ours)
    published: bool = False
    appended: int = 0  # verdicts this run appended to its staged results
    #: lines of the files read on resume that are no record this release reads: kept, byte for byte
    foreign_raw: set[bytes] = field(default_factory=set)

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    @property
    def junit(self) -> Path:
        return self.path / JUNIT

    @property
    def staged_results(self) -> Path:
        return self.path / (RESULTS + PARTIAL)

    @property
    def staged_junit(self) -> Path:
        return self.path / (JUNIT + PARTIAL)

    def done(self) -> set[str]:
        """``case@backend`` of every verdict kept from before (resume)."""
        return {f"{r.case}@{r.backend}" for r in self.kept}

    def append(self, result: Result) -> None:
        """One verdict onto the staged results, whole or not at all (``DiskFull``: the file as it was)."""
        from conformance.api.result import append_result

        append_result(self.staged_results, result)
        self.appended += 1

    def publish(self, new_verdicts: int) -> bool:
        """Move the staged files into place when they hold anything new; otherwise drop them.  A junit file
        that cannot be completed (a full disk) is left out rather than published torn: :class:`DiskFull`."""
        if new_verdicts == 0 and not self.kept_from_partial:
            self._discard_staged()
            return False
        full: DiskFull | None = None
        if self.staged_junit.exists():
            try:
                name_junit_classes(self.staged_junit, self.staged_results)
                if self.mode == "resume" and self.junit.is_file():
                    write_whole(self.staged_junit,
                                lambda staged: _combine_junit([self.junit, self.staged_junit], staged))
                os.replace(self.staged_junit, self.junit)
            except DiskFull as exc:
                self.staged_junit.unlink(missing_ok=True)
                full = exc
        os.replace(self.staged_results, self.results)
        self.published = True
        if full is not None:
            raise full
        return True

    def end_now(self) -> None:
        """A second Ctrl-C: what :meth:`publish` and :meth:`release` do, in a few system calls and without
        rewriting junit (the staged junit, maybe half-written, is dropped)."""
        with contextlib.suppress(OSError):
            if not self.published and self.staging and (self.appended or self.kept_from_partial):
                os.replace(self.staged_results, self.results)
                self.published = True
        with contextlib.suppress(OSError):
            if self.staging:
                self.staged_junit.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.release()

    def release(self) -> None:
        """Drop the lock (idempotent); staged files not published by now are removed."""
        if self.lock_fd < 0:
            return
        if not self.published:
            self._discard_staged()
        _CLAIMS.pop(self.path.resolve(), None)
        (self.path / LOCK).unlink(missing_ok=True)
        os.close(self.lock_fd)
        self.lock_fd = -1
        if self.created and not self.published:
            with contextlib.suppress(OSError):  # not empty: a backend or plugin wrote there; keep it
                self.path.rmdir()

    def _discard_staged(self) -> None:
        if not self.staging:  # a refused run must not delete what a killed run left for --resume
            return
        self.staged_results.unlink(missing_ok=True)
        self.staged_junit.unlink(missing_ok=True)


_CLAIMS: dict[Path, RunDir] = {}


def held(path: Path) -> RunDir | None:
    """This process's claim on ``path``, if it holds one (the CLI claims before pytest starts)."""
    return _CLAIMS.get(path.resolve())


def check_target(path: Path, what: str = "--out") -> None:
    """Fail with one line if ``path`` cannot become a directory we write in (before any work starts)."""
    if str(path) == "":
        raise OutDirError(f"{what}: an empty path is not a directory")
    try:
        _check_target(path, what)
    except OSError as exc:  # a name too long, a symlink loop...
        raise OutDirError(f"{what} {path}: {exc.strerror}") from None


def _check_target(path: Path, what: str) -> None:
    loop = symlink_loop(path)
    if loop is not None:
        raise OutDirError(f"{what} {path}: {loop} is a symlink loop")
    if path.exists() and not path.is_dir():
        raise OutDirError(f"{what} {path}: exists and is not a directory")
    existing = next((p for p in [path, *path.parents] if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise OutDirError(f"{what} {path}: {existing} is a file, not a directory")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise OutDirError(f"{what} {path}: {existing} is not writable")


def claim(path: Path, mode: str = "refuse") -> RunDir:
    """Create and lock ``path`` for one run; raises :class:`OutDirError` (one line) when it cannot be used."""
    if mode not in MODES:
        raise OutDirError(f"unknown output mode {mode!r}")
    check_target(path)  # first: a symlink loop cannot even be resolved to look the claim up
    already = held(path)
    if already is not None:
        return already
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutDirError(f"--out {path}: cannot create: {exc.strerror}") from None
    stale = _stale_holder(path / LOCK)
    try:
        lock_fd = _lock(path)
    except OutDirError:
        if created:
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    run_dir = RunDir(path, mode, lock_fd, created=created)
    said = f"removed a stale {LOCK} left in {path} by pid {stale} (a run killed outright)"
    if stale is not None:  # said, not fatal: the kernel dropped its lock when that run died
        run_dir.warnings.append(said)
    try:
        _prepare(run_dir)
    except OutDirError as exc:  # refused: still one line, which says what happened to the lock too
        run_dir.release()
        raise OutDirError(f"{exc} ({said})" if stale is not None else str(exc)) from None
    except BaseException:
        run_dir.release()
        raise
    _CLAIMS[path.resolve()] = run_dir
    return run_dir


@contextlib.contextmanager
def locked(path: Path, what: str = "-o") -> Iterator[None]:
    """Hold ``path``'s lock (the one a run holds) while a command writes there: ``merge`` and ``report``.

    The directory must exist.  Refused with one line (:class:`OutDirError`) while anyone else holds it,
    or, for a directory inside another one (a report's site under a run's results), while anyone else
    holds the enclosing directory's lock.  A lock this process already holds (a run building its own
    report) is not taken again."""
    if held(path) is not None:
        yield
        return
    parent = path.resolve().parent
    if held(parent) is None and (parent / LOCK).exists():
        _probe(parent, what, path)
    fd = _lock(path, what)
    try:
        yield
    finally:
        (path / LOCK).unlink(missing_ok=True)
        os.close(fd)


def _probe(directory: Path, what: str, inside: Path) -> None:
    """Refuse when someone holds ``directory``'s lock; take it for no longer than the test."""
    try:
        fd = os.open(directory / LOCK, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(directory / LOCK)
        raise OutDirError(f"{what} {inside}: a conformance run (pid {holder}) is writing in {directory}; "
                          f"wait for it or choose another directory") from None
    finally:
        os.close(fd)


def _stale_holder(lock: Path) -> str | None:
    """The pid written in a lock file nobody holds (a run killed outright leaves it), or ``None``."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return None  # held: a live run's, refused by _lock in a moment
    else:
        return _read_pid(fd)
    finally:
        os.close(fd)


def _read_pid(fd: int) -> str | None:
    """A lock holder's pid as written in the lock file (``None`` for none: empty, or not a pid)."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return text if text.isdigit() and int(text) != os.getpid() else None


def _holder(lock: Path) -> str:
    try:
        return lock.read_text(errors="replace").strip() or "?"
    except OSError:
        return "?"


def _lock(path: Path, what: str = "--out") -> int:
    """An exclusive lock on ``path/LOCK``; the file exists exactly while a run (or a merge, a report) holds it."""
    lock = path / LOCK
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OutDirError(f"{what} {path}: cannot create a lock file: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            who = "another run" if what == "--out" else "a conformance command"
            raise OutDirError(f"{what} {path}: {who} (pid {holder}) is writing there; "
                              f"wait for it or choose another directory") from None
        if _same_file(fd, lock):  # not unlinked by a finishing holder between our open and flock
            try:
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
            except OSError as exc:  # a full disk: no lock file left behind either
                lock.unlink(missing_ok=True)
                os.close(fd)
                raise OutDirError(f"{what} {path}: cannot write a lock file: {exc.strerror}") from None
            return fd
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def check_unused(path: Path, mode: str) -> None:
    """Fail with one line if a run in ``mode`` may not use ``path`` as it stands (a folder that holds an
    earlier run's files, unless told what to do with them): the refusal :func:`claim` makes, said without
    claiming, so a command can say it before it loads anything."""
    for name in (RESULTS, JUNIT, RESULTS + PARTIAL, JUNIT + PARTIAL):
        if (path / name).is_dir():
            raise OutDirError(f"--out {path}: {path / name} is a directory; remove it or choose another --out")
    contents = sorted(p.name for p in path.iterdir() if p.name != LOCK) if path.is_dir() else []
    if contents and mode == "refuse":
        raise OutDirError(_refusal(path, contents))


def _prepare(run_dir: RunDir) -> None:
    """Apply the mode to what the directory holds, then start a fresh staged results file."""
    check_unused(run_dir.path, run_dir.mode)
    kept_lines = _resume(run_dir) if run_dir.mode == "resume" else []
    try:  # beside it first: a killed run's .partial, read above, stays whole until this one is
        write_bytes_whole(run_dir.staged_results, b"".join(line + b"\n" for line in kept_lines))
        run_dir.staging = True
    except OSError as exc:
        raise OutDirError(f"--out {run_dir.path}: cannot write {run_dir.staged_results.name}: {exc.strerror}") from None


def _refusal(path: Path, contents: list[str]) -> str:
    if RESULTS in contents or RESULTS + PARTIAL in contents:
        return (f"--out {path} already holds results; to keep them, give this run its own "
                f"directory (--out {_sibling(path)}); --overwrite replaces them, --resume runs only "
                f"the pairs they lack")
    shown = ", ".join(contents[:3]) + (", ..." if len(contents) > 3 else "")
    return f"--out {path} is not empty ({shown}); choose a new directory or pass --overwrite"


def _sibling(path: Path) -> str:
    """A directory beside ``path`` that does not exist yet, to suggest for a run of its own."""
    for n in range(2, 1000):
        candidate = path.with_name(f"{path.name}-{n}")
        if not candidate.exists():
            return str(candidate)
    return f"{path}-new"


def _resume(run_dir: RunDir) -> list[bytes]:
    """Keep the verdicts in ``results.jsonl`` and a killed run's leftover ``.partial`` (first seen wins).

    Their lines are kept byte for byte, in their order; so is every whole line that is no record this
    release reads (a newer ``schema_version``, another tool's): set apart, never deleted, and named in a
    warning that says where it is kept.  Only a truncated last line (a killed writer's) is left out.
    """
    from conformance.output.records import RecordsError, read_records

    seen: set[tuple[str, str]] = set()
    lines: list[bytes] = []
    for source in (run_dir.results, run_dir.staged_results):
        if not source.exists():
            continue
        try:
            loaded = read_records(source)
        except RecordsError as exc:
            raise OutDirError(f"--resume: {exc}") from None
        run_dir.warnings.extend(loaded.warnings(kept_in=run_dir.results))
        earlier = set(run_dir.foreign_raw)  # a killed resume's .partial repeats results.jsonl's foreign lines
        ordered: list[tuple[int, bytes, Result | None]] = [
            *zip(loaded.line_numbers, loaded.lines, loaded.results),
            *((f.line, f.raw, None) for f in loaded.foreign)]
        for _, line, result in sorted(ordered, key=lambda entry: entry[0]):
            if result is None:
                if line not in earlier:
                    run_dir.foreign_raw.add(line)
                    lines.append(line)
                    run_dir.kept_from_partial |= source == run_dir.staged_results
                continue
            if (result.case, result.backend) in seen:
                continue
            seen.add((result.case, result.backend))
            run_dir.kept.append(result)
            lines.append(line)
            run_dir.kept_from_partial |= source == run_dir.staged_results
    return lines


def _combine_junit(paths: list[Path], target: Path) -> None:
    """One ``<testsuites>`` holding the suites of every readable junit file (resume keeps the old ones)."""
    root = ET.Element("testsuites")
    for p in paths:
        try:
            tree = ET.parse(p).getroot()
        except (ET.ParseError, OSError):
            continue  # an unreadable old junit is not worth losing this run's
        root.extend([tree] if tree.tag == "testsuite" else list(tree.iter("testsuite")))
    ET.ElementTree(root).write(target, encoding="utf-8", xml_declaration=True)


#: The junit testcase pytest writes for a pair: ``test_conformance[case@backend]``.
_PAIR_TEST = re.compile(r"test_conformance\[(?P<case>.+)@(?P<backend>[^@\]]+)\]")


def junit_classname(backend: str, family: str = "") -> str:
    """A pair's junit ``classname``: ``conformance.<backend>.<family>`` (CI groups tests by it)."""
    return ".".join(part for part in ("conformance", backend, family) if part)


def name_junit_classes(junit: Path, results: Path) -> None:
    """Give each pair's testcase in ``junit`` its backend and family as ``classname``.

    pytest names the class after the test module's path under the rootdir, and the suite
    module lies outside the run's directory, so it leaves ``classname`` empty.  The family
    comes from the pair's verdict in ``results``; a pair without one is named by backend only.
    The junit is written once, by the controller, also under pytest-xdist, so this sees
    every pair.  An unreadable junit is left as it is.
    """
    try:
        tree = ET.parse(junit)
    except (ET.ParseError, OSError):
        return
    from conformance.output.records import RecordsError, read_records

    families: dict[tuple[str, str], str] = {}
    with contextlib.suppress(RecordsError, OSError):
        families = {(r.case, r.backend): r.family for r in read_records(results).results}
    changed = False
    for testcase in tree.getroot().iter("testcase"):
        m = _PAIR_TEST.fullmatch(testcase.get("name", ""))
        if m is None:
            continue
        classname = junit_classname(m["backend"], families.get((m["case"], m["backend"]), ""))
        if testcase.get("classname") != classname:
            testcase.set("classname", classname)
            changed = True
    if changed:
        write_whole(junit, lambda staged: tree.write(staged, encoding="utf-8", xml_declaration=True))
