"""Path vocabulary shared by the command line and the output directory, importing nothing heavy.

The pytest plugin declares its options from these in every pytest session, so this module
stays free of torch and of the results schema.
"""

from __future__ import annotations

import argparse
from pathlib import Path

#: what a run does with an output directory that already holds a run's files
EXISTING_MODES = ("refuse", "overwrite", "resume")


def path_arg(text: str) -> Path:
    """argparse ``type`` for path options: an empty string would quietly mean the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or directory")
    return Path(text)
