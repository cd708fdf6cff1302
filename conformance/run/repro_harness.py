"""The harness-based repro script's runner, a module ruff and mypy check.

:mod:`conformance.run.repro` copies this module's text from the marker line below into each
harness-based script, after the settings it writes there.  The names above the marker stand in
for what the script defines; nothing imports this module.
"""

import os
import sys
from typing import Any

CASE_ID = ""
SEED = 0
FAILED_CHECK: str | None = None
FAILED_STATUS = ""
FAILED_STATE: tuple[str, str] | None = None
BACKEND_SPEC = ""
SEARCH_PATH: list[str] = []
CASE_SOURCES = ""
PROGRAM: dict[str, Any] | None = None
TIMEOUT_S = 0.0

# ---- copied into the script from here ----

# ---- the check, run by the harness ------------------------------------------------------
sys.path[:0] = [p for p in SEARCH_PATH if os.path.isdir(p)]  # the harness and the backend's module
if CASE_SOURCES:  # cases registered by --cases sources, beside any the environment names
    os.environ["CONFORMANCE_CASES"] = os.pathsep.join(
        filter(None, [os.environ.get("CONFORMANCE_CASES", ""), CASE_SOURCES]))


def load_case():
    if PROGRAM is None:
        from conformance.api.case import resolve

        case = resolve(CASE_ID)
        if case is None:
            sys.exit(f"unknown case {CASE_ID!r}: is the package that registers it installed?")
        return case
    from conformance.cases import generated

    return generated.case_from_program(generated.Program.from_json(PROGRAM), CASE_ID, SEED)


def verdict(case, backend):
    if FAILED_STATUS in ("crash", "timeout"):  # shown by the harness's isolation worker dying, not this script
        from conformance.run.isolation import run_case_isolated, shutdown

        try:
            return run_case_isolated(case, BACKEND_SPEC, TIMEOUT_S)
        finally:
            shutdown(kill=True)
    from conformance.run.engine import run_case

    return run_case(case, backend)


def main():
    from conformance.api.adapter import discover

    case = load_case()
    backend = discover().get(BACKEND_SPEC)
    result = verdict(case, backend)
    status = str(result.raw_status or result.status)
    print(f"{case.id} on {backend.name}: {status}" + (f": {result.reason}" if result.reason else ""))
    if FAILED_CHECK is None:
        still = status == FAILED_STATUS
        what = f"verdict {FAILED_STATUS}"
    else:
        check = result.check(FAILED_CHECK)
        print(f"check {FAILED_CHECK}: " + (f"{check.status} {check.reason}" if check else "not made"))
        still = check is not None and check.failed
        what = f"check {FAILED_CHECK}"
        if still and FAILED_STATE is not None:  # the same piece of state, on the same call
            call, piece = FAILED_STATE
            failures = (check.figures.get(call) or {}).get("failures") or []
            still = any(f.get("name") == piece for f in failures)
            what = f"check {FAILED_CHECK} ({call}: {piece})"
    if still:
        print(f"FAULT: {what} still fails")
        sys.exit(1)
    print(f"no fault: the {what} no longer fails")


if __name__ == "__main__":
    main()
