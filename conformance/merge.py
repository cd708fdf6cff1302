"""Combine shard results directories into one that ``conformance report`` reads."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from conformance.result import Result, append_result, read_results


class MergeError(ValueError):
    """Inputs that cannot be merged (missing results, the same pair twice)."""


def merge(inputs: Sequence[Path], out: Path) -> list[Result]:
    seen: dict[tuple[str, str], Path] = {}
    merged: list[Result] = []
    for directory in inputs:
        path = directory / "results.jsonl"
        if not path.exists():
            raise MergeError(f"{directory}: no results.jsonl")
        for r in read_results(path):
            key = (r.case, r.backend)
            if key in seen:
                raise MergeError(f"{r.case}@{r.backend} is in both {seen[key]} and {directory}")
            seen[key] = directory
            merged.append(r)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "results.jsonl"
    target.write_text("", encoding="utf-8")
    for r in merged:
        append_result(target, r)
    _merge_junit([d / "junit.xml" for d in inputs], out / "junit.xml")
    (out / "merged-from.txt").write_text("".join(f"{d}\n" for d in inputs), encoding="utf-8")
    return merged


def _merge_junit(paths: Sequence[Path], target: Path) -> None:
    root = ET.Element("testsuites")
    for p in paths:
        if not p.exists():
            continue
        tree = ET.parse(p).getroot()
        suites = [tree] if tree.tag == "testsuite" else list(tree.iter("testsuite"))
        root.extend(suites)
    ET.ElementTree(root).write(target, encoding="utf-8", xml_declaration=True)
