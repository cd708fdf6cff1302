"""Short text for people: a reason cut to a length says so, and a count agrees with its noun."""

from __future__ import annotations

ELLIPSIS = "…"


def clip(text: str, n: int) -> str:
    """``text`` if it has at most ``n`` characters, else its first ones and an ellipsis, ``n`` in all.

    A cut reason must not read as a whole one: the ellipsis says something was left off.
    """
    if n < 1:
        raise ValueError(f"clip to {n} characters: at least 1 is needed for the ellipsis")
    if len(text) <= n:
        return text
    return text[: n - 1].rstrip() + ELLIPSIS


def clip_start(text: str, n: int) -> str:
    """``text``'s last ``n`` characters, the first of them an ellipsis when the start was cut (a traceback's tail)."""
    if n < 1:
        raise ValueError(f"clip to {n} characters: at least 1 is needed for the ellipsis")
    if len(text) <= n:
        return text
    return ELLIPSIS + text[len(text) - n + 1:].lstrip()


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``"1 pair"``, ``"2 pairs"``, ``"0 pairs"``; ``nouns`` where adding an "s" is wrong."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
