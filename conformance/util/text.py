"""Short text for people: a reason cut to a length says so, a count agrees with its noun, and text
from cases, backends and manifests reaches a terminal as text, never as control sequences."""

from __future__ import annotations

import re

ELLIPSIS = "…"

#: what a terminal would act on instead of showing: C0 and C1 controls (ESC among them), DEL,
#: Unicode's line and paragraph separators and its bidirectional overrides (text shown reordered)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\r": "\\r", "\n": "\\n"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def printable(text: object, newlines: bool = False) -> str:
    """``text`` as a terminal should show it: every control character escaped (``ESC`` as ``\\x1b``).

    For the terminal boundary only (progress lines, the summary, error lines); results.jsonl keeps
    the raw text.  ``newlines`` keeps line breaks where several lines are meant (a traceback)."""
    text = str(text)
    if not newlines:
        return _CONTROL.sub(_escaped, text)
    return "\n".join(_CONTROL.sub(_escaped, line) for line in text.split("\n"))


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
