"""Bad input is refused before torch loads: in a second, not the minute a run's start-up takes.

Each refusal is driven through the real command (``python -m conformance``, the launcher the
``conformance`` script runs) with ``-X importtime``, which lists every module the process imported: the
refusal must be the usual one line and exit 2, and ``torch`` must not be among those modules.  The names
come from the catalog a full load records (a first ``conformance list backends`` here, in a cache home of
the test's own), and a catalog that a ``--cases`` file's edit has made stale is not trusted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.util.text import did_you_mean

REPO = Path(__file__).resolve().parent.parent
CASES_FILE = '''
import torch
from torch import nn

from conformance.case import Case, Workload, register


def build(seed: int) -> Workload:
    return Workload(nn.Linear(4, 2), (torch.randn(3, 4),))


register(Case("mine-linear-infer", "inference", "mine", seed=0, builder=build))
'''


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(cache),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _cli(cwd: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "conformance", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=_env(cache))


def _imported(stderr: str) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", stderr, re.M)}


def _said(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("import time:")]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A folder a user works in (one used results folder, a cases file) and a cache home whose catalog a full
    load has recorded, for the plain command and for the command with ``--cases``."""
    ws = tmp_path_factory.mktemp("ws")
    cache = ws / "cache"
    used = ws / "conformance-results"
    used.mkdir()
    (used / "results.jsonl").write_text('{"case": "mlp-s-infer"}\n')
    (ws / "my_cases.py").write_text(CASES_FILE)
    for extra in ([], ["--cases", "my_cases.py"]):
        full = _cli(ws, cache, "list", "cases", *extra)
        assert full.returncode == 0, full.stderr[-2000:]
        assert "torch" in _imported(full.stderr)  # the full load: what the refusals below do without
    return ws, cache


REFUSALS = {
    "option": (["run", "--bakend", "eager", "--out", "fresh"],
               "unknown option for 'conformance run': --bakend (did you mean '--backend'?)"),
    "option value": (["run", "--steps", "0", "--out", "fresh"], "--steps must be a whole number >= 1, got 0"),
    "backend": (["run", "--backend", "eagr", "--out", "fresh"], "unknown backend 'eagr' (did you mean 'eager'?)"),
    "case glob": (["run", "--case", "mlp-*-infr", "--out", "fresh"],
                  "unknown case 'mlp-*-infr' (did you mean 'mlp-*-infer'?)"),
    "case id": (["run", "--case", "mlp-s-infr", "--out", "fresh"], "unknown case 'mlp-s-infr' (did you mean "),
    "case of a cases file": (["run", "--cases", "my_cases.py", "--case", "mine-linear-infr", "--out", "fresh"],
                             "unknown case 'mine-linear-infr' (did you mean 'mine-linear-infer'?)"),
    "missing cases file": (["run", "--cases", "nosuch_cases.py", "--out", "fresh"],
                           "--cases nosuch_cases.py: no such file"),
    "used folder": (["run", "--backend", "eager", "--case", "mlp-s-infer"],
                    "--out conformance-results already holds results"),
}


@pytest.mark.parametrize("what", list(REFUSALS))
def test_each_refusal_comes_before_torch_is_imported(workspace: tuple[Path, Path], what: str) -> None:
    ws, cache = workspace
    args, expected = REFUSALS[what]
    proc = _cli(ws, cache, *args)
    said = _said(proc.stderr)
    assert proc.returncode == 2 and len(said) == 1 and expected in said[0], said
    assert "torch" not in _imported(proc.stderr), f"{what}: refused only after importing torch"
    assert not (ws / "fresh").exists()


def test_a_catalog_its_cases_file_changed_since_is_not_trusted(workspace: tuple[Path, Path], tmp_path: Path) -> None:
    """A case added to the file since the catalog was recorded is not refused: the command loads the file
    (torch with it) and goes on to the next refusal, the used folder's."""
    _, cache = workspace
    edited = tmp_path / "ws"
    edited.mkdir()
    (edited / "conformance-results").mkdir()
    (edited / "conformance-results" / "results.jsonl").write_text("{}\n")
    source = CASES_FILE + 'register(Case("mine-added-infer", "inference", "mine", seed=0, builder=build))\n'
    (edited / "my_cases.py").write_text(CASES_FILE)
    assert _cli(edited, cache, "list", "cases", "--cases", "my_cases.py").returncode == 0
    (edited / "my_cases.py").write_text(source)
    proc = _cli(edited, cache, "run", "--cases", "my_cases.py", "--case", "mine-added-infer")
    said = _said(proc.stderr)
    assert proc.returncode == 2 and "already holds results" in said[-1], said
    assert not any("unknown case" in line for line in said), said


@pytest.mark.parametrize(("word", "choices", "expected"), [
    ("mlp-*-infr", ["mlp-s-infer", "mlp-m-infer", "mlp-s-train"], " (did you mean 'mlp-*-infer'?)"),
    ("mlp-x-*", ["mlp-s-infer", "mlp-m-infer"], " (did you mean 'mlp-s-*' or 'mlp-m-*'?)"),
    ("reg-*-infr", ["reg-loop-carried-infer", "mlp-s-infer"], " (did you mean 'reg-*-infer'?)"),
    ("mlpx*", ["mlp-s-infer"], " (did you mean 'mlp-*'?)"),
    ("nosuch-*", ["mlp-s-infer"], ""),
    ("eagr", ["eager", "inductor"], " (did you mean 'eager'?)"),
    ("mlp-s-infr", ["mlp-s-infer", "mlp-m-infer"], " (did you mean 'mlp-s-infer'?)"),  # the closest only
])
def test_a_suggestion_is_never_the_input_and_a_glob_gets_a_glob_that_matches(
        word: str, choices: list[str], expected: str) -> None:
    import fnmatch

    said = did_you_mean(word, choices)
    assert said == expected
    for suggestion in re.findall(r"'([^']*)'", said):
        assert suggestion != word and any(fnmatch.fnmatchcase(c, suggestion) for c in choices), suggestion
