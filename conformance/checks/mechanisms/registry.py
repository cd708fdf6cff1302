"""The mechanisms, registered: each one object (:class:`Mechanism`) made in its own module.

A mechanism's module holds its recogniser, its bound's formula and its docs line, and registers them once
(:func:`mechanism`, a decorator on the recogniser, or :func:`register`).  Everything else reads this
registry: :func:`recognise` asks the recognisers by :attr:`Mechanism.precedence`, the manifests accept the
names in :func:`names`, the self-bounded ones need no bound in an entry (:func:`self_bounded`), and
``docs/design.md``'s two mechanism tables are :func:`docs_table` and :func:`bounds_table`, as
``tests/test_mechanism_registry.py`` checks.  Adding a mechanism is one module and its test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from conformance.checks.mechanisms.evidence import Evidence, Recogniser


@dataclass(frozen=True)
class Mechanism:
    name: str
    summary: str
    recognise: Recogniser
    #: its place among the recognisers: lower is asked first (the more specific first)
    precedence: int
    #: when it is recognised, in the words of ``docs/design.md``'s table (markdown); mechanisms with the same
    #: words share one row
    docs: str
    #: its bound's formula in ``docs/design.md``'s bounds table (``None``: not a memory mechanism with one)
    formula: str | None = None
    #: bytes a manifest bound's percentage covers beside the model peak, for a mechanism whose storage
    #: scales with something the model's peak does not hold (``None``: the model peak alone)
    scale: Callable[[Evidence], int] | None = None
    #: the most bytes over the contract one instance can show, read from the pair's evidence (``None``: the
    #: manifest entry gives the bound); an entry expecting such a mechanism needs no bound of its own
    bound: Callable[[Evidence], int | None] | None = None
    #: its recogniser can name, from the program alone, an excess blame left unnamed beside named storages
    #: (``finding`` empty): fusion's buffers made before the graphs' schedule makes them, which are never alive
    #: past a modelled death; a runtime's own verdict (the backward-input watch) is not evidence for such a rest
    names_rest: bool = False
    #: its bound is the whole pair's (the step's values), not each finding's: taken once, however many findings
    bound_per_pair: bool = False


_REGISTERED: dict[str, Mechanism] = {}
_ordered: tuple[Mechanism, ...] | None = None


def register(m: Mechanism) -> Mechanism:
    """Add ``m`` to the registry (a name or a precedence given twice is a mistake in the package)."""
    global _ordered
    if m.name in _REGISTERED:
        raise ValueError(f"mechanism {m.name!r} is registered twice")
    clash = next((o.name for o in _REGISTERED.values() if o.precedence == m.precedence), None)
    if clash is not None:
        raise ValueError(f"mechanisms {clash!r} and {m.name!r} share precedence {m.precedence}")
    _REGISTERED[m.name] = m
    _ordered = None
    return m


def mechanism(name: str, precedence: int, summary: str, docs: str, *, formula: str | None = None,
              scale: Callable[[Evidence], int] | None = None, bound: Callable[[Evidence], int | None] | None = None,
              names_rest: bool = False, bound_per_pair: bool = False) -> Callable[[Recogniser], Recogniser]:
    """Register the decorated recogniser as the mechanism ``name``; the function is returned unchanged."""

    def decorate(recognise: Recogniser) -> Recogniser:
        register(Mechanism(name, summary, recognise, precedence, docs, formula, scale, bound, names_rest,
                           bound_per_pair))
        return recognise

    return decorate


def ordered() -> tuple[Mechanism, ...]:
    """Every registered mechanism, in the order they are asked."""
    global _ordered
    if _ordered is None:
        _ordered = tuple(sorted(_REGISTERED.values(), key=lambda m: m.precedence))
    return _ordered


def names() -> frozenset[str]:
    return frozenset(_REGISTERED)


def self_bounded() -> frozenset[str]:
    """The mechanisms whose evidence bounds each instance (:attr:`Mechanism.bound`): an entry needs no bound."""
    return frozenset(m.name for m in _REGISTERED.values() if m.bound is not None)


def summary(name: str) -> str:
    m = _REGISTERED.get(name)
    return m.summary if m is not None else ""


@dataclass(frozen=True)
class Recognised:
    mechanism: str
    why: str
    scale: int = 0  # bytes its manifest bound's percentage covers beside the model peak (Mechanism.scale)
    bound: int | None = None  # the most bytes over the contract it can show, from the evidence (Mechanism.bound)
    bound_per_pair: bool = False  # that bound is the pair's, not the finding's (Mechanism.bound_per_pair)


def _recognised(m: Mechanism, why: str, ev: Evidence) -> Recognised:
    return Recognised(m.name, why, m.scale(ev) if m.scale is not None else 0,
                      m.bound(ev) if m.bound is not None else None, m.bound_per_pair)


def recognise(ev: Evidence) -> Recognised | None:
    """The first mechanism whose recogniser answers for ``ev`` (``None``: no known mechanism)."""
    for m in ordered():
        why = m.recognise(ev)
        if why:
            return _recognised(m, why, ev)
    return None


def recognise_rest(ev: Evidence) -> Recognised | None:
    """The first mechanism that names an excess blame left unnamed (:attr:`Mechanism.names_rest`), else ``None``."""
    for m in ordered():
        why = m.recognise(ev) if m.names_rest else None
        if why:
            return _recognised(m, why, ev)
    return None


def mechanism_of(part: str) -> str | None:
    """The mechanism a cause part names (``peak: layout-copy`` -> ``layout-copy``), else ``None``."""
    name = part.split(": ", 1)[-1]
    return name if name in _REGISTERED else None


def _rows(column: Callable[[Mechanism], str | None]) -> list[tuple[list[str], str]]:
    """(names, text) per distinct text, in the order of the first mechanism with it."""
    rows: dict[str, list[str]] = {}
    for m in ordered():
        text = column(m)
        if text is not None:
            rows.setdefault(text, []).append(m.name)
    return [(ms, text) for text, ms in rows.items()]


def _table(header: tuple[str, str], column: Callable[[Mechanism], str | None]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {', '.join(f'`{n}`' for n in ms)} | {text} |" for ms, text in _rows(column)]
    return "\n".join(lines)


def docs_table() -> str:
    """``docs/design.md``'s table of when each mechanism is recognised, from the registry."""
    return _table(("mechanism", "recognised when"), lambda m: m.docs)


def bounds_table() -> str:
    """``docs/design.md``'s table of each memory mechanism's bound, from the registry."""
    return _table(("mechanism", "bound (bytes over the contract one instance may show)"), lambda m: m.formula)
