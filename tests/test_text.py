"""The text helpers: a cut reason ends with an ellipsis, a count agrees with its noun."""

from __future__ import annotations

import pytest

from conformance.util.text import ELLIPSIS, clip, clip_start, plural, traceback_tail


def test_clip_leaves_short_text_alone() -> None:
    assert clip("", 5) == ""
    assert clip("abcde", 5) == "abcde"


def test_clip_marks_what_it_cuts() -> None:
    cut = clip("abcdefghij", 5)
    assert cut == "abcd" + ELLIPSIS
    assert len(cut) == 5
    assert clip("ab   cdefgh", 6) == "ab" + ELLIPSIS  # no blank before the ellipsis
    assert clip("x" * 1000, 160).endswith(ELLIPSIS) and len(clip("x" * 1000, 160)) == 160
    with pytest.raises(ValueError):
        clip("abc", 0)


def test_clip_start_keeps_the_end_and_marks_the_cut() -> None:
    assert clip_start("abc", 3) == "abc"
    cut = clip_start("Traceback ...\n  line 1\nValueError: boom", 12)
    assert cut == ELLIPSIS + "Error: boom" and len(cut) == 12
    with pytest.raises(ValueError):
        clip_start("abc", 0)


def test_plural() -> None:
    assert plural(1, "pair") == "1 pair"
    assert plural(0, "pair") == "0 pairs"
    assert plural(2, "pair") == "2 pairs"
    assert plural(3, "child", "children") == "3 children"


def test_cut_reasons_end_with_an_ellipsis() -> None:
    """Where the harness cuts a reason (engine errors, pytest failure gists) the cut shows."""
    from conformance.run.engine import _one_line
    from conformance.run.runner import _gist

    long = "x" * 2000
    reason = _one_line(RuntimeError(long))
    assert reason.startswith("RuntimeError: xxx") and reason.endswith(ELLIPSIS) and len(reason) == 500
    assert _one_line(RuntimeError("short")) == "RuntimeError: short"
    gist = _gist(f"first\n{long}\n")
    assert gist.endswith(ELLIPSIS) and len(gist) == 300
    assert _gist("E   boom\n") == "E   boom"


def test_traceback_tail_shortens_paths_and_cuts_between_whole_lines() -> None:
    frames = "".join(
        f'  File "/very/long/ci/root/site-packages/torch/f{i}.py", line {i}, in f{i}\n    call_{i}()\n    ^^^^^^^^\n'
        for i in range(200))
    text = "Traceback (most recent call last):\n" + frames + "RuntimeError: the cause"
    tail = traceback_tail(text, 500, ["/very/long/ci/root/site-packages", "/elsewhere"])
    assert len(tail) <= 500
    assert tail.startswith(ELLIPSIS + "\n") and tail.endswith("RuntimeError: the cause")
    assert 'File "torch/f199.py", line 199, in f199' in tail and "^^^" not in tail
    assert all(line == ELLIPSIS or line.startswith(("  File", "    call_", "RuntimeError"))
               for line in tail.splitlines())
    assert traceback_tail("short", 500) == "short"


def test_escape_codes_are_stripped_to_the_words() -> None:
    from conformance.util.text import without_escapes

    coloured = ("\x1b[1m\x1b[31merror:\x1b[0m \x1b]8;;https://x.org\x07link\x1b]8;;\x1b\\ in \x1b(Bmodel\x1b[K "
                "\x9b1mdone")
    assert without_escapes(coloured) == "error: link in model done"
    assert without_escapes("a [1m] plain [x] text") == "a [1m] plain [x] text"  # brackets without ESC stay


def test_a_coloured_vendor_error_is_its_whole_words_in_the_reason() -> None:
    """A reason from a coloured message keeps every word, and no terminal code (they cut reasons short)."""
    from conformance.run.engine import _one_line

    words = "Exception from src/core/node.cpp:123: Check 'rank' failed: convolution_backward expects rank 4 " * 5
    coloured = RuntimeError("".join(f"\x1b[1;3{i % 8}m{w}\x1b[0m " for i, w in enumerate(words.split())))
    reason = _one_line(coloured)
    assert "\x1b" not in reason and reason == f"RuntimeError: {' '.join(words.split())}"
