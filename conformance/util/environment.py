"""The environment variables the harness reads as settings, each checked by one rule.

An environment variable is an input like an option: a bad value is one line naming it, before
anything runs (``conformance run``, ``list cases``, ``repro``, and the pytest plugin), never a
traceback at the import that reads it, and never a silent fallback.  The importing module keeps a
default where the value is bad (an import must not fail on it); the entry points refuse it first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: samples per op of the op sweep (``conformance.cases.ops``): its first N
OP_SAMPLES = "CONFORMANCE_OP_SAMPLES"
DEFAULT_OP_SAMPLES = 2
#: at most this many: the sweep looks at an op's first 200 samples to find them (``conformance.cases.ops.SCAN``)
MOST_OP_SAMPLES = 200


class EnvironmentProblem(ValueError):
    """A setting read from the environment that cannot be used; the message names the variable."""


def op_samples(environ: Mapping[str, str] | None = None) -> int:
    """``CONFORMANCE_OP_SAMPLES`` as a count (the default when unset or empty); refuses anything else than a
    whole number from 1 to :data:`MOST_OP_SAMPLES` (the digits are counted before they are converted)."""
    text = (os.environ if environ is None else environ).get(OP_SAMPLES, "").strip()
    if not text:
        return DEFAULT_OP_SAMPLES
    if not text.isascii() or not text.isdigit() or len(text) > 6 or not 1 <= int(text) <= MOST_OP_SAMPLES:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise EnvironmentProblem(f"{OP_SAMPLES}={shown!r}: must be a whole number of samples per op from 1 to "
                                 f"{MOST_OP_SAMPLES} (unset: {DEFAULT_OP_SAMPLES})")
    return int(text)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every setting above, checked: raises :class:`EnvironmentProblem` for the first bad one."""
    op_samples(environ)
