"""Combine shard results directories into one that ``conformance report`` reads.

Everything is read and checked before anything is written: records against the
results schema (bad lines are named and skipped, the good ones kept), junit files as
XML.  Each output file is then written fresh and moved into place, so a merge that
fails leaves ``-o`` exactly as it was, and one that refuses never starts writing.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path

from conformance.api.result import Result, append_result
from conformance.output.outdir import JUNIT, RESULTS, check_target, locked
from conformance.output.records import RecordsError, read_usable

MERGED_FROM = "merged-from.txt"


class MergeError(ValueError):
    """Inputs that cannot be merged (missing results, the same pair twice, bad junit); one line."""


def merge(inputs: Sequence[Path], out: Path, overwrite: bool = False,
          warn: Callable[[str], None] | None = None) -> list[Result]:
    """Merge ``inputs`` into ``out``; bad record lines go to ``warn`` and are left out."""
    _check_output(inputs, out, overwrite)
    foreign: list[bytes] = []
    merged = _merged_results(inputs, warn or (lambda line: None), foreign, out / RESULTS)
    suites = _junit_suites([d / JUNIT for d in inputs])
    out.mkdir(parents=True, exist_ok=True)
    with locked(out, "-o"):  # a run writing there (or another merge) refuses this one
        _check_output(inputs, out, overwrite)  # again, now that no one else can write there
        _write_results(out / RESULTS, merged, foreign)
        _write_atomically(out / JUNIT, lambda staged: _write_junit(suites, staged))
        _write_atomically(out / MERGED_FROM, lambda staged: _write_sources(inputs, staged))
    return merged


def _check_output(inputs: Sequence[Path], out: Path, overwrite: bool) -> None:
    check_target(out, "-o")
    if any(out.resolve() == d.resolve() for d in inputs):
        raise MergeError(f"-o {out} is one of the inputs; merge into a new directory")
    if not overwrite and any((out / name).exists() for name in (RESULTS, JUNIT, MERGED_FROM)):
        raise MergeError(f"-o {out} already holds results; pass --overwrite to replace them")


def _merged_results(inputs: Sequence[Path], warn: Callable[[str], None], foreign: list[bytes],
                    target: Path) -> list[Result]:
    """Every input's records (a pair in two inputs is refused); the lines no record this release reads go to
    ``foreign``, to be kept as they are in ``target``."""
    seen: dict[tuple[str, str], Path] = {}
    merged: list[Result] = []
    for directory in inputs:
        if not directory.is_dir():
            raise MergeError(f"{directory}: not a results directory" + ("" if directory.exists() else " (not found)"))
        try:
            loaded = read_usable(directory / RESULTS)
        except RecordsError as exc:
            raise MergeError(str(exc)) from None
        for line in loaded.warnings(kept_in=target):
            warn(line)
        foreign.extend(f.raw for f in loaded.foreign)
        for r in loaded.results:
            key = (r.case, r.backend)
            if key in seen:
                raise MergeError(f"{r.case}@{r.backend} is in both {seen[key]} and {directory}")
            seen[key] = directory
            merged.append(r)
    return merged


def _junit_suites(paths: Sequence[Path]) -> list[ET.Element]:
    """Every ``<testsuite>`` of the junit files that exist; a malformed one is an error naming it."""
    suites: list[ET.Element] = []
    for p in paths:
        if not p.exists():
            continue
        try:
            root = ET.parse(p).getroot()
        except ET.ParseError as exc:
            raise MergeError(f"{p}: not valid junit XML ({exc})") from None
        except OSError as exc:
            raise MergeError(f"{p}: cannot read: {exc.strerror}") from None
        if root.tag not in ("testsuite", "testsuites"):
            raise MergeError(f"{p}: not junit XML (root element <{root.tag}>, expected <testsuites> or <testsuite>)")
        suites.extend([root] if root.tag == "testsuite" else list(root.iter("testsuite")))
    return suites


def _write_results(target: Path, results: Sequence[Result], foreign: Sequence[bytes] = ()) -> None:
    def write(staged: Path) -> None:
        staged.write_text("", encoding="utf-8")
        for r in results:
            append_result(staged, r)
        with staged.open("ab") as fh:  # lines no record this release reads: kept as they are, after the records
            fh.write(b"".join(line + b"\n" for line in foreign))

    _write_atomically(target, write)


def _write_junit(suites: Sequence[ET.Element], target: Path) -> None:
    root = ET.Element("testsuites")
    root.extend(suites)
    ET.ElementTree(root).write(target, encoding="utf-8", xml_declaration=True)


def _write_sources(inputs: Sequence[Path], target: Path) -> None:
    target.write_text("".join(f"{d}\n" for d in inputs), encoding="utf-8")


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Write through ``write`` into a fresh file beside ``target``, then move it into place."""
    staged = target.with_name(target.name + ".partial")
    try:
        write(staged)
        os.replace(staged, target)
    except OSError as exc:
        staged.unlink(missing_ok=True)
        raise MergeError(f"{target}: cannot write: {exc.strerror}") from None
