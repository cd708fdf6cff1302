"""CI's tier stays honest: each test left to the nightly (``full``) names a CI test that checks the same
mechanism, and that test exists and runs in CI."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _full_marks() -> dict[str, str]:
    """``file::test`` -> the ``ci`` node id its ``full`` mark names, over every test file."""
    marks = {}
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and ast.unparse(deco.func) == "pytest.mark.full":
                    ci = {k.arg: ast.literal_eval(k.value) for k in deco.keywords}.get("ci")
                    marks[f"tests/{path.name}::{node.name}"] = ci
    return marks


def test_each_nightly_only_test_names_a_ci_test_that_exists_and_runs_in_ci() -> None:
    marks = _full_marks()
    assert marks, "no test is marked full: this check would pass on nothing"
    for test, ci in marks.items():
        assert isinstance(ci, str) and "::" in ci, f"{test}: full(ci=...) must name a CI test's node id"
        file, name = ci.split("::", 1)
        assert (TESTS.parent / file).is_file(), f"{test}: {file} does not exist"
        assert f"def {name}(" in (TESTS.parent / file).read_text(encoding="utf-8"), f"{test}: {ci} does not exist"
        assert ci not in marks, f"{test}: {ci} is itself left to the nightly"
