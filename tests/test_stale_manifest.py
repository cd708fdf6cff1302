"""A run that names no case warns of manifest entries that match no case, but not of a lazy family's.

The op sweep (``op-*``) registers its cases only when a pattern names it, so in the main job an IREE
manifest's op entries match nothing registered: they are not stale, and a new user's first run
must not say they are.  An entry naming no case at all still is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.backends.eager import EagerBackend
from conformance.run.runner import select


class ManifestedEager(EagerBackend):
    name = "eager-with-manifest"


def test_a_lazy_familys_entry_is_not_stale_and_a_missing_case_is(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        '[[expect]]\ncase = "op-nn.functional.max_pool2d-1-infer"\nstatus = "fail-compile"\nreason = "r"\n\n'
        '[[expect]]\ncase = "no-such-case-anywhere"\nstatus = "fail-peak"\nreason = "r"\nexcess = 8\n')
    monkeypatch.setattr(ManifestedEager, "manifest_path", str(manifest))  # a str, as the vendor guide declares it
    warnings = select([f"{__name__}:ManifestedEager"], []).warnings
    stale = [w for w in warnings if "matches no case: stale" in w]
    assert len(stale) == 1 and "'no-such-case-anywhere'" in stale[0], warnings


def test_the_shipped_manifests_have_no_stale_entry_in_the_main_job() -> None:
    warnings = select([], []).warnings
    assert not [w for w in warnings if "stale" in w], warnings
