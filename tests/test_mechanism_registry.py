"""The mechanisms' registry: one registration per mechanism, the docs derived from it, the label grammar.

Each mechanism's module registers its recogniser, bound formula and docs line once
(:mod:`conformance.checks.mechanisms.registry`); the manifests' names, the recognisers' order and
``docs/design.md``'s two mechanism tables all come from there.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import conformance.checks.mechanisms as mechanisms
from conformance.checks import manifest
from conformance.checks.facts import parse_event
from conformance.checks.mechanisms import registry

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


def _indented(table: str) -> str:
    return "\n".join("  " + line for line in table.splitlines())


def test_design_tables_are_the_registry() -> None:
    """docs/design.md's recognised-when and bound tables are the registry's, row for row (regenerate them with
    ``registry.docs_table()`` / ``registry.bounds_table()`` after adding a mechanism)."""
    design = DESIGN.read_text()
    assert _indented(registry.docs_table()) in design, registry.docs_table()
    assert _indented(registry.bounds_table()) in design, registry.bounds_table()


def test_every_mechanism_is_in_the_docs_once_and_self_bounded_ones_give_a_formula() -> None:
    first_columns = [row.split(" | ", 1)[0] for row in registry.docs_table().splitlines()[2:]]
    for m in mechanisms.MECHANISMS:
        assert sum(f"`{m.name}`" in column for column in first_columns) == 1, m.name
        if m.bound is not None:  # an entry expecting it gives no bound: the formula says what holds it
            assert m.formula, m.name


def test_manifests_accept_exactly_the_registered_names() -> None:
    assert manifest.MECHANISMS == mechanisms.NAMES == frozenset(m.name for m in mechanisms.MECHANISMS)
    assert manifest.SELF_BOUNDED == frozenset(m.name for m in mechanisms.MECHANISMS if m.bound is not None)


def test_every_family_module_is_imported_by_the_package() -> None:
    """A family module the package does not import registers nothing: its mechanisms would silently vanish."""
    infrastructure = {"registry", "evidence", "events", "program"}
    registered_by = {m.recognise.__module__ for m in mechanisms.MECHANISMS}
    for info in pkgutil.iter_modules(mechanisms.__path__):
        if info.name in infrastructure:
            continue
        module = importlib.import_module(f"conformance.checks.mechanisms.{info.name}")
        assert module.__name__ in registered_by or any(
            getattr(m.recognise, "__module__", "") == module.__name__ for m in mechanisms.MECHANISMS), info.name


def test_a_name_or_precedence_registered_twice_is_refused() -> None:
    first = mechanisms.MECHANISMS[0]
    with pytest.raises(ValueError, match="twice"):
        registry.register(first)
    clash = registry.Mechanism("not-a-mechanism", "", first.recognise, first.precedence, "")
    with pytest.raises(ValueError, match="share precedence"):
        registry.register(clash)
    assert "not-a-mechanism" not in mechanisms.NAMES


def test_the_order_is_by_precedence() -> None:
    precedences = [m.precedence for m in mechanisms.MECHANISMS]
    assert precedences == sorted(precedences) and len(set(precedences)) == len(precedences)
    assert [m.name for m in mechanisms.MECHANISMS][:2] == ["layout-copy", "while-loop-backward-eager"]


@pytest.mark.parametrize(("label", "phase", "place", "trip", "statement"), [
    ("fw:line 163 buf3 = empty_strided_cpu((4, ), (1, ), torch.float32)", "fw", "line 163", None,
     "buf3 = empty_strided_cpu((4, ), (1, ), torch.float32)"),
    ("fw:line 210 [trip 0] should_loop = buf2_cond_result", "fw", "line 210", 0, "should_loop = buf2_cond_result"),
    ("bw:while_loop_body_graph_0#1:160 del buf4", "bw", "while_loop_body_graph_0#1:160", None, "del buf4"),
    ("line 12 return (buf1, )", "", "line 12", None, "return (buf1, )"),
])
def test_event_labels_parse_to_their_statement(label: str, phase: str, place: str, trip: int | None,
                                               statement: str) -> None:
    event = parse_event(label)
    assert event is not None
    assert (event.phase, event.place, event.trip, event.statement) == (phase, place, trip, statement)
    assert event.in_loop == (trip is not None or "while_loop_" in place)


@pytest.mark.parametrize("label", ["fw:add", "fw:while_loop.cond2:lt", "never (outlives the step)", "", None])
def test_graph_events_and_other_labels_are_no_statement(label: object) -> None:
    assert parse_event(label) is None
