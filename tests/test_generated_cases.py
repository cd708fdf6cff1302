"""Generated cases: ids resolve deterministically, and Hypothesis replays a seeded program exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conformance.cases.generated import (
    DEFAULT_COUNT,
    DEFAULT_EARLY,
    Program,
    case_from_id,
    early_cases,
    generated_cases,
    program_for_seed,
    program_source,
    programs,
)
from hypothesis import HealthCheck, Phase, find
from hypothesis import settings as Settings
from hypothesis.database import InMemoryExampleDatabase, choices_to_bytes

from conformance.case import CaseError, resolve, select_cases


def test_default_set_is_fixed_and_registered() -> None:
    ids = [c.id for c in generated_cases(DEFAULT_COUNT, 0)]
    assert len(ids) == DEFAULT_COUNT == len(set(ids))
    assert ids == [c.id for c in generated_cases(DEFAULT_COUNT, 0)]
    assert [c.id for c in select_cases(["gen-dag-*", "gen-loop-*"])] == ids
    early = [c.id for c in early_cases(DEFAULT_EARLY, 0)]
    assert [c.id for c in select_cases(["gen-early-*"])] == early and len(set(early)) == DEFAULT_EARLY
    kinds = {c.kind for c in generated_cases(DEFAULT_COUNT, 0)}
    assert kinds == {"inference", "train_step", "loop"}


def test_unregistered_id_resolves_through_the_hook() -> None:
    (case,) = select_cases(["gen-dag-123456-train"])
    assert case.id == "gen-dag-123456-train" and case.seed == 123456 and case.trains
    assert case.kind == "train_step" and "training" in case.requires
    assert resolve("gen-loop-5").kind == "loop"
    assert case_from_id("mlp-s-infer") is None
    with pytest.raises(CaseError):
        select_cases(["gen-nope-1"])


def test_same_id_same_program_in_another_process() -> None:
    """The id alone fixes the program: no global RNG, no Hypothesis state, no process state."""
    here = program_source(case_from_id("gen-loop-77-train").program)
    code = ("from conformance.cases.generated import case_from_id, program_source;"
            "print(program_source(case_from_id('gen-loop-77-train').program), end='')")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert here == there


def test_built_workload_is_deterministic() -> None:
    a, b = resolve("gen-dag-1234").build(), resolve("gen-dag-1234").build()
    assert all((x == y).all() for x, y in zip(a.inputs, b.inputs))
    for (_, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert (p == q).all()


@pytest.mark.parametrize(("family", "train", "seed"), [("dag", False, 3), ("dag", True, 11), ("loop", True, 7)])
def test_hypothesis_replays_the_seeded_choices(family: str, train: bool, seed: int) -> None:
    """The recorded choice sequence, put in Hypothesis's database, draws the very same program."""
    program, choices = program_for_seed(family, train, seed)
    db = InMemoryExampleDatabase()
    db.save(b"k.secondary", choices_to_bytes(tuple(choices)))
    seen: list[Program] = []

    def first(p: Program) -> bool:
        seen.append(p)
        return True

    settings = Settings(database=db, phases=[Phase.reuse], max_examples=1, suppress_health_check=list(HealthCheck))
    find(programs(family, train), first, settings=settings, database_key=b"k")
    assert seen[0] == program


def test_program_json_round_trip() -> None:
    program = case_from_id("gen-loop-3").program
    assert Program.from_json(program.to_json()) == program
