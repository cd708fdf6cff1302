"""Which built-in cases the per-case sweeps of the test suite run: all of them, or CI's fixed sample.

``tests/test_backends_clean.py`` (eager byte-exact, every check, every call) and
``tests/test_state_parity.py`` (eager under Adam) run once per built-in case.  Two families make most
of their time and are held elsewhere too:
- the module sweep (``mod-*``, 147 modules): CI runs a fixed quarter of its modules, both modes of each,
  chosen by a hash of the module's name (not by its position: a module added later does not shift the
  sample), and ``tests/test_module_sweep.py`` holds the sweep's own contracts;
- the zoo (``zoo-*``, seconds per step): ``tests/test_zoo.py`` holds every zoo case byte-exact node by
  node; here one inference and one training case run the whole pair (references, parity, every call).

``CONFORMANCE_TESTS_FULL=1`` runs every case (``tox -e tests-full``, the nightly).
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable

from conformance.api.case import Case

FULL_ENV = "CONFORMANCE_TESTS_FULL"
#: the zoo cases CI runs through the whole pair: the cheapest inference and training ones
ZOO_KEPT = frozenset({"zoo-gpt2-infer", "zoo-bert-train"})


def full() -> bool:
    return os.environ.get(FULL_ENV, "").strip().lower() not in ("", "0", "no", "false")


def in_ci_sample(case_id: str) -> bool:
    """Whether CI's sample runs ``case_id`` (every case outside the two families does)."""
    if case_id.startswith("zoo-"):
        return case_id in ZOO_KEPT
    if case_id.startswith("mod-"):
        module = re.sub(r"-(infer|train)(-\w+)?$", "", case_id)
        return zlib.crc32(module.encode()) % 4 == 0
    return True


def swept(cases: Iterable[Case]) -> list[Case]:
    """``cases`` as this run sweeps them: all with ``CONFORMANCE_TESTS_FULL=1``, else CI's sample."""
    return [c for c in cases if full() or in_ci_sample(c.id)]
