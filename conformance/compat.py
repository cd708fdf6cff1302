"""The import paths an older guide showed, kept alive for a release in one place.

Before the layered package, vendors imported ``conformance.step``, ``conformance.aot`` and the rest
from the package top.  Those modules moved; each old path still imports (the same objects) and
warns once, naming the new one, until :data:`conformance.util.deprecation.REMOVED_IN`.  They are
served by a finder on ``sys.meta_path`` rather than a file each, so the package top shows only the
paths that stay (``adapter``, ``case``, ``verdict``), and removing them is deleting one table.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from conformance.util.deprecation import moved

#: old path -> the module it moved to (tests/test_public_paths.py holds each to its objects)
MOVED_PATHS: dict[str, str] = {
    "conformance.step": "conformance.api.step",
    "conformance.aot": "conformance.api.aot",
    "conformance.records": "conformance.output.records",
    "conformance.transients": "conformance.models.transients",
    "conformance.lifetime": "conformance.models.lifetime",
    "conformance.program": "conformance.models.program",
}


class MovedPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes each old path a module whose attributes are read from the new one (and warns)."""

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_PATHS:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=__file__)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED_PATHS[module.__name__]
        module.__doc__ = f"Deprecated path: moved to :mod:`{new}` (it warns, and is removed in a later release)."
        module.__getattr__ = moved(module.__name__, new, __file__)  # type: ignore[method-assign]


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``import conformance`` calls it)."""
    if not any(isinstance(finder, MovedPathFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedPathFinder())
