"""Users' own cases: README's example as written, and a case package installed from a directory.

Both run through the real `conformance` command, isolated (each pair in a worker process
that must load the same case sources), with pytest-xdist workers and shards.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = str(Path(sys.executable).parent / "conformance")


def _readme_example() -> tuple[str, list[str]]:
    """The "Add your model" section's Python file and its command, as docs/usage.md gives them (README links
    to it), the command as README's next steps give it too."""
    section = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8").split("## Add your model", 1)[1]
    section = section.split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    command = re.search(r"```bash\n(.*?)```", section, re.S)
    assert code and command, "docs/usage.md's 'Add your model' section lost its example"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"`{command.group(1).strip()}`" in readme, "README's next steps lost the command that runs your model"
    return code.group(1), shlex.split(command.group(1).strip())


def _verdicts(out: Path) -> dict[str, str]:
    lines = (out / "results.jsonl").read_text().splitlines()
    return {f"{r['case']}@{r['backend']}": r["status"] for r in map(json.loads, lines)}


def test_readme_example_runs_as_written_isolated(tmp_path: Path) -> None:
    """Followed in order: the quick start has filled ``conformance-results``; "Add your model" writes to a
    directory of its own, so it neither refuses nor touches the quick start's results."""
    code, command = _readme_example()
    (tmp_path / "my_cases.py").write_text(code)
    assert command[0] == ".venv/bin/conformance"
    assert "--out" in command and command[command.index("--out") + 1] != "conformance-results", command
    quick_start = tmp_path / "conformance-results" / "results.jsonl"
    quick_start.parent.mkdir()
    quick_start.write_text('{"the quick start": "its verdicts"}\n')
    proc = subprocess.run([CONFORMANCE, *command[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _verdicts(tmp_path / command[command.index("--out") + 1]) == {"my-convnet-infer@eager": "pass",
                                                                        "my-convnet-train@eager": "pass"}
    assert quick_start.read_text() == '{"the quick start": "its verdicts"}\n'


@pytest.mark.slow
@pytest.mark.xfail(reason="issue 56, open: the noise floor's perturbed float64 runs put inductor's rounding of this "
                          "zero-exact gradient's momentum update at 4.24e-07 where it is 4.52e-07 (call 3); the "
                          "floor's model of long sums is not yet tight enough here", strict=False)
def test_readme_example_passes_on_inductor(tmp_path: Path) -> None:
    """README's example with ``--backend inductor``, as README suggests: the convolution's bias feeds a batch norm,
    so its gradient is 0 in exact arithmetic and inductor's is float32 rounding of its sums (3.9e-7, once held to a
    floor of 7.7e-9): within the noise floor its terms make."""
    code, command = _readme_example()
    (tmp_path / "my_cases.py").write_text(code)
    out = tmp_path / "inductor-results"
    args = list(command[1:])
    args[args.index("--out") + 1], args[args.index("--backend") + 1] = str(out), "inductor"
    proc = subprocess.run([CONFORMANCE, *args], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _verdicts(out) == {"my-convnet-infer@inductor": "pass", "my-convnet-train@inductor": "pass"}


PACKAGE_CASES = '''
import torch
from torch import nn

from conformance.api.case import Case, Workload, register


class ConvLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, groups=1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Flatten(), nn.Linear(8 * 64, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).square().mean()


def register_cases() -> None:
    register(Case("pkg-convnet-train", "train_step", "pkg", 0,
                  lambda seed: Workload(ConvLoss(), (torch.randn(2, 3, 8, 8),)),
                  trains=True, requires=frozenset({"training"})))
    register(Case("pkg-mlp-infer", "inference", "pkg", 0,
                  lambda seed: Workload(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32)),
                                        (torch.randn(4, 16),))))
'''


def _install_case_package(tmp_path: Path) -> Path:
    """A real distribution, built and installed by pip from its directory into a target dir."""
    src = tmp_path / "src"
    (src / "my_zoo").mkdir(parents=True)
    (src / "my_zoo" / "__init__.py").write_text(PACKAGE_CASES)
    (src / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "my-zoo"
        version = "0.1"

        [project.entry-points."conformance.cases"]
        my-zoo = "my_zoo:register_cases"
        broken = "my_zoo.missing:nothing"
        """))
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(site), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(site.glob("my_zoo-0.1.dist-info/entry_points.txt"))
    return site


@pytest.mark.full(ci="tests/test_case_api.py::test_readme_example_runs_as_written_isolated")
def test_installed_case_package_runs_isolated_with_xdist_and_shards(tmp_path: Path) -> None:
    site = _install_case_package(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CONFORMANCE, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)

    listed = cli("list", "cases", "--case", "pkg-*")
    assert listed.returncode == 0, listed.stderr
    assert "pkg-convnet-train" in listed.stdout and "pkg-mlp-infer" in listed.stdout
    assert "case plugin broken: broken: my_zoo.missing:nothing: ModuleNotFoundError" in listed.stdout

    select = ["--case", "pkg-*", "--backend", "eager", "--no-history", "--no-report"]
    full = cli("run", *select, "-n", "2", "--out", "full")
    assert full.returncode == 0, full.stdout + full.stderr
    assert _verdicts(tmp_path / "full") == {"pkg-convnet-train@eager": "pass", "pkg-mlp-infer@eager": "pass"}
    # one shard of two: its process loads the package's cases too (tests/test_sharding.py merges shards)
    shard = cli("run", *select, "--shard", "2/2", "--out", "s2")
    assert shard.returncode == 0, shard.stderr
    assert "case plugin broken" in shard.stderr  # reported, not fatal
    part = _verdicts(tmp_path / "s2")
    assert len(part) == 1 and part.items() <= _verdicts(tmp_path / "full").items()


def test_unloadable_cases_source_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "bad_cases.py").write_text("raise RuntimeError('no model here')\n")
    for source, message in (("bad_cases.py", "RuntimeError: no model here"), ("missing.py", "no such file"),
                            ("not_a_module_here", "ModuleNotFoundError")):
        proc = subprocess.run([CONFORMANCE, "run", "--cases", source, "--backend", "eager"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
