"""The CLI helps with a newcomer's mistakes: a typo gets a did-you-mean, hints only where they apply,
`list cases` marks what runs by default, and the end of a run names each failure once with its repro.

Driven as a user drives it: the real ``conformance`` command in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_a_mistyped_option_is_named_before_a_full_results_folder(tmp_path: Path) -> None:
    """The newcomer's order: the quick start filled the default folder, then a typo. The typo is what
    they hear of (the folder's refusal would send them to --out while the option stays wrong)."""
    out = tmp_path / "conformance-results"
    out.mkdir()
    (out / "results.jsonl").write_text('{"case": "mlp-s-infer"}\n')
    proc = _cli("run", "--backnd", "eager", cwd=tmp_path)
    assert proc.returncode == 2
    assert "unknown option for 'conformance run': --backnd (did you mean '--backend'?)" in proc.stderr, proc.stderr
    assert (out / "results.jsonl").read_text() == '{"case": "mlp-s-infer"}\n'
    valid = _cli("run", "--backend", "eager", "--case", "mlp-s-infer", "-x", cwd=tmp_path)  # pytest's own -x: fine
    assert valid.returncode == 2 and "already holds results" in valid.stderr, valid.stderr


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


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """``conformance list cases``, no option: one real command read by each test of its listing."""
    return _cli("list", "cases", cwd=tmp_path_factory.mktemp("list"))


def test_list_cases_marks_the_default_set_and_describes_blocks(listed: subprocess.CompletedProcess[str]) -> None:
    proc = listed
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line[:2] in ("* ", "  ")]
    marked = {line.split()[1] for line in rows if line.startswith("* ")}
    assert marked == {c.id for c in select_cases([])}
    assert f"{len(marked)} of them (marked *)" in proc.stdout and "families: " in proc.stdout
    block = next(line for line in rows if " mod-Conv1d-BatchNorm1d-infer " in line)
    assert "BatchNorm1d" in block.split("seed=0", 1)[1] and "alone" not in block


def test_list_cases_lists_each_kind_of_case(listed: subprocess.CompletedProcess[str]) -> None:
    assert listed.returncode == 0, listed.stderr
    assert "mlp-s-train" in listed.stdout and "train_step" in listed.stdout and "loop-rnn-t3" in listed.stdout


def test_list_cases_names_the_op_sweep_without_building_it(listed: subprocess.CompletedProcess[str]) -> None:
    """Issue 58: with no ``--case`` the families line left the op sweep out, so a new user never learnt of it."""
    assert listed.returncode == 0, listed.stderr
    families = next(line for line in listed.stdout.splitlines() if line.startswith("families: "))
    assert "ops (registered when a --case names it: --case 'op-*' or --case ops)" in families
    assert not any(line.split()[0].startswith("op-") for line in listed.stdout.splitlines()[2:] if line.strip())


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


def test_progress_shows_from_the_first_line_on_a_terminal(tmp_path: Path) -> None:
    """At a terminal (a real pty) the first thing a run prints is that it is starting, before torch is
    imported; then the pairs, then what happens while the worker warms up, then the first verdict."""
    import pty

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "COLUMNS": "200"}
    out = bytearray()

    def read(fd: int) -> bytes:
        data = os.read(fd, 65536)
        out.extend(data)
        return data

    argv = [sys.executable, "-m", "conformance", "run", "--backend", "eager", "--case", "mlp-s-infer",
            "--out", str(tmp_path / "out")]
    old = os.getcwd()
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.chdir(tmp_path)
        os.environ.update(env)
        status = pty.spawn(argv, read)
    finally:
        os.chdir(old)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    text = out.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    first = text.strip().splitlines()[0]
    assert first.startswith("conformance run: starting (importing torch"), first
    order = [text.index(s) for s in ("conformance run: starting", "conformance: 1 pair (eager)",
                                     "conformance: starting the pairs in a worker process", "[1/1] ok")]
    assert order == sorted(order), text
