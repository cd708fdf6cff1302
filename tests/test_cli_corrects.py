"""The CLI helps with a newcomer's mistakes: a typo gets a did-you-mean, hints only where they apply,
`list cases` marks what runs by default, and the end of a run names each failure once with its repro.

Driven as a user drives it: the real ``conformance`` command in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conformance.api.case import select_cases

REPO = Path(__file__).resolve().parent.parent
PLANTED_LEAK = "tests.planted_backends:LeakIntermediateBackend"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=env)


def test_a_mistyped_option_is_named_as_a_conformance_option(tmp_path: Path) -> None:
    proc = _cli("run", "--backnd", "eager", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "unknown option for 'conformance run': --backnd (did you mean '--backend'?)" in err
    assert "eager" not in err.split("--backnd", 1)[1].split("(")[0], "a value is not an option"
    assert not (tmp_path / "out").exists()


def test_a_mistyped_backend_and_case_glob_get_the_closest_names(tmp_path: Path) -> None:
    backend = _cli("run", "--backend", "eagr", "--out", "out", cwd=tmp_path)
    assert backend.returncode == 2 and "unknown backend 'eagr' (did you mean 'eager'?)" in backend.stderr
    glob = _cli("run", "--backend", "eager", "--case", "mlp-x-*", "--out", "out", cwd=tmp_path)
    assert glob.returncode == 2 and "did you mean 'mlp-s-*'" in glob.stderr, glob.stderr


def test_install_hints_only_where_they_apply(tmp_path: Path) -> None:
    """A pattern no family could match gets no zoo install hint (it used to suggest torchvision)."""
    proc = _cli("run", "--backend", "eager", "--case", "nosuch-*", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown case 'nosuch-*'" in proc.stderr
    assert "pip install" not in proc.stderr and "families: " in proc.stderr


def test_list_cases_marks_the_default_set_and_describes_blocks(tmp_path: Path) -> None:
    proc = _cli("list", "cases", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line[:2] in ("* ", "  ")]
    marked = {line.split()[1] for line in rows if line.startswith("* ")}
    assert marked == {c.id for c in select_cases([])}
    assert f"{len(marked)} of them (marked *)" in proc.stdout and "families: " in proc.stdout
    block = next(line for line in rows if " mod-Conv1d-BatchNorm1d-infer " in line)
    assert "BatchNorm1d" in block.split("seed=0", 1)[1] and "alone" not in block


def test_the_end_of_a_run_names_each_failure_once_with_its_repro_and_a_rerun_gets_its_own_out(
        tmp_path: Path) -> None:
    proc = _cli("run", "--backend", PLANTED_LEAK, "--case", "mlp-s-infer", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    end = proc.stderr.split("as expected", 1)[1]  # after the summary table's header
    assert end.count("mlp-s-infer@planted-leak") == 1 + 1, end  # its verdict line, and its repro file's name
    assert "short test summary" not in proc.stderr + proc.stdout and "FAILURES" not in proc.stderr + proc.stdout
    script = tmp_path / "out" / "repros" / "mlp-s-infer@planted-leak.py"
    shown = next(line.split("repro script: ", 1)[1] for line in end.splitlines() if "repro script: " in line)
    assert script.exists() and (tmp_path / shown).resolve() == script.resolve(), shown
    again = _cli("run", "--backend", "eager", "--case", "mlp-s-infer", "--out", "out", cwd=tmp_path)
    assert again.returncode == 2 and "give this run its own directory (--out out-2)" in again.stderr, again.stderr
