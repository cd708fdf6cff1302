"""Every model and domain name a verdict can quote has its one line, in the glossary and in README.

The names are read from where the harness makes them (the engine's model sources, the backends'
declared memory domains, the combined domain), so a new name without its line fails here."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.api.adapter import discover
from conformance.util.glossary import DOMAINS, MODELS, explain

ROOT = Path(__file__).resolve().parents[1]


def _engine_sources() -> set[str]:
    """The quoted names on the engine's lines that set a step's model source."""
    engine = (ROOT / "conformance" / "run" / "engine.py").read_text()
    lines = [line for line in engine.splitlines() if re.search(r"\bsource\b\s*=", line)]
    return {name for line in lines for name in re.findall(r'"([a-z]+(?:-[a-z]+)+)"', line)}


def test_every_model_the_engine_names_is_explained() -> None:
    sources = _engine_sources()
    assert {"user-graph", "received-graphs", "user-kernels"} <= sources, sources
    for name in sources:
        assert explain(name), f"model {name!r} has no line in conformance/util/glossary.py"


def test_every_declared_domain_is_explained() -> None:
    domains = {d for backend in discover().backends.values() for d in backend.capabilities.memory_domains}
    assert {"torch-cpu", "iree-hal"} <= domains, domains
    for name in domains | {"combined"}:
        assert name in DOMAINS, f"domain {name!r} has no line in conformance/util/glossary.py"


def test_readme_explains_every_name() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in [*MODELS, *DOMAINS]:
        assert re.search(rf"^\| `{re.escape(name)}` \| (model|domain): ", readme, re.M), name
    assert explain("no-such-name") == ""
