"""Where a run's time goes (``--profile-harness``), the wall time every run prints, and the early worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli.launch import named_backends, prestarts
from conformance.util.phases import PAIR_PHASES, breakdown, key, pair_wall_s

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("argv", "expected"), [
    (["run", "--backend", "eager"], True),
    (["run"], True),
    (["run", "-n", "2"], False),  # xdist workers start their own
    (["run", "-n2"], False),
    (["run", "--workers", "2"], False),
    (["run", "--no-isolate"], False),
    (["run", "--cases", "my_cases.py"], False),  # the worker must inherit the loaded sources
    (["run", "--help"], False),
    (["list", "cases"], False),
    (["run", "--no-report", "--no-history"], True),  # --no-* is not -n
])
def test_which_commands_start_their_worker_first(argv: list[str], expected: bool) -> None:
    assert prestarts(argv) is expected


def test_named_backends() -> None:
    assert named_backends(["run", "--backend", "eager", "--backend=iree", "--case", "x"]) == ["eager", "iree"]
    assert named_backends(["run"]) == []


def test_breakdown_sums_pair_phases_and_isolation() -> None:
    timings = [
        {key("compile"): 2.0, key("reference"): 0.5, "pair_s": 3.0, "isolated_wall_s": 3.25},
        {key("compile"): 1.0, key("model"): 0.25, "pair_s": 1.5, "isolated_wall_s": 1.5},
    ]
    profile = breakdown(timings, wall_s=10.0, run_phases={"startup": 1.0, "report": 2.0})
    rows = {name: seconds for name, seconds, _ in profile.rows}
    assert rows["compile"] == 3.0 and rows["reference"] == 0.5 and rows["model"] == 0.25
    assert rows["isolation"] == 0.25
    assert rows["other"] == pytest.approx(10.0 - 3.75 - 0.25 - 3.0)  # what no phase covers
    assert profile.accounted_s == pytest.approx(10.0)
    assert pair_wall_s(timings[0]) == 3.25 and pair_wall_s({"compile_s": 1.0, "run_s": 0.5}) == 1.5


def test_profile_harness_prints_where_the_time_went(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "conformance", "run", "--backend", "eager", "--case", "mlp-s-*",
                           "--out", "out", "--profile-harness"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "where the time went" in proc.stderr
    for phase in [*PAIR_PHASES, "isolation", "worker start", "startup"]:
        assert f"│ {phase} " in proc.stderr, phase
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("conformance: wall time ") and "report " in last
    for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines():
        timing = json.loads(line)["timing"]
        phases = sum(v for k, v in timing.items() if k.startswith("phase_") and not k.endswith("_cpu_s"))
        assert timing["pair_s"] <= timing["isolated_wall_s"], timing
        assert phases >= 0.8 * timing["pair_s"], timing  # the phases account for the pair's time
        assert timing[key("compile")] > 0 and timing[key("probe")] > 0


def test_every_run_says_its_wall_time(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "conformance", "run", "--backend", "eager", "--case", "mlp-s-infer",
                           "--out", "out", "--no-isolate", "--no-report"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("conformance: wall time ")
    assert "where the time went" not in proc.stderr


def test_checking_that_the_cases_build_imports_no_compiler() -> None:
    """The command builds each selected case before pytest starts (a builder that fails is a one-line
    refusal), but not its optimizer: the first optimizer a process makes imports ``torch._dynamo``, two
    seconds of the command's start-up that the worker pays again anyway."""
    script = ("import sys\n"
              "from conformance.cli.main import _validate\n"
              "_validate(['eager'], ['mlp-s-train', 'mlp-s-infer'], build=True)\n"
              "print(sorted(m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
