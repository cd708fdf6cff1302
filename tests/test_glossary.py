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
    return {name for line in lines for name in re.findall(r'"([a-z]+(?:[- ][a-z]+)+)"', line)}


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


def test_the_usage_docs_explain_every_name() -> None:
    readme = (ROOT / "docs" / "usage.md").read_text()  # README's "How memory is judged", moved there
    for name in [*MODELS, *DOMAINS]:
        assert re.search(rf"^\| `{re.escape(name)}` \| (model|domain): ", readme, re.M), name
    assert explain("no-such-name") == ""


def test_the_report_explains_the_model_and_domain_where_it_shows_them(tmp_path: Path) -> None:
    """A pair panel's "model of" and "domain" rows carry their one line (real records of a real run)."""
    from conformance.api.case import select_cases
    from conformance.backends.eager import EagerBackend
    from conformance.output.report import build_report
    from conformance.run.engine import run_case

    (case,) = select_cases(["mlp-s-infer"])
    result = run_case(case, EagerBackend())
    results = tmp_path / "results"
    results.mkdir()
    (results / "results.jsonl").write_text(__import__("json").dumps(result.to_json()) + "\n")
    page = build_report([results], tmp_path / "site").read_text()
    assert result.memory is not None and result.memory.model_source and result.memory.domain
    from markupsafe import escape

    assert f": {escape(explain(result.memory.model_source))}" in page
    assert f": {escape(explain(result.memory.domain))}" in page
