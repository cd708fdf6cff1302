"""Generated cases: ids resolve deterministically, and Hypothesis replays a seeded program exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, Phase, find
from hypothesis import settings as Settings
from hypothesis.database import InMemoryExampleDatabase, choices_to_bytes

from conformance.api.case import CaseError, resolve, select_cases
from conformance.cases.generated import (
    DAG_VOCAB,
    DEFAULT_COUNT,
    DEFAULT_EARLY,
    FAMILIES,
    OPS,
    Op,
    Program,
    RandomChooser,
    Shape,
    _Choose,
    _Operands,
    case_from_id,
    early_cases,
    generated_cases,
    load_source,
    program_for_seed,
    program_source,
    programs,
)


def test_default_set_is_fixed_and_registered() -> None:
    ids = [c.id for c in generated_cases(DEFAULT_COUNT, 0)]
    assert len(ids) == DEFAULT_COUNT == len(set(ids))
    assert ids == [c.id for c in generated_cases(DEFAULT_COUNT, 0)]
    # the default selection (a glob over the registry would also see what other tests in this process
    # registered: `--generated N` drawn in-process by the option fuzzer adds its programs)
    default = [c.id for c in select_cases([])]
    assert [i for i in default if i.startswith(("gen-dag-", "gen-loop-"))] == ids
    assert set(ids) <= {c.id for c in select_cases(["gen-dag-*", "gen-loop-*"])}
    early = [c.id for c in early_cases(DEFAULT_EARLY, 0)]
    assert [i for i in default if i.startswith("gen-early-")] == early and len(set(early)) == DEFAULT_EARLY
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


def _run_eagerly(program: Program) -> list[Shape]:
    ns = load_source(program_source(program), "<per-kind>")
    with torch.no_grad():
        return [tuple(t.shape) for t in ns["make_model"]()(*ns["make_inputs"]())]


@pytest.mark.parametrize("kind", DAG_VOCAB)
def test_each_kind_emits_the_shapes_it_generates(kind: str) -> None:
    """Generation and emission agree per kind: the emitted torch, run eagerly, makes exactly the
    values (count and shapes) the generator recorded, for many draws of that kind."""
    batch, width = 3, 4  # odd batch: chunk's uneven halves are drawn
    params: tuple[Shape, ...] = ((width, width), (width,))
    # every operand shape some kind needs: (batch, width), (width, width), (width,), (batch, 1), ()
    preamble = (Op("sum", (0,), (1,)), Op("sum_all", (0,)))
    shapes: list[Shape] = [(batch, width), *params, (batch, 1), ()]
    first = 1 + len(params)
    drawn: set[str] = set()
    for seed in range(20):
        generate = OPS[kind].generate
        assert generate is not None
        op, results = generate(_Operands(_Choose(RandomChooser(seed)), shapes, (batch, width)), OPS[kind])
        drawn.add(op.kind)
        program = Program("dag", False, "float32", batch, width, 1, params, (*preamble, op),
                          tuple(range(first, len(shapes) + len(results))))
        assert _run_eagerly(program) == shapes[first:] + list(results), (seed, op)
    assert kind in drawn


def test_every_table_kind_is_drawn_or_placed() -> None:
    """No dead entries: each kind of the table turns up in seeded programs of some family."""
    seeded = [program_for_seed(family, False, seed)[0] for family in FAMILIES for seed in range(100)]
    assert {op.kind for program in seeded for op in (*program.ops, *program.body)} == set(OPS)


@pytest.mark.parametrize("seed", [3, 4])
def test_loop_carry_update_keeps_the_carried_shapes(seed: int) -> None:
    """``blend`` is never drawn, only placed by the loop family: its emission is checked here."""
    program, _ = program_for_seed("loop", False, seed)
    assert sum(op.kind == "blend" for op in program.body) == program.carried
    assert _run_eagerly(program) == [(program.batch, program.width)] * program.carried
