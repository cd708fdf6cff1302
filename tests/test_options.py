"""One option table for both entry points: ``conformance run`` and the pytest plugin.

Each test here would fail on a planted defect: an option declared by hand on one side only,
a checker one side skips, a flag the CLI forwards under a name the plugin does not know, a
module-level torch import in the ``pytest11`` entry point, a plugin that turns itself on in
sessions that did not ask for it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main as cli
from conformance.run import options, plugin
from conformance.run.options import OPTIONS, PYTEST_OPTIONS, Option

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}


def _pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=_env())


def test_entry_point_module_does_not_import_torch(tmp_path: Path) -> None:
    """pytest loads conformance.run.plugin into every session: it must stay light (no torch at import)."""
    code = "import sys, conformance.run.plugin; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False", "conformance.run.plugin (or what it imports) imports torch at import time"


class _Group:
    """Stands in for pytest's option group: records what the plugin declares."""

    def __init__(self) -> None:
        self.parser = argparse.ArgumentParser(prog="pytest", add_help=False)
        self.flags: list[str] = []

    def addoption(self, *flags: str, **kwargs: Any) -> None:
        self.flags += flags
        self.parser.add_argument(*flags, **kwargs)


class _Parser:
    def __init__(self) -> None:
        self.group = _Group()

    def getgroup(self, name: str, description: str = "") -> _Group:
        return self.group


def _declared_by_plugin() -> _Group:
    parser = _Parser()
    plugin.pytest_addoption(parser)  # type: ignore[arg-type]
    return parser.group


def _run_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    return capsys.readouterr().out


def test_every_table_option_is_in_both_helps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_help = _run_help(capsys)
    pytest_help = _pytest("--help", cwd=tmp_path).stdout
    for opt in OPTIONS:
        if opt.cli:
            assert opt.cli in run_help, f"{opt.cli} missing from conformance run --help"
        if opt.pytest and not opt.foreign:
            assert opt.pytest in pytest_help, f"{opt.pytest} missing from pytest --help"
            assert opt.pytest.startswith("--conformance-")


def test_an_option_added_to_the_table_reaches_both_entry_points(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = Option("planted", "a planted option", "--planted", "--conformance-planted", type=int, default=1,
                     metavar="N")
    monkeypatch.setattr(options, "OPTIONS", (*OPTIONS, planted))
    monkeypatch.setattr(options, "PYTEST_OPTIONS", (*PYTEST_OPTIONS, planted))
    monkeypatch.setitem(options.BY_NAME, "planted", planted)  # type: ignore[index]
    run = cli._parser().parse_known_args(["run", "--planted", "7"])[0]
    assert run.planted == 7
    assert "--planted N" in _run_help(capsys)
    group = _declared_by_plugin()
    assert "--conformance-planted" in group.flags
    # the CLI forwards it under the plugin's name, and the plugin reads back what the user gave
    forwarded = options.forward(run)
    assert forwarded[forwarded.index("--conformance-planted") + 1] == "7"
    assert group.parser.parse_known_args(forwarded)[0].conformance_planted == 7


def test_forwarded_options_read_back_as_the_cli_parsed_them(tmp_path: Path) -> None:
    """Every option both sides know survives the CLI -> pytest arguments -> plugin round trip."""
    (tmp_path / "prev").mkdir()
    argv = ["run", "--backend", "eager", "--backend", "x:Y", "--case", "mlp-*", "--cases", "my.cases",
            "--out", str(tmp_path / "o"), "--shard", "2/3", "--shard-durations", str(tmp_path / "prev"),
            "--update-manifest", "--generated", "4", "--hypothesis-seed", "9", "--no-auto-repro", "--no-isolate",
            "--timeout", "12.5", "--steps", "5", "--baseline", str(tmp_path / "prev"), "--baseline-tolerance", "5%",
            "-n", "2"]
    args = cli._parser().parse_known_args(argv)[0]
    forwarded = options.forward(args)
    back = _declared_by_plugin().parser.parse_known_args(forwarded)[0]
    for opt in OPTIONS:
        if opt.cli and opt.pytest and not opt.foreign:
            assert getattr(back, opt.pytest_dest) == getattr(args, opt.name), opt.name
    # the flags other plugins own go to them unchanged
    assert forwarded[forwarded.index("-n") + 1] == "2"
    assert forwarded[forwarded.index("--hypothesis-seed") + 1] == "9"
    # defaults are not forwarded; what is meaningful only with another option goes only with it
    plain = options.forward(cli._parser().parse_known_args(["run", "--hypothesis-seed", "3"])[0])
    assert plain == []


BAD_VALUES = {
    "timeout-zero": ("timeout", "0"),
    "timeout-nan": ("timeout", "nan"),
    "steps-zero": ("steps", "0"),
    "shard-dash": ("shard", "1-3"),
    "shard-past-end": ("shard", "4/3"),
    "generated-negative": ("generated", "-1"),
    "tolerance-word": ("baseline_tolerance", "lots"),
    "baseline-missing": ("baseline", "nowhere"),
    "durations-without-shard": ("shard_durations", "."),
}


@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_a_bad_value_is_the_same_one_line_error_from_both_entry_points(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    option, value = BAD_VALUES[name]
    opt = options.BY_NAME[option]
    assert opt.cli and opt.pytest
    monkeypatch.chdir(tmp_path)

    def no_session(*args: object, **kwargs: object) -> int:
        raise AssertionError("a bad value reached the pytest session")

    monkeypatch.setattr(cli.pytest, "main", no_session)
    assert cli.main(["run", "--backend", "eager", "--case", "mlp-s-infer", opt.cli, value]) == 2
    cli_lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(cli_lines) == 1 and cli_lines[0].startswith("conformance: error: "), cli_lines
    said = cli_lines[0].removeprefix("conformance: error: ")
    assert opt.cli in said or option in ("baseline_tolerance", "baseline")

    proc = _pytest("--collect-only", opt.pytest, value, cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == "ERROR: " + said.replace(opt.cli, opt.pytest).replace("--shard I/N", "--conformance-shard I/N")
    assert not any(tmp_path.iterdir()), "a refused run must not write anything"


def test_plugin_stays_off_in_sessions_that_do_not_ask_for_it(tmp_path: Path) -> None:
    """The project's own tests (any session without a conformance option or the suite) are left alone."""
    (tmp_path / "test_other.py").write_text(
        "import sys\n"
        "def test_other(pytestconfig):\n"
        "    assert not pytestconfig.pluginmanager.has_plugin('conformance-run')\n"
        "    assert 'torch' not in sys.modules\n"
    )
    proc = _pytest("-q", "test_other.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_other.py"]


def test_any_conformance_option_turns_the_plugin_on(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text(
        "def test_other(pytestconfig):\n"
        "    assert pytestconfig.pluginmanager.has_plugin('conformance-run')\n"
    )
    proc = _pytest("-q", "test_other.py", "--conformance-out", "out", "--conformance-backend", "eager",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()  # no verdict: the results directory is left as it was


def test_isolation_worker_finds_the_case_by_id_without_selecting(monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.api import case
    from conformance.run import isolation

    def no_selection(*args: object) -> None:
        raise AssertionError("the worker re-ran the case selection")

    monkeypatch.setattr(case, "select_cases", no_selection)
    assert isolation._case("mlp-s-infer").id == "mlp-s-infer"
    with pytest.raises(case.CaseError, match="unknown case 'no-such-case'"):
        isolation._case("no-such-case")


@pytest.mark.full(ci="tests/test_cli.py::test_plain_pytest_with_xdist_ships_results_from_workers")
def test_collecting_the_suite_turns_the_plugin_on_also_under_xdist(tmp_path: Path) -> None:
    """No conformance option at all: the suite's collection (on the workers) turns the run on, and the
    xdist controller, which collects nothing, turns on when the workers report the suite's items."""
    proc = _pytest("--pyargs", "conformance.run.suite", "-q", "-n", "2", "-k", "mlp-s-infer and eager", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (tmp_path / options.DEFAULT_OUT / "results.jsonl").read_text().splitlines()
    assert len(lines) == 1 and '"mlp-s-infer"' in lines[0]


def test_a_refusal_found_while_collecting_the_suite_is_one_line(tmp_path: Path) -> None:
    """It names the plugin's flags, not the CLI's."""
    (tmp_path / options.DEFAULT_OUT).mkdir()
    (tmp_path / options.DEFAULT_OUT / "note.txt").write_text("mine\n")
    proc = _pytest("--pyargs", "conformance.run.suite", "-q", "-k", "mlp-s-infer and eager", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [
        f"ERROR: --conformance-out {options.DEFAULT_OUT} is not empty (note.txt); choose a new directory or pass "
        "--conformance-existing overwrite"]
    assert sorted(p.name for p in (tmp_path / options.DEFAULT_OUT).iterdir()) == ["note.txt"]


def test_an_xdist_worker_takes_the_options_its_controller_checked(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller checks the options once and hands them over; the worker parses nothing again: the
    baseline the controller loaded is the worker's even once its folder is gone, where a worker checking
    its own arguments would refuse it."""
    import shutil
    from types import SimpleNamespace

    from conformance.api.result import Result, Status, append_result
    from conformance.run import runner

    prev = tmp_path / "prev"
    prev.mkdir()
    append_result(prev / "results.jsonl", Result("mlp-s-infer", "eager", Status.PASS))
    parsed = _declared_by_plugin().parser.parse_known_args(
        ["--conformance-out", str(tmp_path / "o"), "--conformance-baseline", str(prev),
         "--conformance-shard", "2/3", "--conformance-steps", "4"])[0]

    def config_of(workerinput: dict[str, Any] | None) -> Any:
        config = SimpleNamespace(getoption=lambda dest, default=None: getattr(parsed, dest, default))
        if workerinput is not None:
            config.workerinput = workerinput
        return config

    checked = options.validate(options.Values.of_config(config_of(None)))
    workerinput: dict[str, Any] = {"workerid": "gw0"}
    options.hand_over(workerinput, checked)
    shutil.rmtree(prev)
    with pytest.raises(options.OptionError, match="baseline"):  # what checking again would have said
        options.validate(options.Values.of_config(config_of(None)))
    activated: list[dict[str, Any]] = []
    monkeypatch.setattr(runner, "activate", lambda config, values: activated.append(values))
    plugin._activate(config_of(workerinput))
    (values,) = activated
    assert values.keys() == checked.keys() and values["shard"] == checked["shard"] and values["steps"] == 4
    assert list(values["baseline"]) == [("mlp-s-infer", "eager")]
    assert options.handed(config_of(None)) is None  # the controller itself checks
