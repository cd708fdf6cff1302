"""Old public import paths kept alive for a release, with a warning that names the new one.

Vendors and case authors import what the docs once showed them; a path that moved keeps working
(the same objects) and says where it went, so an adapter written against an older guide loads,
warns, and can be fixed at leisure instead of failing at ``import``.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

#: the release that drops the moved paths (they warn from 0.1.0 on)
REMOVED_IN = "0.3.0"


def _caller_stacklevel(skip: tuple[str, ...]) -> int:
    """The stack level (for :func:`warnings.warn` called from :func:`moved`) of the user's ``import``
    line: the first frame outside the files in ``skip``.  ``warnings`` itself passes over the import
    machinery's frames when it counts, so they are not counted here either."""
    frame = sys._getframe(2)  # moved()'s caller
    level = 2
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<frozen importlib"):
            if name not in skip:
                return level
            level += 1
        frame = frame.f_back  # type: ignore[assignment]
    return 2


def moved(old: str, new: str, shim_file: str) -> Callable[[str], Any]:
    """Warn that module ``old`` (defined in ``shim_file``) moved to ``new``; return a module
    ``__getattr__`` that reads every name from ``new`` (the same objects)."""
    warnings.warn(
        f"{old} moved to {new}; import from {new} (the old path is removed in {REMOVED_IN})",
        DeprecationWarning,
        stacklevel=_caller_stacklevel((shim_file, __file__)),
    )
    target = importlib.import_module(new)

    def __getattr__(name: str) -> Any:
        try:
            return getattr(target, name)
        except AttributeError:
            raise AttributeError(f"module {old!r} (moved to {new}) has no attribute {name!r}") from None

    return __getattr__
