"""One ``conformance run -n 2`` as a user starts it, read by each test here: the pairs shared over pytest-xdist
workers, each running its pairs in an isolation worker.

The run is made once for the file (a module fixture: the file goes to one test worker whole): starting two
xdist workers, each with its own isolation worker, is most of what each test used to pay on its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
#: the run's folder and its finished process
Run = tuple[Path, subprocess.CompletedProcess[str]]

#: two families of cases, ``order-*`` (listed the other way round in the second xdist worker's registry) and
#: ``threads-*``; each builder writes who builds it (the CLI checking it, or an xdist worker's isolation worker)
#: and with how many intra-op threads
CASES = """
import os
import torch
from conformance.backends.eager import EagerBackend  # noqa: F401  (the same builders as the built-in MLPs)
from conformance.api.case import Case, register, resolve

base = resolve("mlp-s-infer")


def build(seed):
    with open(os.environ["THREADS_SEEN"], "a") as seen:
        seen.write(f"{os.environ.get('PYTEST_XDIST_WORKER', '-')} {torch.get_num_threads()}\\n")
    return base.builder(seed)


ids = ["order-a", "order-b", "order-c"]
if os.environ.get("PYTEST_XDIST_WORKER") == "gw1":
    ids.reverse()  # this worker's registry lists them the other way round
for i in ids:
    register(Case(i, base.kind, "order", base.seed, build))
for i in ("threads-a", "threads-b"):
    register(Case(i, base.kind, "threads", base.seed, build))
"""


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    from conformance.run.plugin import THREADS_VARIABLE

    tmp = tmp_path_factory.mktemp("two-workers")
    (tmp / "workers_cases.py").write_text(CASES)
    # a user's shell: no thread count (the test session sets one), not inside an xdist worker (this test may be)
    env = {k: v for k, v in os.environ.items() if k != THREADS_VARIABLE and not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env["THREADS_SEEN"] = str(tmp / "seen.txt")
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--cases", "workers_cases.py",
                           "--backend", "eager", "--case", "order-*", "--case", "threads-*", "-n", "2", "--out", "out",
                           "--no-report", "--no-history"],
                          cwd=tmp, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp, proc


def _records(tmp: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp / "out" / "results.jsonl").read_text().splitlines()]


def test_workers_share_the_cores(two_workers: Run) -> None:
    """Under ``-n 2`` each process that runs pairs takes half the cores' intra-op threads (one on two cores),
    not one per core each: the isolation workers building the pairs see it."""
    from conformance.run.plugin import usable_cores

    tmp, _ = two_workers
    builds = [line.split() for line in (tmp / "seen.txt").read_text().splitlines()]
    in_workers = {threads for worker, threads in builds if worker != "-"}  # the pairs' builds, under the workers
    assert {worker for worker, _ in builds} >= {"gw0", "gw1"}
    assert in_workers == {str(max(1, usable_cores() // 2))}, builds


def test_xdist_workers_run_the_controllers_selection(two_workers: Run) -> None:
    """Workers whose registries differ in order still collect the same items: the controller selects once
    and hands the ids over; selecting again in each worker would make xdist refuse the run."""
    records = _records(two_workers[0])
    assert sorted(r["case"] for r in records) == ["order-a", "order-b", "order-c", "threads-a", "threads-b"]
    assert all(r["status"] == "pass" for r in records), records


def test_junit_testcases_name_backend_and_family(two_workers: Run) -> None:
    """Each pair's junit testcase is classed ``conformance.<backend>.<family>``, also with two workers."""
    tmp, _ = two_workers
    families = {r["case"]: r["family"] for r in _records(tmp)}
    assert families["order-a"] != families["threads-a"]  # two families, told apart
    testcases = list(ET.parse(tmp / "out" / "junit.xml").getroot().iter("testcase"))
    got = {tc.get("name"): tc.get("classname") for tc in testcases}
    assert got == {f"test_conformance[{case}@eager]": f"conformance.eager.{family}"
                   for case, family in families.items()}
