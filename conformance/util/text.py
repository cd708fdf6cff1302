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


#: a terminal's escape sequences (ECMA-48): CSI (colours, ``ESC [ 1 ; 31 m``), OSC (a title or a link, ended by BEL or
#: ``ESC \\``) and the short ones (``ESC ( B``, ``ESC 7``): what a compiler colours its diagnostics with
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]*[0-~])|\x9b[0-?]*[ -/]*[@-~]")


def without_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (a vendor's coloured message read as its words): a reason made
    of them is the message, not its colours, and is not cut short by bytes that show nothing."""
    return _ESCAPES.sub("", text)


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


_CARETS = re.compile(r"^[ \t]*[\^~]+[ \t]*\n", re.MULTILINE)
_FRAME_FILE = re.compile(r'^(\s*File ")([^"]+)(")', re.MULTILINE)


def short_paths(text: str, roots: Iterable[str]) -> str:
    """``text`` with each traceback frame's file named from the longest of ``roots`` it lies under.

    ``/home/ci/venv/lib/python3.11/site-packages/torch/fx/proxy.py`` reads ``torch/fx/proxy.py``:
    the same on every machine, and a clipped traceback keeps more frames."""
    ordered = sorted({r.rstrip("/") + "/" for r in roots if r}, key=len, reverse=True)

    def shorter(match: re.Match[str]) -> str:
        path = match.group(2)
        for root in ordered:
            if path.startswith(root):
                return match.group(1) + path[len(root):] + match.group(3)
        return match.group(0)

    return _FRAME_FILE.sub(shorter, text)


def traceback_tail(text: str, n: int, roots: Iterable[str] = ()) -> str:
    """A traceback's last ``n`` characters at most, paths shortened by ``roots``, cut between lines.

    The end is where the error is; a cut never splits a frame's line, and an ellipsis line says
    frames were left off."""
    text = _CARETS.sub("", short_paths(text, roots))  # the column markers: frames are worth more
    if len(text) <= n:
        return text
    lines = text.split("\n")
    kept: list[str] = []
    size = len(ELLIPSIS) + 1
    for line in reversed(lines):
        if size + len(line) + 1 > n:
            break
        kept.append(line)
        size += len(line) + 1
    if not kept:  # one line longer than n: its own end
        return clip_start(text, n)
    return ELLIPSIS + "\n" + "\n".join(reversed(kept))


def code_roots() -> list[str]:
    """Where this process's code lies: the import path and the directory above ``conformance``."""
    import os
    import sys
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return [here, *(os.path.abspath(p) for p in sys.path if p)]


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``"1 pair"``, ``"2 pairs"``, ``"0 pairs"``; ``nouns`` where adding an "s" is wrong."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def did_you_mean(word: str, choices: Iterable[str], limit: int = 3) -> str:
    """``" (did you mean 'x'?)"`` for the choices closest to a mistyped ``word``, or ``""``; never ``word`` itself.

    A glob (``mlp-*-infr``) gets globs back: the same pattern, its wildcards kept and its literal words
    corrected from the choices (``mlp-*-infer``), each one matching at least one choice."""
    import difflib

    choices = list(dict.fromkeys(choices))
    if _WILDCARD.search(word):
        shown = _close_patterns(word, choices, limit)
    else:
        close = [c for c in difflib.get_close_matches(word, choices, n=limit + 1, cutoff=0.75) if c != word]
        best = max((difflib.SequenceMatcher(None, word, c).ratio() for c in close), default=0.0)
        shown = [c for c in close if difflib.SequenceMatcher(None, word, c).ratio() >= best - 0.05][:limit]
    if not shown:
        return ""
    return " (did you mean " + " or ".join(repr(s) for s in shown) + "?)"


_WILDCARD = re.compile(r"[*?\[]")
#: what separates the words of an id (``mlp-s-infer``): a glob is corrected word by word
_WORD_SEP = "-"


def _close_patterns(pattern: str, choices: list[str], limit: int) -> list[str]:
    """Globs shaped like ``pattern`` that match some choice, closest to it first."""
    import difflib
    import fnmatch

    candidates: dict[str, None] = {}
    for choice in choices:
        fitted = _fit(pattern.split(_WORD_SEP), choice.split(_WORD_SEP))
        if fitted is not None:
            candidates[_WORD_SEP.join(fitted)] = None
    candidates.pop(pattern, None)  # it matches nothing: it is what was mistyped
    literal = _WILDCARD.split(pattern, maxsplit=1)[0]
    if not candidates and literal:  # a typo inside one word (``mlpx*``): the literal start against the choices'
        for choice in choices:
            candidates[choice[: len(literal)] + pattern[len(literal):]] = None
    scored = [(difflib.SequenceMatcher(None, pattern, c).ratio(), c) for c in candidates
              if c != pattern and any(fnmatch.fnmatchcase(choice, c) for choice in choices)]
    best = max((score for score, _ in scored), default=0.0)
    scored = [sc for sc in scored if sc[0] >= max(0.75, best - 0.05)]  # the closest, and those as close
    scored.sort(key=lambda sc: -sc[0])  # stable: ties keep the choices' order
    return [c for _, c in scored[:limit]]


def _fit(words: list[str], target: list[str]) -> list[str] | None:
    """``words`` (a glob's, split at ``-``) laid over ``target``'s: a word with a wildcard kept where it
    matches one or more of target's words, a literal word replaced by target's word at its place."""
    import fnmatch

    if not words:
        return [] if not target else None
    if not target:
        return None
    head, rest = words[0], words[1:]
    if _WILDCARD.search(head):
        for k in range(1, len(target) - len(rest) + 1):
            if fnmatch.fnmatchcase(_WORD_SEP.join(target[:k]), head):
                tail = _fit(rest, target[k:])
                if tail is not None:
                    return [head, *tail]
        return None
    tail = _fit(rest, target[1:])
    return None if tail is None else [target[0], *tail]
