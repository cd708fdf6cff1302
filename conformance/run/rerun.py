"""The command that reruns one pair, as every place that prints one prints it.

The terminal's ``rerun:`` line, the record's ``repro`` (the report's REPRODUCE box) and a repro
script's ``RERUN`` are this one command, so a pasted one reruns the same pair: the ``--cases``
sources the case came from (a file as the absolute path the run loaded), the case, the backend as
the run named it (an ad hoc one by its ``module:Class`` spec), and the probed calls where the run
asked for other than the default.  A generated case needs no option: its id carries its family and
seed (``gen-dag-1234``).
"""

from __future__ import annotations

import shlex

from conformance.api.case import case_sources
from conformance.run.options import DEFAULT_STEPS


def rerun_command(case_id: str, spec: str, steps: int | None = None) -> str:
    """``conformance run [--cases SRC]... --case ID --backend SPEC [--steps N]``, quoted for a shell."""
    words = ["conformance", "run"]
    for source in case_sources(case_id):
        words += ["--cases", source]
    words += ["--case", case_id, "--backend", spec]
    if steps is not None and steps != DEFAULT_STEPS:
        words += ["--steps", str(steps)]
    return shlex.join(words)
