"""Cause signatures: one per behaviour, whatever the seed, the shapes or the buffer numbering.

The program-check tests interpret wrappers written the way inductor writes them (as
tests/test_program.py does) and judge them with the real program check; the end-to-end tests at
the bottom run real inductor on generated ``while_loop`` programs, with and without a planted
fault in its code generation.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from conformance.api.result import MemoryFigures, Result
from conformance.api.verdict import Check, CheckName, Status
from conformance.checks.cause import PARTS_KEY, cause_of, innermost_frame, normalise, op_kind
from conformance.checks.judge import ProbedStep, judge_program
from conformance.models.lifetime import Observation
from conformance.models.program import WrapperProgram, model_program

PREAMBLE = """
import torch
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
async_compile = AsyncCompile()
cpp_fused_zeros_0 = async_compile.cpp_pybinding(['float*'], r'''kernel''')
cpp_fused_lt_1 = async_compile.cpp_pybinding(['float*'], r'''kernel''')
cpp_fused_add_tanh_2 = async_compile.cpp_pybinding(['float*'], r'''kernel''')
async_compile.wait(globals())
del async_compile
"""

#: inductor's host code for ``while_loop`` (torch 2.13): the carry list ``{L}``, the predicate
#: rebound each trip, the initial counter ``{C}`` deleted after the loop.  ``{B}``/``{L}``/``{C}``
#: are buffer numbers, ``{W}`` the carried width: what differs between two seeds' programs.
LOOP = """
def call(args):
    arg0_1, = args
    args.clear()
    buf{C} = empty_strided_cpu((), (), torch.int64)
    cpp_fused_zeros_0(buf{C})
    buf{L} = [None] * 2
    buf{L}[0] = buf{C}
    buf{L}[1] = arg0_1
    (buf{L}_cond_result,) = cond_fn([buf{L}[0], buf{L}[1]])
    should_loop = buf{L}_cond_result
    if not should_loop:
        buf{L}[0] = buf{C}.clone()
        buf{L}[1] = arg0_1.clone()
    while should_loop:
        (buf{L}[0], buf{L}[1]) = body_fn([buf{L}[0], buf{L}[1]])
        (buf{L}_cond_result,) = cond_fn([buf{L}[0], buf{L}[1]])
        should_loop = buf{L}_cond_result
    del arg0_1
    del buf{C}
    buf{B} = buf{L}[1]
    {EXTRA}
    buf{O} = empty_strided_cpu(({W}, {W}), ({W}, 1), torch.float32)
    cpp_fused_add_tanh_2(buf{B}, buf{O})
    return (buf{O}, )

def cond_fn(args):
    i, x = args
    args.clear()
    c = empty_strided_cpu((), (), torch.bool)
    cpp_fused_lt_1(i, c)
    del i
    del x
    return (c, )

def body_fn(args):
    i, x = args
    args.clear()
    j = empty_strided_cpu((), (), torch.int64)
    n = empty_strided_cpu(({W}, {W}), ({W}, 1), torch.float32)
    cpp_fused_add_tanh_2(i, x, j, n)
    del i
    del x
    m = empty_strided_cpu(({W}, {W}), ({W}, 1), torch.float32)
    cpp_fused_add_tanh_2(n, m)
    del n
    return (j, m)
"""


def program_check(source: str, width: int, trips: int) -> Check:
    with FakeTensorMode():
        x = torch.empty(width, width)
    model = model_program(WrapperProgram(PREAMBLE + textwrap.dedent(source)), [x], Observation([trips]))
    step = ProbedStep(2, None, model, model, model)  # type: ignore[arg-type]  # not compared: exact_domain False
    check = judge_program([step], exact_domain=False)
    assert check is not None
    return check


def loop_source(buffers: tuple[int, int, int], width: int, extra: str = "pass") -> str:
    c, lst, b = buffers
    return LOOP.format(C=c, L=lst, B=b, O=b + 1, W=width, EXTRA=extra)


def result_of(check: Check, case: str = "gen-loop-1", peak: int = 1000) -> Result:
    return Result(case, "inductor", check.status, check.reason, checks=[check], excess_bytes=check.excess_bytes,
                  memory=MemoryFigures(model_peak_bytes=peak))


def test_two_programs_differing_in_seed_shapes_and_buffer_numbering_get_one_signature() -> None:
    a = program_check(loop_source((0, 1, 2), 4), 4, trips=3)
    b = program_check(loop_source((7, 12, 19), 8), 8, trips=5)
    ca, cb = cause_of(result_of(a, "gen-loop-663")), cause_of(result_of(b, "gen-loop-9450"))
    assert ca is not None and cb is not None
    assert ca.signature == cb.signature == "program: while-loop-host-code"  # the mechanism, nothing else
    assert a.excess_bytes != b.excess_bytes  # the sizes differ; the cause does not
    words = a.figures[PARTS_KEY]  # the check's own shape-free words for each finding, behind the mechanism
    assert "while_loop buffer held by the carry list across the loop body (assignment from a call to " \
        "container items)" in words
    assert "while_loop bool scalar held by a name across the loop body (rebinding)" in words  # predicate
    assert "while_loop int64 scalar held by a name until after the loop (del)" in words  # the counter
    assert not any(ch.isdigit() for part in ca.parts for ch in part)  # no size, no number


def test_a_different_holder_kind_gets_other_words() -> None:
    """The same late storage held by a plain name, then by a list, then by a result tuple: the check's
    words for it differ (the mechanism recognisers read them)."""
    base = loop_source((0, 1, 2), 4)
    by_name = base.replace("    del buf0\n", "").replace("    return (buf3, )", "    del buf0\n    return (buf3, )")
    by_list = base.replace("    del buf0\n", "    keep = [buf0]\n    del buf0\n").replace(
        "    return (buf3, )", "    del keep\n    return (buf3, )")
    by_tuple = base.replace("    del buf0\n", "    keep = (buf0, )\n    del buf0\n").replace(
        "    return (buf3, )", "    del keep\n    return (buf3, )")
    signatures = set()
    for src in (by_name, by_list, by_tuple):
        signatures.add(tuple(program_check(src, 4, trips=3).figures[PARTS_KEY]))
    assert len(signatures) == 3


def test_a_planted_never_used_buffer_is_one_more_part_beside_the_known_ones() -> None:
    known = cause_of(result_of(program_check(loop_source((0, 1, 2), 4), 4, trips=3)))
    planted_src = loop_source((0, 1, 2), 4, extra="buf9 = empty_strided_cpu((64,), (1,), torch.float32)\n    del buf9")
    planted = cause_of(result_of(program_check(planted_src, 4, trips=3)))
    assert known is not None and planted is not None
    assert set(planted.parts) - set(known.parts) == {"program: buffer allocated and never used"}
    assert set(known.parts) <= set(planted.parts)


def test_each_part_gets_its_share_of_the_excess() -> None:
    check = program_check(loop_source((0, 1, 2), 16), 16, trips=4)
    cause = cause_of(result_of(check))
    assert cause is not None
    shares = dict(cause.shares)
    assert set(shares) == set(cause.parts)
    assert sum(shares.values()) == check.excess_bytes
    carry = ("while_loop buffer held by the carry list across the loop body (assignment from a call to "
             "container items)")
    assert check.figures["cause_excess"][carry] >= 16 * 16 * 4  # a whole carried buffer, held while the next body runs
    planted = program_check(loop_source((0, 1, 2), 16, extra="buf9 = empty_strided_cpu((64,), (1,), torch.float32)"
                                        "\n    del buf9"), 16, trips=4)
    both = cause_of(result_of(planted))
    assert both is not None
    split = dict(both.shares)
    assert split["program: buffer allocated and never used"] == 256  # each mechanism's share, the new one apart
    assert sum(split.values()) == planted.excess_bytes and split["program: while-loop-host-code"] > 16 * 16 * 4
    assert both.parts[0] == "program: while-loop-host-code"  # the primary part: the largest share first


@pytest.mark.parametrize(("a", "b"), [
    ("RuntimeError: shape '[4, 8]' is invalid for input of size 96 at 0x7f3a2b10",
     "RuntimeError: shape '[2, 6, 3]' is invalid for input of size 1000 at 0x55d0c0ffee"),
    ("KeyError: buf12 not found in /tmp/torchinductor_root/ab/cabc123.py",
     "KeyError: buf7 not found in /home/ci/.cache/x/y/z.py"),
    ("AssertionError: add_4 of arg0_1 (float32)", "AssertionError: add_17 of arg3_2 (float32)"),
])
def test_normalised_messages_drop_numbers_paths_addresses_and_generated_names(a: str, b: str) -> None:
    assert normalise(a) == normalise(b)


def test_normalising_keeps_what_names_the_behaviour() -> None:
    assert normalise("float32 vs bfloat16") != normalise("float32 vs float16")
    assert "auto_functionalized_v2" in normalise("'auto_functionalized_v2' not implemented")


@pytest.mark.parametrize(("op", "kind"), [
    ("aten::cat", "cat"), ("aten.cat.default", "cat"), ("torch.ops.aten.addmm.default", "addmm"),
    ("extern_kernels.mm", "mm"), ("cpp_fused_add_tanh_3", "cpp_fused_add_tanh"), (None, "?"),
])
def test_op_kinds(op: Any, kind: str) -> None:
    assert op_kind(op) == kind


TRACEBACK = """Traceback (most recent call last):
  File "/work/x/conformance/run/engine.py", line 133, in run_case
    compiled = backend.compile(case, workload)
  File "/opt/venv/lib/python3.11/site-packages/torch/_inductor/lowering.py", line 4411, in make_fallback
    raise NotImplementedError(f"no lowering for {op}")
NotImplementedError: no lowering for aten.foo_12
"""
FAULTHANDLER = """Fatal Python error: Segmentation fault

Current thread 0x00007f (most recent call first):
  File "/site-packages/iree/compiler/api/ctypes_dl.py", line 212, in _compile
  File "/work/conformance/backends/iree.py", line 99, in compile_one
"""


def test_an_error_cause_is_its_normalised_exception_and_innermost_frame() -> None:
    a = Result("c1", "b", Status.FAIL_COMPILE, "no lowering for aten.foo_12", notes=[TRACEBACK])
    b = Result("c2", "b", Status.FAIL_COMPILE, "no lowering for aten.foo_3",
               notes=[TRACEBACK.replace("foo_12", "foo_3").replace("line 4411", "line 4500")])
    ca, cb = cause_of(a), cause_of(b)
    assert ca is not None and cb is not None and ca.signature == cb.signature
    assert ca.signature == "fail-compile: NotImplementedError: no lowering for aten.foo_N @ make_fallback"
    assert innermost_frame(FAULTHANDLER) == "_compile"
    crash = cause_of(Result("c", "iree", Status.CRASH, "worker killed by signal SIGSEGV (11)", notes=[FAULTHANDLER]))
    assert crash is not None
    assert crash.signature == "crash: worker killed by signal SIGSEGV (N) in _compile"


#: a failure inside a module inductor generated: its file is named by a hash of the program's code
GENERATED = """Traceback (most recent call last):
  File "/work/x/conformance/run/engine.py", line 133, in run_case
    out = compiled.run()
  File "/tmp/torchinductor_root/{d}/{h}.py", line 88, in call
    buf3 = reinterpret_tensor(buf1, (4, 8), (8, 1), 0)
RuntimeError: setStorage: sizes [4, 8] out of bounds for storage of size 16 in {h}.py (kernel {k})
"""


@pytest.mark.parametrize(("first", "second"), [
    (("q3", "cq3xk7vbnzqmgpwzl2d4k5l7mrg3zqv6wbuvxbz3sdkwqf4pyvlmz", "3fa9c2d1e0"),
     ("ab", "cab2zp4gkx7wvnmx3qlq5mj6c7o4bcdx3yfsg2n7cbvz6hh2ohkwl", "77b0e1aa42")),
])
def test_no_cause_carries_a_file_name_or_a_hash(first: tuple[str, str, str], second: tuple[str, str, str]) -> None:
    """The same bug in two generated programs: their modules' hashes and names differ, their cause does not."""
    causes = [cause_of(Result(f"c{i}", "inductor", Status.FAIL_RUN, "setStorage",
                              notes=[GENERATED.format(d=d, h=h, k=k)])) for i, (d, h, k) in enumerate((first, second))]
    assert causes[0] is not None and causes[1] is not None
    assert causes[0].signature == causes[1].signature
    for _d, h, k in (first, second):
        assert h not in causes[0].signature and k not in causes[0].signature
    assert ".py" not in causes[0].signature and "@ call" in causes[0].signature


def test_a_peak_cause_names_no_kernel_or_op() -> None:
    """Blamed buffers no mechanism explains are described by who made them, never by the kernel's or
    op's name: two fused kernels of different names are one part; a buffer no model has is another."""
    def peak(blamed: list[dict[str, Any]]) -> Result:
        check = Check(CheckName.PEAK, Status.FAIL_PEAK, "measured peak over model", {}, blamed, 600)
        return Result("user-model", "inductor", Status.FAIL_PEAK, checks=[check], excess_bytes=600)

    one = cause_of(peak([{"op": "cpp_fused_convolution_0", "bytes": 288, "role": "intermediate"}]))
    two = cause_of(peak([{"op": "cpp_fused_copy_slice_3", "bytes": 3072, "role": "intermediate"}]))
    other = cause_of(peak([{"op": "aten::mul", "bytes": 144, "model_death": "not in model"}]))
    assert one is not None and two is not None and other is not None
    assert one.signature == two.signature == "peak: alive past modelled death: buffer made by a fused kernel"
    assert other.signature == "peak: alive past modelled death: storage the model does not have"


@pytest.mark.parametrize("name", [CheckName.PEAK, CheckName.RESIDUAL])
def test_a_model_above_the_measurement_is_its_own_cause(name: CheckName) -> None:
    """An exact backend measured under its model: the model holds bytes the step never held (a harness fault in
    the model), named as such with its bytes, never as an excess with nothing blamed; one over it still is."""
    from conformance.api.verdict import Contract
    from conformance.checks.cause import MODEL_ABOVE_MEASUREMENT

    def judged(measured: int, model: int) -> Result:
        contract = Contract("measured peak", measured, model, model, "measured == model")
        status = Status.FAIL_PEAK if name == CheckName.PEAK else Status.FAIL_RESIDUAL
        check = Check(name, status, "differs", {}, [], contract.excess_bytes, contract)
        return Result("c", "eager", status, checks=[check], excess_bytes=contract.excess_bytes)

    below, above = cause_of(judged(4096, 4608)), cause_of(judged(4608, 4096))
    assert below is not None and above is not None
    assert below.parts == (f"{name.value}: {MODEL_ABOVE_MEASUREMENT}",)
    assert dict(below.shares) == {below.parts[0]: -512}  # the signed excess: under the model
    assert MODEL_ABOVE_MEASUREMENT not in above.signature and "nothing blamed" in above.signature


def test_a_pass_has_no_cause() -> None:
    assert cause_of(Result("c", "b", Status.PASS)) is None


# --------------------------------------------------------------------------- real inductor, real programs


@pytest.fixture(scope="module")
def inductor_loop_results() -> dict[str, Result]:
    """Three generated while_loop programs (different seeds, shapes, trip counts and buffer numbering)
    on real inductor, with the shipped manifest applied, and one of them again with a planted fault in
    inductor's code generation (the wrapper drops its frees)."""
    from conformance.api.case import select_cases
    from conformance.backends.inductor import InductorBackend
    from conformance.checks.manifest import apply, load_manifest
    from conformance.run.engine import RunOptions, run_case
    from tests.faults import planted

    manifest = load_manifest("inductor")
    options = RunOptions(steps=1)
    cases = {c.id: c for c in select_cases(["gen-loop-7808", "gen-loop-3435", "reg-loop-carried-t2"])}
    out = {case: apply(run_case(c, InductorBackend(), options), manifest) for case, c in cases.items()}
    faulty = run_case(cases["gen-loop-7808"], planted(InductorBackend, "inductor-dropped-free")(), options)
    faulty.backend = "inductor"  # judged against inductor's manifest: the fault is the only difference
    out["planted"] = apply(faulty, manifest)
    return out


def test_real_inductor_loops_share_one_known_cause(inductor_loop_results: dict[str, Result]) -> None:
    clean = [inductor_loop_results[c] for c in ("gen-loop-7808", "gen-loop-3435", "reg-loop-carried-t2")]
    assert len({r.cause for r in clean}) == 1, [r.cause for r in clean]
    assert len({r.excess_bytes for r in clean}) == 3  # three sizes, one cause
    assert {r.cause for r in clean} == {"program: while-loop-host-code"}
    for r in clean:
        assert r.status == Status.XFAIL and r.reason.startswith("expected cause (while-loop-host-code"), r.reason


def test_a_planted_codegen_fault_is_a_new_cause_beside_the_known_ones(
        inductor_loop_results: dict[str, Result]) -> None:
    known, planted_r = inductor_loop_results["gen-loop-7808"], inductor_loop_results["planted"]
    assert planted_r.status == Status.FAIL_PEAK, planted_r.reason
    assert planted_r.new_cause_parts, planted_r.cause
    assert set(planted_r.new_cause_parts).isdisjoint(known.cause_parts)
    assert planted_r.reason.startswith("new cause beside")
    from conformance.output.triage import triage

    top = triage(list(inductor_loop_results.values())).groups[0]
    assert top.results == [planted_r] and top.new_parts


@pytest.mark.parametrize(("line", "kept", "gone"), [
    # a vendor's words with a slash are its words; the model's temporary file is a path
    ("RuntimeError: ONNX export/session failed: [ONNXRuntimeError] : 1 : FAIL : Load model from "
     "/tmp/tmpk2j3x/model.onnx failed", "ONNX export/session failed", "/tmp/tmpk2j3x"),
    ("Exception from src/inference/src/cpp/core.cpp:109: Check 'shape_size(x) > 0' failed at "
     "src/core/src/node.cpp:123", "Check 'shape_size(x) > N' failed at <path>:N", "core.cpp"),
    ("ValueError: expected NCHW/NHWC input/output layouts in C:\\Users\\ci\\AppData\\model.xml",
     "expected NCHW/NHWC input/output layouts in <path>", "AppData"),
    ("error: see ~/.cache/iree/x.mlir and ../build/y and ./z", "see <path> and <path> and <path>", "iree"),
])
def test_causes_keep_the_vendors_words_and_replace_only_real_paths(line: str, kept: str, gone: str) -> None:
    said = normalise(line)
    assert kept in said and gone not in said


def test_causes_read_a_coloured_message_as_its_words() -> None:
    plain = "RuntimeError: 'tensor.cast' op operand type and result type are cast incompatible"
    coloured = ("RuntimeError: \x1b[1m\x1b[31m'tensor.cast' op\x1b[0m operand type and result type are cast "
                "\x1b[Kincompatible")
    assert normalise(coloured) == normalise(plain)
