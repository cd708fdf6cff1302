"""docs/design.md's module map names every module in the tree, under its own subpackage.

A contributor reads the map to find where a concern lives; a module the map does not name is
found only by grepping.  Adding a module without its line in the map fails here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "conformance"


def _map_sections() -> dict[str, set[str]]:
    """The words of the map's block, by the subpackage line they stand under ("" for the top)."""
    design = (ROOT / "docs" / "design.md").read_text()
    block = design.split("## Module map", 1)[1].split("```", 2)[1]
    sections: dict[str, set[str]] = {"": set()}
    current = ""
    for line in block.splitlines()[2:]:  # past the opening line and ``conformance/``
        head = re.match(r"^  (\w+)/", line)
        if head:
            current = head.group(1)
            sections.setdefault(current, set())
        sections[current].update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line))
    return sections


def _modules() -> list[tuple[str, str]]:
    """(subpackage, module name) for every module file; a nested package counts as its own name."""
    found = []
    paths = [Path(d, f) for d, _, files in os.walk(PACKAGE, followlinks=True) for f in files if f.endswith(".py")]
    for path in sorted(paths):  # through the links to backends/ and cases/ at the root
        rel = path.relative_to(PACKAGE).parts
        if rel[-1] == "__init__.py" and len(rel) <= 2:
            continue
        top = rel[0] if len(rel) > 1 else ""
        name = rel[1] if len(rel) > 2 else Path(rel[-1]).stem  # models/lifetime/x.py -> lifetime
        found.append((top, name))
    return sorted(set(found))


def test_the_map_has_every_subpackage() -> None:
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert subpackages <= set(_map_sections()), subpackages - set(_map_sections())


def test_every_module_is_on_the_map_under_its_subpackage() -> None:
    sections = _map_sections()
    missing = [f"{top}/{name}" if top else name for top, name in _modules() if name not in sections.get(top, set())]
    assert not missing, f"docs/design.md's module map does not name: {', '.join(missing)}"
