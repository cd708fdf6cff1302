"""Short text for people: a reason cut to a length says so, a count agrees with its noun, and text
from cases, backends and manifests reaches a terminal as text, never as control sequences."""

from __future__ import annotations

import re
from collections.abc import Iterable

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


def did_you_mean(word: str, choices: Iterable[str], limit: int = 3) -> str:
    """``" (did you mean 'x'?)"`` for the choices closest to a mistyped ``word``, or ``""``.

    A glob is compared by its literal part (``mlp-x-*`` as ``mlp-x-``) against the choices' prefixes
    of the same length, so a typo in a case family still finds the family."""
    import difflib

    choices = list(dict.fromkeys(choices))
    literal = re.split(r"[*?\[]", word, maxsplit=1)[0]
    if literal != word and literal:
        prefixes = {c[: len(literal)]: c for c in choices}
        close = difflib.get_close_matches(literal, list(prefixes), n=limit, cutoff=0.75)
        shown = [p + word[len(literal):] for p in close]
    else:
        shown = difflib.get_close_matches(word, choices, n=limit, cutoff=0.75)
    if not shown:
        return ""
    return " (did you mean " + " or ".join(repr(s) for s in shown) + "?)"
