"""Hostile input stays in its box: case ids, backend text, temporary files.

* A case id that would name a path (``../``, ``/``) or a file too long to write is refused where it
  is registered: one line naming the module, exit 2, nothing written anywhere.
* File names made from ids and backend names stay in their directory and never collide.
* A backend's control sequences reach the terminal escaped; results.jsonl keeps them raw.
* A run leaves nothing in the temporary directory, whatever its pairs do (the interrupted and
  killed runs are checked in tests/test_bad_inputs.py's signal tests).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.util.paths import inside, pair_file_name, safe_name
from conformance.util.text import printable
from tests.hostile_backends import CONTROL_MESSAGE
from tests.test_bad_inputs import child_env

#: what a terminal acts on: any of these in the harness's own output lets a backend drive the terminal
TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

BAD_CASES = """
from conformance.api.case import Case, register, resolve

base = resolve("mlp-s-infer")
register(Case({case_id!r}, base.kind, "hostile", 0, base.builder))
"""


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env or child_env())


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("case_id", ["../../escape-up", "nested/dir/case", "x" * 300],
                         ids=["dotdot", "slash", "300-chars"])
def test_a_bad_case_id_is_one_line_naming_its_module_and_writes_nothing(tmp_path: Path, case_id: str) -> None:
    """The run would fail the case (its backend fails everything) and write its repro from the id."""
    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    (work / "hostile_cases.py").write_text(BAD_CASES.format(case_id=case_id))
    before = _files(tmp_path)
    proc = _run("run", "--cases", "hostile_cases.py", "--case", case_id, "--backend",
                "tests.hostile_backends:ControlSequenceBackend", "--no-isolate", "--out", "out", cwd=work)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("conformance: error: --cases hostile_cases.py: case id "), lines[0]
    assert "registered by hostile_cases.py" in lines[0]
    assert _files(tmp_path) == before  # no --out, no repro above it or below it


def test_a_bad_case_id_from_an_entry_point_names_the_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    from conformance.api import case as case_mod

    (tmp_path / "hostile_plugin.py").write_text(BAD_CASES.format(case_id="../../escape-up"))
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = metadata.EntryPoint("hostile", "hostile_plugin", case_mod.ENTRY_POINT_GROUP)
    case_mod.all_cases()  # the installed plugins, once; then only the hostile one is loaded
    monkeypatch.setattr(metadata, "entry_points", lambda group: [ep] if group == case_mod.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(case_mod, "_PLUGINS_LOADED", False)
    with pytest.raises(case_mod.CaseError, match=r"^case plugin hostile \(hostile_plugin\): case id '\.\./\.\./"
                                                  r"escape-up' registered by hostile_plugin: holds '/'"):
        case_mod._load_plugins()


@pytest.mark.parametrize("case_id", ["", ".hidden", "a b", "a@b", "a[1]", "tab\there", "x" * 129, "é"])
def test_register_refuses_ids_outside_the_allowed_set(case_id: str) -> None:
    from conformance.api.case import _REGISTRY, Case, CaseError, register, resolve

    base = resolve("mlp-s-infer")
    assert base is not None
    with pytest.raises(CaseError, match=r"registered by tests\.test_hostile_input: ") as caught:
        register(Case(case_id, base.kind, "hostile", 0, base.builder))
    assert "\n" not in str(caught.value) and case_id not in _REGISTRY


def test_every_registered_id_is_allowed() -> None:
    from conformance.api.case import all_cases, id_problem

    assert [c.id for c in all_cases() if id_problem(c.id) is not None] == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.text(max_size=200))
def test_pair_file_names_stay_in_their_directory_and_never_collide(a: str, b: str) -> None:
    base = Path("/nonexistent/out/repros")
    for text in (a, b):
        name = safe_name(text)
        assert name and "/" not in name and "\0" not in name and not name.startswith(".")
        assert len(name.encode()) <= 200
        assert inside(base, pair_file_name(text, text, ".py")).parent == base
    if a != b:
        assert safe_name(a) != safe_name(b)
        assert pair_file_name(a, "x", ".py") != pair_file_name(b, "x", ".py")
        assert pair_file_name("x", a, ".py") != pair_file_name("x", b, ".py")
    assert pair_file_name(a, b, ".py") != pair_file_name(a + "@" + b, "", ".py") or a + "@" + b == a


def test_safe_names_keep_plain_ids_and_backend_names() -> None:
    for name in ("mlp-s-infer", "gen-dag-1234", "zoo-resnet18-train", "eager", "inductor", "iree", "r2.1+cpu"):
        assert safe_name(name) == name
    assert safe_name("../../escape-up") != safe_name("_.._escape-up")


def test_inside_refuses_a_name_that_leaves_its_directory(tmp_path: Path) -> None:
    for name in ("../x.py", "a/b.py", "..", "/etc/passwd"):
        with pytest.raises(ValueError, match="outside"):
            inside(tmp_path, name)


def test_printable_escapes_every_control_and_keeps_text() -> None:
    assert printable(CONTROL_MESSAGE) == ("\\x1b[2J\\x1b]0;pwned\\x07\\x1b[31mred\\x1b[0m\\x1b[1A\\x1b[2K"
                                          "\\rhidden\\x9b31m\\x08")
    assert printable("résumé → ok [bold]x[/bold]") == "résumé → ok [bold]x[/bold]"
    assert printable("a\nb\x1b", newlines=True) == "a\nb\\x1b"
    assert printable("a\nb") == "a\\nb"
    assert printable("\u202eevil\u2066") == "\\u202eevil\\u2066"


def test_control_sequences_reach_the_terminal_escaped_and_the_temp_dir_stays_empty(tmp_path: Path) -> None:
    """One isolated run: a backend whose errors are control sequences, and one whose worker segfaults on
    one case and passes the other.  Nothing the backends said drives the terminal; a reason keeps the
    message's words, its escape sequences stripped; the temporary directory holds nothing afterwards
    (worker logs, compiler caches)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _run("run", "--backend", "tests.hostile_backends:ControlSequenceBackend",
                "--backend", "tests.planted_crash_backends:SegfaultBackend", "--case", "mlp-s-*",
                "--out", "out", "--no-history", cwd=tmp_path, env=child_env(TMPDIR=str(tmp)))
    assert proc.returncode == 1, proc.stderr
    said = proc.stdout + proc.stderr
    assert TERMINAL_CONTROL.findall(said) == [], [line for line in said.splitlines() if TERMINAL_CONTROL.search(line)]
    # a terminal escape sequence is no word of the message: stripped (issue 57: colour codes cut reasons short)
    assert "RuntimeError: red" in proc.stderr
    assert "crash mlp-s-infer@planted-segfault: worker killed by signal SIGSEGV" in proc.stderr
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    hostile = [r for r in records if r["backend"] == "hostile-control"]
    assert len(hostile) == 2 and all(r["reason"].startswith("RuntimeError: red") for r in hostile)  # its words
    assert sorted(p.name for p in tmp.iterdir()) == []
