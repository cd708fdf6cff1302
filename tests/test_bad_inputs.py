"""Nothing lost, nothing injected: the harness under bad input, interrupts and concurrent runs.

Every bad input below is tried against a workspace holding a real earlier run (results,
junit, report, history) and other files a user may have lying around.  Each asserts the
exit code, the one-line message naming the file or argument, and that every file already
in the workspace is byte-identical afterwards (and that nothing new appeared in it).

Option and file errors are tried in-process through ``conformance.cli.main.main`` (they must
be caught before pytest starts: a guard fails the test if one reaches it); whatever needs
a running session -- pytest's own option errors, an empty selection, a step that returns
None, a second run on a locked directory, SIGTERM / SIGINT / SIGKILL -- runs the real
``conformance run`` in a subprocess.  Signal tests look at the process table afterwards.
The report built from hostile names is loaded in real Chromium: no dialog may fire and no
element may be created from data.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main as cli
from conformance.output.records import read_records
from conformance.run.isolation import WORKER_NAME
from tests.hostile_backends import HANG_CASE, HOSTILE_NAME

REPO = Path(__file__).resolve().parent.parent
HANG_SPEC = "tests.hostile_backends:HangLaterBackend"
HANG_PAIRS = ["--case", "mlp-s-*", "--case", HANG_CASE]  # two quick pairs, then one that never returns

# --------------------------------------------------------------------------- helpers


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes (directories as None) under ``root``; byte-compiled caches aside."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*")) if "__pycache__" not in p.parts
    }


def cli_subprocess(*args: str, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None
                   ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env or child_env())


def child_env(**extra: str) -> dict[str, str]:
    """The test process's environment; the repository importable (tests.*) without running from it."""
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1", **extra}


def assert_one_line(err: str, fragment: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert fragment in lines[0], (fragment, lines[0])


# --------------------------------------------------------------------------- the workspace

MANIFESTS = {  # manifest file -> its content (bytes, or None for a directory)
    "m_nonutf8": b"[[expect]]\ncase = '\xff\xfe'\n",
    "m_dir": None,
    "m_badtoml": b"[[expect]\n",
    "m_noreason": b"[[expect]]\ncase = 'x'\nstatus = 'fail-peak'\n",
    "m_badstatus": b"[[expect]]\ncase = 'x'\nstatus = 'fail-everything'\nreason = 'r'\n",
    "m_unknownkey": b"[[expect]]\ncase = 'x'\nstatus = 'fail-peak'\nreason = 'r'\nowner = 'me'\n",
    "m_notable": b"expect = [1]\n",
    "m_notarray": b"expect = 'x'\n",
    "m_toplevel": b"colour = 'red'\n",
    "m_issue": b"[[expect]]\ncase = 'x'\nstatus = 'fail-peak'\nreason = 'r'\nissue = 3\n",
    "m_nocase": b"[[expect]]\nstatus = 'fail-peak'\nreason = 'r'\n",
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory as a user leaves it: an earlier real run in ``prev/`` and odds and ends."""
    ws = tmp_path_factory.mktemp("workspace")
    earlier = cli_subprocess("run", "--backend", "eager", "--case", "mlp-s-infer", "--out", "prev", "--no-isolate",
                             cwd=ws)
    assert earlier.returncode == 0, earlier.stderr
    assert {"results.jsonl", "junit.xml", "history.sqlite", "report"} <= {p.name for p in (ws / "prev").iterdir()}
    (ws / "afile").write_text("not a directory\n")
    (ws / "notes").mkdir()
    (ws / "notes" / "readme.txt").write_text("unrelated\n")
    (ws / "dirres" / "results.jsonl").mkdir(parents=True)
    (ws / "dirjunit" / "junit.xml").mkdir(parents=True)
    (ws / "histdir").mkdir()
    (ws / "bad.sqlite").write_text("not a database")
    (ws / "loop").symlink_to("loop")  # a symbolic link loop: Path.resolve() raises RuntimeError on it
    with sqlite3.connect(ws / "foreign.sqlite") as db:
        db.execute("CREATE TABLE runs (x INTEGER)")
    _record_files(ws)
    _shards(ws)
    _plugins(ws)
    return ws


def _good_record(ws: Path) -> dict[str, Any]:
    return json.loads((ws / "prev" / "results.jsonl").read_text().splitlines()[0])  # type: ignore[no-any-return]


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode() + b"\n"


def _record_files(ws: Path) -> None:
    good = _good_record(ws)
    (ws / "empty.jsonl").write_bytes(b"")
    (ws / "onlybad.jsonl").write_bytes(b"[1, 2]\n")
    (ws / "truncated-only.jsonl").write_bytes(_line(good)[:40])
    (ws / "garbage.jsonl").write_bytes(b"garbage\n")
    for name, bad in BAD_LINES.items():
        (ws / f"{name}.jsonl").write_bytes(_line(good) + bad(good))


def _without(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != key}


BAD_LINES = {  # file stem -> its second line, made from a good record
    "line-array": lambda r: b"[1, 2]\n",
    "line-memory-string": lambda r: _line({**r, "memory": "x"}),
    "line-not-utf8": lambda r: b'{"case": "\xff"}\n',
    "line-schema-v2": lambda r: _line({**r, "schema_version": 2}),
    "line-unknown-status": lambda r: _line({**r, "status": "passish"}),
    "line-no-case": lambda r: _line(_without(r, "case")),
    "line-truncated": lambda r: _line(r)[:60],
    "line-not-json": lambda r: b"{oops\n",
    "line-nested": lambda r: b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "line-timing-string": lambda r: _line({**r, "timing": {"run_s": "fast"}}),
    "line-peak-markup": lambda r: _line({**r, "memory": {**r["memory"],
                                                         "model_peak_bytes": '"><script>alert(1)</script>'}}),
    "line-blamed-object": lambda r: _line({**r, "memory": {**r["memory"], "blamed": {"producer": "x"}}}),
}


def _shards(ws: Path) -> None:
    good = _good_record(ws)
    junit = (ws / "prev" / "junit.xml").read_bytes()
    for name, case, junit_text in [("s1", "mlp-s-infer", junit), ("s2", "mlp-s-train", junit),
                                   ("badjunit", "mlp-m-infer", b"<testsuite"),
                                   ("htmljunit", "mlp-m-train", b"<html><body/></html>")]:
        (ws / name).mkdir()
        (ws / name / "results.jsonl").write_bytes(_line({**good, "case": case}))
        (ws / name / "junit.xml").write_bytes(junit_text)
    (ws / "s3bad").mkdir()
    (ws / "s3bad" / "results.jsonl").write_bytes(_line({**good, "case": "mlp-l-infer"}) + b"[1]\n")


def _plugins(ws: Path) -> None:
    """Ad hoc adapters importable from the workspace: one per broken manifest, and broken modules."""
    classes = "".join(
        f"class {stem.upper()}(EagerBackend):\n    name = {stem!r}\n"
        f"    manifest_path = Path(__file__).with_name({stem + '.toml'!r})\n\n"
        for stem in MANIFESTS
    )
    (ws / "manifests_plugin.py").write_text(
        "from pathlib import Path\n\nfrom conformance.backends.eager import EagerBackend\n\n\n" + classes)
    for stem, content in MANIFESTS.items():
        if content is None:
            (ws / f"{stem}.toml").mkdir()
        else:
            (ws / f"{stem}.toml").write_bytes(content)
    (ws / "exiting_plugin.py").write_text("raise SystemExit(3)\n")
    (ws / "syntax_plugin.py").write_text("def broken(:\n")


# --------------------------------------------------------------------------- in-process bad inputs

RUN = ["run", "--backend", "eager", "--case", "mlp-s-infer", "--no-isolate"]


def run_with(*args: str, backend: str | None = None, case: str | None = None) -> list[str]:
    argv = list(RUN)
    if backend is not None:
        argv[2] = backend
    if case is not None:
        argv[4] = case
    return [*argv, *args]


@dataclass(frozen=True)
class Bad:
    argv: list[str]
    says: str  # a fragment of the one-line message: what is wrong and with which file or argument
    code: int = 2


BAD_INPUTS: dict[str, Bad] = {
    # --out: where results go
    "out-is-a-file": Bad(run_with("--out", "afile"), "--out afile: exists and is not a directory"),
    "out-under-a-file": Bad(run_with("--out", "afile/sub"), "--out afile/sub: afile is a file, not a directory"),
    "out-under-proc-file": Bad(run_with("--out", "/proc/version/x"), "/proc/version is a file"),
    "out-under-dev-null": Bad(run_with("--out", "/dev/null/x"), "--out /dev/null/x: /dev/null is a file"),
    "out-name-too-long": Bad(run_with("--out", "a" * 300), "File name too long"),
    "out-empty-path": Bad(run_with("--out", ""), "argument --out: an empty path names no file or directory"),
    "report-empty-out": Bad(["report", "prev", "-o", ""], "argument -o/--out/--output: an empty path names no file"),
    "merge-empty-input": Bad(["merge", "", "-o", "{tmp}/m"], "argument DIR: an empty path names no file"),
    "out-holds-results": Bad(run_with("--out", "prev"),
                              "--out prev already holds results; to keep them, give this run its own directory"),
    "out-not-empty": Bad(run_with("--out", "notes"), "--out notes is not empty (readme.txt)"),
    "out-results-is-dir": Bad(run_with("--out", "dirres", "--overwrite"), "dirres/results.jsonl is a directory"),
    "out-junit-is-dir": Bad(run_with("--out", "dirjunit", "--overwrite"), "dirjunit/junit.xml is a directory"),
    "out-symlink-loop": Bad(run_with("--out", "loop/x"), "--out loop/x: loop is a symlink loop"),
    "report-out-symlink-loop": Bad(["report", "prev", "-o", "loop"], "-o loop: loop is a symlink loop"),
    "merge-out-symlink-loop": Bad(["merge", "s1", "s2", "-o", "loop/m"], "-o loop/m: loop is a symlink loop"),
    "history-symlink-loop": Bad(run_with("--out", "new7", "--history", "loop"),
                                "--history loop: loop is a symlink loop"),
    "baseline-empty": Bad(run_with("--out", "new8", "--baseline", "empty.jsonl"),
                          "baseline empty.jsonl: empty.jsonl holds no result records; nothing to compare against"),
    "overwrite-and-resume": Bad(run_with("--out", "prev", "--overwrite", "--resume"),
                                "argument --resume: not allowed with argument --overwrite"),
    # workers, time limits, generated cases
    "workers-negative": Bad(run_with("-n", "-1"), "-n/--workers must be a whole number >= 0"),
    "workers-word": Bad(run_with("-n", "many"),
                        "-n/--workers must be a whole number >= 0, 'auto' or 'logical', got 'many'"),
    "workers-fraction": Bad(run_with("-n", "1.5"), "got '1.5'"),
    "out-nul-byte": Bad(run_with("--out", "a\x00b"), "--out: the value holds a NUL byte"),
    "shard-durations-nul-byte": Bad(run_with("--shard", "1/1", "--shard-durations", "\x00"),
                                    "--shard-durations: the value holds a NUL byte"),
    "timeout-zero": Bad(run_with("--timeout", "0"), "--timeout must be a positive number of seconds, got 0"),
    "timeout-negative": Bad(run_with("--timeout", "-3"), "--timeout must be a positive number"),
    "timeout-nan": Bad(run_with("--timeout", "nan"), "got nan"),
    "timeout-inf": Bad(run_with("--timeout", "inf"), "got inf"),
    "timeout-word": Bad(run_with("--timeout", "soon"), "argument --timeout: invalid float value: 'soon'"),
    "generated-negative": Bad(run_with("--generated", "-1"), "--generated must be >= 0"),
    "generated-huge": Bad(run_with("--generated", "1000000000000"),
                          "--generated must be at most 10000 generated cases per run, got 1000000000000"),
    "generated-word": Bad(run_with("--generated", "some"), "argument --generated: invalid int value: 'some'"),
    "hypothesis-seed-word": Bad(run_with("--hypothesis-seed", "s"), "argument --hypothesis-seed: invalid int value"),
    # sharding
    "shard-zero": Bad(run_with("--shard", "0/3"), "--shard 0/3: need 1 <= I <= N"),
    "shard-past-end": Bad(run_with("--shard", "4/3"), "--shard 4/3: need 1 <= I <= N"),
    "shard-words": Bad(run_with("--shard", "a/b"), "--shard must look like I/N"),
    "shard-of-zero": Bad(run_with("--shard", "1/0"), "--shard 1/0"),
    "shard-dash": Bad(run_with("--shard", "1-3"), "--shard must look like I/N (e.g. 2/3), got '1-3'"),
    "durations-without-shard": Bad(run_with("--shard-durations", "prev"),
                                   "--shard-durations weighs shards: it needs --shard"),
    "durations-missing": Bad(run_with("--shard", "1/2", "--shard-durations", "nowhere"),
                             "--shard-durations: nowhere: not found"),
    "durations-no-results": Bad(run_with("--shard", "1/2", "--shard-durations", "notes"),
                                "--shard-durations: notes/results.jsonl: not found"),
    "durations-garbage": Bad(run_with("--shard", "1/2", "--shard-durations", "garbage.jsonl"),
                             "--shard-durations: garbage.jsonl: no valid result records"),
    # report and history paths
    "report-is-a-file": Bad(run_with("--out", "new1", "--report", "afile"),
                            "--report afile: exists and is not a directory"),
    "report-under-a-file": Bad(run_with("--out", "new2", "--report", "afile/site"),
                               "--report afile/site: afile is a file"),
    "history-is-a-dir": Bad(run_with("--out", "new3", "--history", "histdir"),
                            "--history histdir: is a directory, not an SQLite file"),
    "history-not-sqlite": Bad(run_with("--out", "new4", "--history", "bad.sqlite"),
                              "--history bad.sqlite: not a run history database"),
    "history-foreign-db": Bad(run_with("--out", "new5", "--history", "foreign.sqlite"),
                              "--history foreign.sqlite: not a run history database (its table 'runs' lacks"),
    "history-under-a-file": Bad(run_with("--out", "new6", "--history", "afile/h.sqlite"),
                                "--history afile/h.sqlite: afile is a file"),
    # backends
    "backend-unknown": Bad(run_with(backend="no-such-backend"), "unknown backend 'no-such-backend'"),
    "backend-no-module": Bad(run_with(backend="nosuchmodule:Thing"),
                             "cannot load nosuchmodule:Thing: ModuleNotFoundError"),
    "backend-not-a-backend": Bad(run_with(backend="conformance.api.case:Case"),
                                 "conformance.api.case.Case is not a conformance Backend"),
    "backend-init-raises": Bad(run_with(backend="tests.hostile_backends:RaisingInitBackend"),
                               "RaisingInitBackend() failed: RuntimeError: licence server unreachable"),
    "backend-name-not-str": Bad(run_with(backend="tests.hostile_backends:NonStringNameBackend"),
                                "'name' must be a str"),
    "backend-abstract": Bad(run_with(backend="tests.hostile_backends:AbstractBackend"),
                            "Can't instantiate abstract class"),
    "backend-a-function": Bad(run_with(backend="tests.hostile_backends:not_a_class"),
                              "function is not a conformance Backend"),
    "backend-missing-attr": Bad(run_with(backend="tests.hostile_backends:Nope"),
                                "cannot load tests.hostile_backends:Nope"),
    "backend-colon-only": Bad(run_with(backend=":"), "backend ':': cannot load :"),
    "backend-empty-class": Bad(run_with(backend="tests.hostile_backends:"), "cannot load tests.hostile_backends:"),
    "backend-module-exits": Bad(run_with(backend="exiting_plugin:B"), "cannot load exiting_plugin:B: SystemExit"),
    "backend-syntax-error": Bad(run_with(backend="syntax_plugin:B"), "cannot load syntax_plugin:B: SyntaxError"),
    "backend-empty-name": Bad(run_with(backend=""), "unknown backend ''"),
    "backend-named-empty": Bad(run_with(backend="tests.hostile_backends:EmptyNameBackend"),
                               "'name' must be a str of at least one character, got ''"),
    "backend-name-taken": Bad(run_with(backend="tests.hostile_backends:ImpostorEagerBackend"),
                              "--backend tests.hostile_backends:ImpostorEagerBackend: backend name 'eager' is taken "
                              "by entry point eager (conformance.backends.eager:EagerBackend)"),
    "cases-module-exits": Bad(run_with("--cases", "exiting_plugin.py"),
                              "--cases exiting_plugin.py: it exits when imported (SystemExit(3))"),
    # cases
    "case-unknown": Bad(run_with(case="no-such-case"), "unknown case 'no-such-case'"),
    "case-empty": Bad(run_with(case=""), "unknown case ''"),
    "case-generated-typo": Bad(run_with(case="gen-dag-x"), "unknown case 'gen-dag-x'"),
    # manifests (each through an ad hoc adapter whose manifest_path is the broken file)
    **{f"manifest-{stem[2:]}": Bad(run_with(backend=f"manifests_plugin:{stem.upper()}"), f"{stem}.toml: {says}")
       for stem, says in [
           ("m_nonutf8", "not UTF-8 text"),
           ("m_dir", "is a directory, not a manifest file"),
           ("m_badtoml", "not valid TOML"),
           ("m_noreason", "entry 1 (x): a 'reason' is required"),
           ("m_badstatus", "entry 1 (x): status 'fail-everything' is not one of"),
           ("m_unknownkey", "entry 1: unknown key 'owner'"),
           ("m_notable", "entry 1: must be a table"),
           ("m_notarray", "'expect' must be an array of tables"),
           ("m_toplevel", "unknown top-level key 'colour'"),
           ("m_issue", "entry 1 (x): 'issue' must be a string"),
           ("m_nocase", "entry 1: 'case' (an id or glob) or 'cause' is required"),
       ]},
    # the command line itself
    "no-subcommand": Bad([], "the following arguments are required: command"),
    "unknown-subcommand": Bad(["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
    # list
    "list-what": Bad(["list", "everything"], "argument what: invalid choice: 'everything'"),
    "list-unknown-case": Bad(["list", "cases", "--case", "nomatch"], "unknown case 'nomatch'"),
    "list-unknown-backend": Bad(["list", "backends", "--backend", "nosuch"], "unknown backend 'nosuch'"),
    "list-generated-negative": Bad(["list", "cases", "--generated", "-1"], "--generated must be >= 0"),
    "list-unknown-option": Bad(["list", "cases", "--bogus"], "unrecognized arguments: --bogus"),
    # repro
    "repro-unknown-case": Bad(["repro", "no-such-case", "--backend", "eager"], "unknown case 'no-such-case'"),
    "repro-unknown-backend": Bad(["repro", "gen-dag-1", "--backend", "nosuch", "-o", "{tmp}/r.py"],
                                 "unknown backend 'nosuch'"),
    "repro-out-is-dir": Bad(["repro", "gen-dag-1", "--backend", "eager", "-o", "notes"], "-o notes: is a directory"),
    "repro-out-under-file": Bad(["repro", "gen-dag-1", "--backend", "eager", "-o", "afile/r.py"],
                                "-o afile/r.py: afile: exists and is not a directory"),
    "repro-max-runs-zero": Bad(["repro", "gen-dag-1", "--backend", "eager", "--max-runs", "0"],
                               "--max-runs must be >= 1, got 0"),
    "repro-max-runs-word": Bad(["repro", "gen-dag-1", "--backend", "eager", "--max-runs", "x"],
                               "argument --max-runs: invalid int value: 'x'"),
    "repro-db-is-a-file": Bad(["repro", "gen-dag-1", "--backend", "eager", "--hypothesis-db", "afile"],
                              "--hypothesis-db afile: exists and is not a directory"),
    # report: unusable input or output
    "report-missing": Bad(["report", "nowhere", "-o", "{tmp}/site"], "nowhere: not found (no results.jsonl"),
    "report-results-is-dir": Bad(["report", "dirres", "-o", "{tmp}/site"],
                                 "dirres/results.jsonl: is a directory, not a results.jsonl file"),
    "report-no-results-file": Bad(["report", "notes", "-o", "{tmp}/site"], "notes/results.jsonl: not found"),
    "report-empty-file": Bad(["report", "empty.jsonl", "-o", "{tmp}/site"], "empty.jsonl: no valid result records"),
    "report-only-bad-lines": Bad(["report", "onlybad.jsonl", "-o", "{tmp}/site"],
                                 "onlybad.jsonl: no valid result records (onlybad.jsonl:1: not a results record"),
    "report-only-truncated": Bad(["report", "truncated-only.jsonl", "-o", "{tmp}/site"],
                                 "truncated-only.jsonl: no valid result records (truncated-only.jsonl:1: truncated"),
    "report-out-is-a-file": Bad(["report", "prev", "-o", "afile"], "-o afile: exists and is not a directory"),
    "report-out-under-file": Bad(["report", "prev", "-o", "afile/site"], "-o afile/site: afile is a file"),
    "report-history-dir": Bad(["report", "prev", "-o", "{tmp}/site", "--history", "histdir"],
                              "--history histdir: is a directory"),
    "report-history-not-sqlite": Bad(["report", "prev", "-o", "{tmp}/site", "--history", "bad.sqlite"],
                                     "--history bad.sqlite: not a run history database"),
    "report-history-foreign": Bad(["report", "prev", "-o", "{tmp}/site", "--history", "foreign.sqlite"],
                                  "its table 'runs' lacks"),
    "report-unknown-option": Bad(["report", "prev", "--bogus"], "unrecognized arguments: --bogus"),
    # merge: inputs that cannot be merged, outputs that must not be touched
    "merge-missing-input": Bad(["merge", "nowhere", "-o", "{tmp}/m"], "nowhere: not a results directory (not found)"),
    "merge-no-results": Bad(["merge", "notes", "-o", "{tmp}/m"], "notes/results.jsonl: not found"),
    "merge-results-is-dir": Bad(["merge", "dirres", "-o", "{tmp}/m"], "dirres/results.jsonl: is a directory"),
    "merge-same-pair-twice": Bad(["merge", "s1", "s1", "-o", "{tmp}/m"], "mlp-s-infer@eager is in both s1 and s1"),
    "merge-malformed-junit": Bad(["merge", "s1", "badjunit", "-o", "{tmp}/m"],
                                 "badjunit/junit.xml: not valid junit XML"),
    "merge-html-junit": Bad(["merge", "s1", "htmljunit", "-o", "{tmp}/m"],
                            "htmljunit/junit.xml: not junit XML (root element <html>"),
    "merge-into-an-input": Bad(["merge", "s1", "s2", "-o", "s1"], "-o s1 is one of the inputs"),
    "merge-into-results": Bad(["merge", "s1", "s2", "-o", "prev"], "-o prev already holds results; pass --overwrite"),
    "merge-out-is-a-file": Bad(["merge", "s1", "s2", "-o", "afile"], "-o afile: exists and is not a directory"),
    "merge-out-under-file": Bad(["merge", "s1", "s2", "-o", "afile/m"], "-o afile/m: afile is a file"),
    "merge-no-output": Bad(["merge", "s1", "s2"], "the following arguments are required: -o/--out"),
    # triage: reads only
    "triage-missing-dir": Bad(["triage", "nowhere"], "nowhere: no such results directory or file"),
    "triage-no-results": Bad(["triage", "notes"], "notes/results.jsonl: not found"),
    "triage-results-is-dir": Bad(["triage", "dirres"], "dirres/results.jsonl: is a directory"),
    "triage-only-bad-lines": Bad(["triage", "truncated-only.jsonl"], "truncated-only.jsonl: no valid result records"),
    "triage-history-not-sqlite": Bad(["triage", "prev", "--history", "bad.sqlite"],
                                     "history bad.sqlite: not a run history database"),
    "triage-history-dir": Bad(["triage", "prev", "--history", "histdir"], "history histdir: is a directory"),
    "triage-history-twice": Bad(["triage", "prev", "--history", "h.sqlite", "--no-history"],
                                "--history and --no-history exclude each other"),
    "triage-bad-limit": Bad(["triage", "prev", "--limit", "0"], "--limit 0: must be at least 1"),
}

#: Lines a report or merge skips, naming them, while keeping the file's good records (exit 0).
SKIPPED_LINES: dict[str, str] = {
    "line-array": ":2: not a results record: record: [1, 2] is not of type 'object'",
    "line-memory-string": ":2: not a results record: $.memory: 'x' is not of type 'object'",
    "line-not-utf8": ":2: not UTF-8 text",
    "line-schema-v2": ":2: not a results record: $.schema_version: 1 was expected",
    "line-unknown-status": ":2: not a results record: $.status: 'passish' is not one of",
    "line-no-case": ":2: not a results record: record: 'case' is a required property",
    "line-truncated": ":2: truncated last line (the run writing it was killed?)",
    "line-not-json": ":2: not JSON (Expecting property name enclosed in double quotes",
    "line-nested": ":2: not a results record: nested too deeply",
    "line-timing-string": ":2: not a results record: $.timing.run_s: 'fast' is not of type 'number'",
    "line-peak-markup": ":2: not a results record: $.memory.model_peak_bytes:",
    "line-blamed-object": ":2: not a results record: $.memory.blamed: {'producer': 'x'} is not of type 'array'",
}


def call_cli(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse exits, as the console script would
        return int(exc.code or 0)


def _no_pytest_session(*args: object, **kwargs: object) -> int:
    raise AssertionError("bad input reached the pytest session: it must be refused before")


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    name: str, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = BAD_INPUTS[name]
    monkeypatch.chdir(workspace)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(cli.pytest, "main", _no_pytest_session)
    before = snapshot(workspace)
    code = call_cli([a.replace("{tmp}", str(tmp_path)) for a in bad.argv])
    out, err = capsys.readouterr()
    assert code == bad.code, err
    assert_one_line(err, bad.says)
    assert not out.strip()
    assert snapshot(workspace) == before
    assert not any(tmp_path.iterdir()), "nothing may be written for refused input"


@pytest.mark.parametrize("stem", list(SKIPPED_LINES))
def test_report_names_bad_lines_and_keeps_good_ones(
    stem: str, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workspace)
    before = snapshot(workspace)
    code = call_cli(["report", f"{stem}.jsonl", "-o", str(tmp_path / "site"), "--no-history"])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert_one_line(err, f"warning: {stem}.jsonl{SKIPPED_LINES[stem]}")
    html_text = (tmp_path / "site" / "index.html").read_text()
    assert html_text.count('<td class="cell ') == 1  # the good record, reported
    assert "<script>alert(1)</script>" not in html_text
    assert snapshot(workspace) == before


@pytest.mark.parametrize("stem", list(SKIPPED_LINES))
def test_triage_names_bad_lines_and_keeps_good_ones(
    stem: str, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workspace)
    before = snapshot(workspace)
    code = call_cli(["triage", f"{stem}.jsonl"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert_one_line(err, f"warning: {stem}.jsonl{SKIPPED_LINES[stem]}")
    assert out.startswith("1 pairs, 0 failures in 0 cause group(s)")  # the good record, triaged
    assert snapshot(workspace) == before


def test_merge_names_bad_lines_and_keeps_good_ones(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workspace)
    before = snapshot(workspace)
    code = call_cli(["merge", "s1", "s3bad", "-o", str(tmp_path / "m")])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert_one_line(err, "warning: s3bad/results.jsonl:2: not a results record")
    assert f"(line kept as it is in {tmp_path / 'm' / 'results.jsonl'})" in err
    merged = read_records(tmp_path / "m" / "results.jsonl")
    assert sorted(r.case for r in merged.results) == ["mlp-l-infer", "mlp-s-infer"]
    # the line it cannot read is kept as it was, never deleted (issue 58), and set apart when read again
    assert [f.raw for f in merged.foreign] == [(workspace / "s3bad" / "results.jsonl").read_bytes().splitlines()[1]]
    assert snapshot(workspace) == before


def test_a_failed_merge_leaves_its_output_as_it_was(workspace: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge refused for a malformed junit must not have half-written an earlier merge's files."""
    monkeypatch.chdir(workspace)
    target = tmp_path / "merged"
    assert call_cli(["merge", "s1", "s2", "-o", str(target)]) == 0
    before = snapshot(target)
    assert call_cli(["merge", "s1", "badjunit", "-o", str(target), "--overwrite"]) == 2
    assert snapshot(target) == before


# --------------------------------------------------------------------------- runs in subprocesses


@pytest.fixture
def prev_copy(workspace: Path, tmp_path: Path) -> Path:
    """A private copy of the earlier run, for runs that are allowed to write into it."""
    import shutil

    return Path(shutil.copytree(workspace / "prev", tmp_path / "prev"))


def test_empty_selection_leaves_earlier_results(prev_copy: Path) -> None:
    before = snapshot(prev_copy)
    proc = cli_subprocess("run", "--backend", "eager", "--case", "mlp-s-infer", "--out", str(prev_copy), "--overwrite",
                          "--no-isolate", "-k", "nomatch", cwd=prev_copy.parent)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr,
                    f"no case x backend pair left to run (deselected by -k/-m?); {prev_copy} left as it was")
    assert snapshot(prev_copy) == before


def test_unknown_pytest_option_is_one_line(prev_copy: Path) -> None:
    before = snapshot(prev_copy)
    proc = cli_subprocess("run", "--backend", "eager", "--case", "mlp-s-infer", "--out", str(prev_copy), "--overwrite",
                          "--no-isolate", "--bogus-flag", cwd=prev_copy.parent)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr, "conformance: error: unknown option for 'conformance run': --bogus-flag (see")
    assert snapshot(prev_copy) == before


def test_step_returning_none_still_gets_its_verdict_line(tmp_path: Path) -> None:
    proc = cli_subprocess("run", "--backend", "tests.hostile_backends:NoneStepBackend", "--case", "mlp-s-infer",
                          "--out", "out", "--no-isolate", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    (record,) = read_records(tmp_path / "out" / "results.jsonl").results
    assert record.status == "fail-run"
    assert "harness error in call 0: the step's results: AttributeError" in record.reason
    assert any("Traceback" in note for note in record.notes)  # the stage's traceback is on record
    assert "(1 unexpected)" in proc.stderr and "all as expected" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing written where the run started


# --------------------------------------------------------------------------- signals and the process table


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    cmdline: str
    comm: str = ""  # the name the process gave itself (a forked isolation worker: conformance.run.isolation)


def tagged_processes(tag: str) -> list[Proc]:
    """Live processes whose environment carries ``tag`` (the run and everything it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if tag.encode() not in (entry / "environ").read_bytes():
                continue
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            comm = (entry / "comm").read_text().strip()
        except OSError:  # gone meanwhile, or a zombie
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            found.append(Proc(int(entry.name), int(fields[1]), int(fields[2]), cmdline, comm))
    return found


@dataclass
class HangingRun:
    """A real ``conformance run`` whose third pair hangs in its isolated worker."""

    process: subprocess.Popen[bytes]
    out: Path
    tag: str
    log: Path
    tmp: Path  # the run's TMPDIR: empty again once it has ended, however it ended

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def worker(self) -> Proc:
        workers = [p for p in tagged_processes(self.tag)
                   if "conformance.run.isolation --worker" in p.cmdline or p.comm == WORKER_NAME]  # spawned or forked
        assert len(workers) == 1, workers
        return workers[0]

    def wait_until_hung(self, timeout_s: float = 400) -> None:
        """Until two verdicts are staged and the third pair has been handed to the worker."""
        staged = self.out / "results.jsonl.partial"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.stderr()
            if staged.exists() and staged.read_bytes().count(b"\n") >= 2:
                time.sleep(2)  # the third request is written right after the second verdict
                return
            time.sleep(0.3)
        raise AssertionError(f"the run never reached its hanging pair:\n{self.stderr()}")

    def finish(self, timeout_s: float = 120) -> int:
        return self.process.wait(timeout_s)


def start_hanging_run(tmp_path: Path, *extra: str) -> HangingRun:
    tag = f"CONFORMANCE_TEST_TAG={uuid.uuid4().hex}"
    key, value = tag.split("=")
    log = tmp_path / "run.log"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "conformance.cli", "run", "--backend", HANG_SPEC, *HANG_PAIRS, "--out", "out",
             *extra],
            cwd=tmp_path, stdout=sink, stderr=sink, env=child_env(**{key: value}, TMPDIR=str(tmp)),
            start_new_session=True,  # like a shell job: its own process group, so Ctrl-C can be sent to it
        )
    return HangingRun(process, tmp_path / "out", tag, log, tmp)


def end_hanging_run(run: HangingRun) -> None:
    if run.process.poll() is None:  # a failed assertion: do not leave it behind
        os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait()
    for p in tagged_processes(run.tag):
        os.kill(p.pid, signal.SIGKILL)


@pytest.fixture
def hanging_run(tmp_path: Path) -> Iterator[HangingRun]:
    run = start_hanging_run(tmp_path)
    yield run
    end_hanging_run(run)


def assert_clean_interrupted_run(run: HangingRun, code: int, expected_code: int, signame: str) -> None:
    err = run.stderr()
    assert code == expected_code, err
    assert "interrupted after 2 of 3 pairs" in err and f"({signame})" in err
    assert "all as expected" not in err and "Traceback" not in err
    loaded = read_records(run.out / "results.jsonl")
    assert [r.case for r in loaded.results] == ["mlp-s-infer", "mlp-s-train"] and not loaded.problems
    suites = list(ET.parse(run.out / "junit.xml").getroot().iter("testsuite"))
    assert sum(int(s.get("tests", 0)) for s in suites) == 2
    page = (run.out / "report" / "index.html").read_text()
    assert "interrupted after 2 of 3 pairs" in page and page.count('<td class="cell ') == 2
    left = sorted(p.name for p in run.out.iterdir())
    assert left == ["junit.xml", "report", "results.jsonl"], left  # no lock, no staged file, no history
    deadline = time.monotonic() + 10
    while tagged_processes(run.tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tagged_processes(run.tag) == [], "a process of the run outlived it"
    assert sorted(p.name for p in run.tmp.iterdir()) == []  # no worker log, no compiler cache


def test_sigterm_keeps_verdicts_and_ends_the_hung_worker(hanging_run: HangingRun, tmp_path: Path) -> None:
    hanging_run.wait_until_hung()
    worker = hanging_run.worker()
    assert worker.ppid == hanging_run.process.pid
    assert worker.pgid == worker.pid != hanging_run.process.pid  # its own process group
    # a second run on the same directory meanwhile: refused in one line, the first run untouched
    staged_before = (hanging_run.out / "results.jsonl.partial").read_bytes()
    second = cli_subprocess("run", "--backend", "eager", "--case", "mlp-s-infer", "--out", "out", "--resume",
                            "--no-isolate", cwd=tmp_path)
    assert second.returncode == 2, second.stderr
    assert_one_line(second.stderr, f"--out out: another run (pid {hanging_run.process.pid}) is writing there")
    assert (hanging_run.out / "results.jsonl.partial").read_bytes() == staged_before
    os.kill(hanging_run.process.pid, signal.SIGTERM)
    assert_clean_interrupted_run(hanging_run, hanging_run.finish(), 128 + signal.SIGTERM, "SIGTERM")


def test_ctrl_c_keeps_verdicts_and_resume_runs_only_the_rest(hanging_run: HangingRun, tmp_path: Path) -> None:
    hanging_run.wait_until_hung()
    assert hanging_run.worker().pgid != hanging_run.process.pid  # Ctrl-C to the run's group does not reach it
    os.killpg(hanging_run.process.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    assert_clean_interrupted_run(hanging_run, hanging_run.finish(), 128 + signal.SIGINT, "SIGINT")
    kept = (hanging_run.out / "results.jsonl").read_bytes()
    resumed = cli_subprocess("run", "--backend", HANG_SPEC, *HANG_PAIRS, "--out", "out", "--resume",
                             "--timeout", "3", cwd=tmp_path, env=child_env())
    assert resumed.returncode == 1, resumed.stderr  # the hanging pair now times out: one verdict, unexpected
    assert "conformance: 1 pair (" in resumed.stderr and "2 kept from before" in resumed.stderr
    text = (hanging_run.out / "results.jsonl").read_bytes()
    assert text.startswith(kept)  # the earlier verdicts byte for byte
    assert [r.status for r in read_records(hanging_run.out / "results.jsonl").results] == ["pass", "pass", "timeout"]


@pytest.mark.full(ci="tests/test_bad_inputs.py::test_sigterm_keeps_verdicts_and_ends_the_hung_worker")
def test_sigkill_leaves_verdicts_for_resume_and_no_worker(hanging_run: HangingRun, tmp_path: Path) -> None:
    hanging_run.wait_until_hung()
    hanging_run.worker()
    os.kill(hanging_run.process.pid, signal.SIGKILL)  # no cleanup of its own can run
    assert hanging_run.finish() == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while tagged_processes(hanging_run.tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tagged_processes(hanging_run.tag) == [], "the worker outlived a killed run"
    assert sorted(p.name for p in hanging_run.tmp.iterdir()) == []  # its worker's log had no name to leave
    assert (hanging_run.out / ".conformance.lock").exists()  # left behind, but no longer held by anyone
    before = without_lock(snapshot(hanging_run.out))
    assert read_records(hanging_run.out / "results.jsonl.partial").results  # what it finished is on disk
    refused = cli_subprocess("run", "--backend", HANG_SPEC, *HANG_PAIRS, "--out", "out", cwd=tmp_path)
    assert refused.returncode == 2
    assert_one_line(refused.stderr, "--out out already holds results; to keep them, give this run its own directory")
    assert f"(removed a stale .conformance.lock left in out by pid {hanging_run.process.pid} " in refused.stderr
    assert snapshot(hanging_run.out) == before  # the stale lock was taken and cleared; the verdicts untouched
    resumed = cli_subprocess("run", "--backend", HANG_SPEC, *HANG_PAIRS, "--out", "out", "--resume",
                             "--timeout", "3", cwd=tmp_path)
    assert resumed.returncode == 1, resumed.stderr
    assert [r.status for r in read_records(hanging_run.out / "results.jsonl").results] == ["pass", "pass", "timeout"]
    assert not (hanging_run.out / "results.jsonl.partial").exists()
    assert "stale" not in resumed.stderr  # the refused run above cleared it, and said so


def without_lock(files: dict[str, bytes | None]) -> dict[str, bytes | None]:
    return {name: data for name, data in files.items() if name != ".conformance.lock"}


# --------------------------------------------------------------------------- the last hostile probes (issue 38)
#
# Each driven as a user drives it: the real ``conformance`` command (the console script's launcher) in a
# subprocess, a real symlink loop, a real SIGINT or SIGKILL, a real SQLite file from a newer schema.


def conformance(*args: str, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    """``conformance ARGS`` as the console script runs it (``conformance.cli.launch:main``)."""
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env or child_env())


EAGER_PAIR = ["--backend", "eager", "--case", "mlp-s-infer", "--no-isolate"]


def assert_refused(proc: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr, fragment)
    assert not proc.stdout.strip(), proc.stdout


@pytest.mark.parametrize(("argv", "says"), [
    (["--out", "loop/x"], "--out loop/x: loop is a symlink loop"),
    (["--out", "loop"], "--out loop: loop is a symlink loop"),
    (["--out", "new", "--history", "loop/h.sqlite"], "--history loop/h.sqlite: loop is a symlink loop"),
], ids=["out-below-a-loop", "out-is-a-loop", "history-below-a-loop"])
def test_a_path_through_a_symlink_loop_is_one_line(tmp_path: Path, argv: list[str], says: str) -> None:
    (tmp_path / "loop").symlink_to("other")
    (tmp_path / "other").symlink_to("loop")
    proc = conformance("run", *EAGER_PAIR, *argv, cwd=tmp_path)
    assert_refused(proc, f"conformance: error: {says}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop", "other"]  # nothing written


def test_a_report_into_a_symlink_loop_is_one_line(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop")
    proc = conformance("report", str(workspace / "prev"), "-o", "loop/site", "--no-history", cwd=tmp_path)
    assert_refused(proc, "conformance report: error: -o loop/site: loop is a symlink loop")


def test_a_huge_generated_count_is_refused_at_once(tmp_path: Path) -> None:
    from conformance.run.options import MAX_GENERATED

    started = time.monotonic()
    proc = conformance("run", "--backend", "eager", "--no-isolate", "--generated", "1000000000000", "--out", "out",
                       cwd=tmp_path, timeout=120)
    assert_refused(proc, f"--generated must be at most {MAX_GENERATED} generated cases per run, got 1000000000000")
    assert time.monotonic() - started < 60  # drawing them took minutes before the first line
    assert not any(tmp_path.iterdir())
    listed = conformance("list", "cases", "--generated", str(MAX_GENERATED + 1), cwd=tmp_path, timeout=120)
    assert_refused(listed, f"--generated must be at most {MAX_GENERATED}")


def _impostor_distribution(root: Path) -> None:
    """An installed distribution whose entry point registers another adapter under the name ``eager``."""
    dist = root / "impostor_vendor-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: impostor-vendor\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[conformance.backends]\n"
                                           "zz-impostor = tests.hostile_backends:ImpostorEagerBackend\n")


def test_a_second_backend_under_a_taken_name_is_refused_naming_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The ad hoc impostor is refused in-process (its option is the check); the installed one by the real
    command, whose entry points come from the environment it starts in."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli.pytest, "main", _no_pytest_session)
    code = call_cli(["run", "--backend", "eager", "--backend", "tests.hostile_backends:ImpostorEagerBackend",
                     "--case", "mlp-s-infer", "--no-isolate", "--out", "out"])
    adhoc = subprocess.CompletedProcess([], code, *capsys.readouterr())
    assert_refused(adhoc, "--backend tests.hostile_backends:ImpostorEagerBackend: backend name 'eager' is taken by "
                          "entry point eager (conformance.backends.eager:EagerBackend)")
    assert not any(tmp_path.iterdir())
    site = tmp_path / "site"
    site.mkdir()
    _impostor_distribution(site)
    env = child_env(PYTHONPATH=f"{REPO}{os.pathsep}{site}")
    plugin = conformance("run", *EAGER_PAIR, "--out", "out", cwd=tmp_path, env=env)
    assert_refused(plugin, "backend 'eager' is broken: two backends are named 'eager': entry point eager "
                           "(conformance.backends.eager:EagerBackend) and entry point zz-impostor "
                           "(tests.hostile_backends:ImpostorEagerBackend)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_the_same_adapter_named_twice_is_one_backend() -> None:
    from conformance.api.adapter import discover

    registry = discover()
    eager = registry.get("eager")
    assert registry.get("conformance.backends.eager:EagerBackend") is eager


def test_a_case_module_that_exits_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "exiting_cases.py").write_text("import sys\n\nsys.exit(4)\n")
    proc = conformance("run", "--cases", "exiting_cases.py", *EAGER_PAIR, "--out", "out", cwd=tmp_path)
    assert_refused(proc, "conformance: error: --cases exiting_cases.py: it exits when imported (SystemExit(4))")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exiting_cases.py"]


def test_an_empty_backend_name_is_refused_up_front(workspace: Path, tmp_path: Path) -> None:
    from conformance.output.records import check_record

    proc = conformance("run", "--backend", "tests.hostile_backends:EmptyNameBackend", "--case", "mlp-s-infer",
                       "--no-isolate", "--out", "out", cwd=tmp_path)
    assert_refused(proc, "backend 'tests.hostile_backends:EmptyNameBackend': 'name' must be a str of at least one "
                         "character, got ''")
    assert not any(tmp_path.iterdir())
    # the rule is the results reader's: a record it would refuse is never written
    assert check_record({**_good_record(workspace), "backend": ""}) == "$.backend: '' should be non-empty"


def test_an_adapters_own_keyboard_interrupt_is_its_pairs_verdict(tmp_path: Path) -> None:
    proc = conformance("run", "--backend", "eager", "--backend", "tests.hostile_backends:InterruptingBackend",
                       "--case", "mlp-s-infer", "--no-isolate", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # one unexpected failure: the run went on
    assert "interrupted" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    loaded = read_records(tmp_path / "out" / "results.jsonl")
    verdicts = {r.backend: r for r in loaded.results}
    assert not loaded.problems and sorted(verdicts) == ["eager", "hostile-keyboard-interrupt"]
    assert verdicts["eager"].status == "pass"
    bad = verdicts["hostile-keyboard-interrupt"]
    assert bad.status == "fail-run"
    assert bad.reason.startswith("the backend raised KeyboardInterrupt (vendor runtime aborted the compile) "
                                 "though no SIGINT came"), bad.reason
    assert "fail-run mlp-s-infer@hostile-keyboard-interrupt" in proc.stderr
    assert (tmp_path / "out" / "report" / "index.html").read_text().count('<td class="cell ') == 2


@pytest.mark.full(ci="tests/test_bad_inputs.py::test_ctrl_c_keeps_verdicts_and_resume_runs_only_the_rest")
def test_ctrl_c_still_stops_a_no_isolate_run(tmp_path: Path) -> None:
    """The other side of the line drawn above: a real SIGINT while an in-process pair runs ends the run."""
    run = start_hanging_run(tmp_path, "--no-isolate")
    try:
        run.wait_until_hung()
        os.killpg(run.process.pid, signal.SIGINT)
        assert_clean_interrupted_run(run, run.finish(), 128 + signal.SIGINT, "SIGINT")
    finally:
        end_hanging_run(run)


def _huge(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "memory": {**record["memory"], "measured_peak_bytes": 10**400}}


def test_a_figure_beyond_64_bits_is_a_bad_line_for_report_and_a_refused_baseline(workspace: Path,
                                                                                 tmp_path: Path) -> None:
    from conformance.output.report import fmt_bytes

    good = _good_record(workspace)
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "results.jsonl").write_bytes(_line(good) + _line(_huge(good)))
    report = conformance("report", "mixed", "-o", "site", "--no-history", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert_one_line(report.stderr, "warning: mixed/results.jsonl:2: not a results record: "
                                   "$.memory.measured_peak_bytes: 1000")
    assert "(401 characters) is greater than the maximum of 9223372036854775807" in report.stderr
    assert (tmp_path / "site" / "index.html").read_text().count('<td class="cell ') == 1
    (tmp_path / "huge").mkdir()
    (tmp_path / "huge" / "results.jsonl").write_bytes(_line(_huge(good)))
    run = conformance("run", *EAGER_PAIR, "--out", "out", "--baseline", "huge", "--baseline-tolerance", "5%",
                      cwd=tmp_path)
    assert_refused(run, "conformance: error: baseline huge: huge/results.jsonl:1: not a results record: "
                        "$.memory.measured_peak_bytes: ")
    assert not (tmp_path / "out").exists()
    assert fmt_bytes(10**400) == "1.00e400 B" and fmt_bytes(-(10**400)) == "-1.00e400 B"  # whatever reaches it


def test_an_integer_too_long_to_convert_is_a_bad_line(workspace: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    good = _line(_good_record(workspace))
    long_figure = good.replace(b'"measured_peak_bytes": ', b'"measured_peak_bytes": ' + b"9" * 5000 + b", \"x\": ")
    (tmp_path / "results.jsonl").write_bytes(good + long_figure)
    monkeypatch.chdir(tmp_path)
    assert call_cli(["report", "results.jsonl", "-o", "site", "--no-history"]) == 0
    assert_one_line(capsys.readouterr().err, "results.jsonl:2: not a results record: Exceeds the limit")


@pytest.mark.parametrize(("content", "says"), [
    (b"", "baseline base: base/results.jsonl holds no result records; nothing to compare against"),
    (b"\n\n", "baseline base: base/results.jsonl holds no result records"),
], ids=["empty", "blank-lines"])
def test_an_empty_baseline_is_refused(tmp_path: Path, content: bytes, says: str) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "results.jsonl").write_bytes(content)
    proc = conformance("run", *EAGER_PAIR, "--out", "out", "--baseline", "base", cwd=tmp_path)
    assert_refused(proc, f"conformance: error: {says}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]


def _newer_history(path: Path, column: str) -> None:
    """A history as a newer harness could leave it: the same tables, ``runs`` with one more column."""
    from conformance.output import history

    history.connect(path).close()
    with sqlite3.connect(path) as db:
        db.executescript(f"""
            DROP TABLE runs;
            CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, started_at TEXT NOT NULL,
                               label TEXT NOT NULL DEFAULT '', fingerprint TEXT NOT NULL UNIQUE, {column});
        """)
    db.close()


def test_a_history_from_a_newer_schema_is_refused_up_front(workspace: Path, tmp_path: Path) -> None:
    _newer_history(tmp_path / "newer.sqlite", "machine TEXT NOT NULL")
    before = (tmp_path / "newer.sqlite").read_bytes()
    says = ("--history newer.sqlite: not a run history database (its table 'runs' requires 'machine' "
            "(NOT NULL, no default), which this version does not write")
    report = conformance("report", str(workspace / "prev"), "-o", "site", "--history", "newer.sqlite", cwd=tmp_path)
    assert_refused(report, f"conformance report: error: {says}")
    run = conformance("run", *EAGER_PAIR, "--out", "out", "--history", "newer.sqlite", cwd=tmp_path)
    assert_refused(run, f"conformance: error: {says}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["newer.sqlite"]  # no -o directory, no --out
    assert (tmp_path / "newer.sqlite").read_bytes() == before


def test_a_newer_history_with_a_column_it_can_leave_empty_is_written(workspace: Path, tmp_path: Path) -> None:
    from conformance.output import history

    _newer_history(tmp_path / "newer.sqlite", "machine TEXT")
    with sqlite3.connect(tmp_path / "newer.sqlite") as db:  # and a column in the table each pair's row goes to
        db.execute("ALTER TABLE results ADD COLUMN host TEXT DEFAULT 'ci'")
    db.close()
    report = conformance("report", str(workspace / "prev"), "-o", "site", "--history", "newer.sqlite", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert len(history.runs(tmp_path / "newer.sqlite")) == 1
    with sqlite3.connect(tmp_path / "newer.sqlite") as db:
        assert db.execute("SELECT case_id, host FROM results").fetchall() == [("mlp-s-infer", "ci")]
    db.close()


def _loaded(pid: int, library: str) -> bool:
    try:
        return library in (Path("/proc") / str(pid) / "maps").read_text()
    except OSError:
        return False


def _as_in_the_foreground() -> None:
    """SIGINT's default action, as a command typed at a terminal has it: a test suite started in the
    background (``cmd &`` from a script) hands its children SIGINT ignored, which the command keeps."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("argv", [["list", "backends"], ["run", "--backend", "eager", "--case", "mlp-s-infer",
                                                         "--out", "out"]], ids=["list", "run"])
def test_ctrl_c_while_the_command_imports_is_one_line_exit_130(tmp_path: Path, argv: list[str]) -> None:
    """SIGINT once torch's library is mapped: the command is in the middle of its imports (and a run has
    started its early worker)."""
    tag = f"CONFORMANCE_TEST_TAG={uuid.uuid4().hex}"
    key, value = tag.split("=")
    process = subprocess.Popen([sys.executable, "-m", "conformance", *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=child_env(**{key: value}),
                               preexec_fn=_as_in_the_foreground)
    try:
        deadline = time.monotonic() + 120
        while not _loaded(process.pid, "libtorch") and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process.poll() is None, "the command finished before torch was imported"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGINT, err
    assert err.strip() == "conformance: interrupted" and not out, err
    deadline = time.monotonic() + 10
    while tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tagged_processes(tag) == [], "the early worker outlived the command"
    assert not any(tmp_path.iterdir())


def test_a_stale_lock_from_a_killed_run_is_said_in_one_line(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-m", "conformance", "run", *EAGER_PAIR, "--out", "out"],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env())
    lock = tmp_path / "out" / ".conformance.lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
        assert process.poll() is None
        time.sleep(0.01)
    process.kill()  # SIGKILL: no cleanup of its own runs
    process.wait()
    assert lock.read_text() == str(process.pid)
    proc = conformance("run", *EAGER_PAIR, "--out", "out", "--overwrite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "stale .conformance.lock" in line]
    assert said == [f"warning: removed a stale .conformance.lock left in out by pid {process.pid} "
                    "(a run killed outright)"], proc.stderr
    assert not lock.exists()
    assert [r.status for r in read_records(tmp_path / "out" / "results.jsonl").results] == ["pass"]


# --------------------------------------------------------------------------- hostile names in the report


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of an adapter whose name is markup, then its results poisoned in every other string field."""
    ws = tmp_path_factory.mktemp("hostile")
    proc = cli_subprocess("run", "--backend", "tests.hostile_backends:HostileNameBackend", "--case", "mlp-s-infer",
                          "--case", "mlp-s-train", "--out", "out", "--no-isolate", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert f"│ {HOSTILE_NAME} │" in proc.stderr  # the terminal table shows it as text, Rich markup and all
    records = [json.loads(x) for x in (ws / "out" / "results.jsonl").read_text().splitlines()]
    poisoned = [_poison(r, i) for i, r in enumerate(records)]
    (ws / "out" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in poisoned))
    built = cli_subprocess("report", "out", "-o", "site", cwd=ws)  # recorded in out/history.sqlite: a second run
    assert built.returncode == 0, built.stderr
    return ws / "site" / "index.html"


PAYLOADS = [
    '<img src=x onerror="alert(11)" data-injected="1">',
    '"><svg onload="alert(12)" data-injected="1">',
    "'><script>alert(13)</script><b data-injected='1'>",
    "</script><script>alert(14)</script>",
    '</template><img src=x onerror="alert(15)" data-injected="1">',
]


def _poison(record: dict[str, Any], i: int) -> dict[str, Any]:
    p = PAYLOADS[i % len(PAYLOADS)]
    memory = dict(record["memory"], domain=p, model_source=p, peak_event=p, peak_contract=p,
                  blamed=[{"producer": p, "op": p, "shape": p, "dtype": p, "bytes": p}])
    parity = dict(record["parity"], worst=p, compared=[p], failures=[{"name": p, "note": p}])
    return {**record, "case": f"{record['case']}{p}", "family": p, "reason": p, "notes": [p], "repro": p,
            "repro_file": p, "kind": p, "versions": {p: p}, "timing": {p: 1.0}, "memory": memory, "parity": parity}


def test_hostile_names_render_as_text_in_chromium(hostile_report: Path, browser: Any) -> None:
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(hostile_report.as_uri())
    # the history's pass-rate plot (where an XSS was, as a sparkline) is drawn, the name a series label, as text
    assert page.locator("#plot-pass-rate canvas").count() == 1
    assert page.evaluate("() => window.conformanceCharts.passRate.series[1].label") == HOSTILE_NAME
    assert HOSTILE_NAME in page.inner_text("#plot-pass-rate .u-legend")
    assert page.inner_text("#counts tr[data-backend] th") == HOSTILE_NAME
    cells = page.locator("#matrix td.cell")
    assert cells.count() == 2
    for i in range(cells.count()):  # every detail panel is cloned from its template into the page
        cells.nth(i).dispatch_event("click")  # long hostile strings make the panel overlap the matrix
        page.locator("#detail[data-case] h2 >> nth=0").wait_for()
        assert page.inner_text("#detail-reason") in PAYLOADS
        assert page.locator("[data-injected], #detail script").count() == 0
    page.wait_for_timeout(300)
    assert dialogs == []
    assert page.locator("[data-injected]").count() == 0
    assert page.evaluate("document.scripts.length") == 1  # the report's own script only
    page.close()


def test_the_dialog_and_element_checks_can_fail(browser: Any) -> None:
    """The same payloads, deliberately unescaped, do fire and do create elements: the checks above can see it."""
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.set_content(f"<div>{PAYLOADS[0]}</div><p>{PAYLOADS[1]}</p>")
    page.wait_for_timeout(500)
    assert dialogs and page.locator("[data-injected]").count() == 2
    page.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from tests.test_report import CHROMIUM_ARGS, find_chromium

    exe = find_chromium()
    if exe is None:
        pytest.skip("no chromium binary (apt-get install chromium): the report's browser tests need one")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()
