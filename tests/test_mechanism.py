"""Causes by mechanism: a known backend behaviour on a program nobody here wrote is the known cause.

The real-inductor tests run a user's own two-convolution model, under an id no manifest entry
names, once clean and once with a planted fault (a scratch buffer the step keeps for its call):
the clean run is inductor's layout copy and ``xfail``; the fault is evidence of no known
mechanism and fails as a new cause.  The recogniser and triage tests use records made by hand
in the shape the engine writes them (statements as the program model labels them).
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from conformance.api.result import MemoryFigures, Result
from conformance.api.verdict import Check, CheckName, Status
from conformance.checks.cause import PARTS_KEY, SHARES_KEY, cause_of, fill_cause, program_part, program_part_facts
from conformance.checks.facts import (
    CallTransients,
    ResultPack,
    SharedResultBuffer,
    program_buffer_fields,
    release_fields,
    runtime_fields,
)
from conformance.checks.manifest import Manifest, ManifestError, apply, load_manifest
from conformance.checks.mechanism import (
    GRAPH_BREAK_NOTE,
    NAMES,
    Evidence,
    Program,
    aten_op_no_lowering,
    channels_last,
    extern_kernel_workspace,
    fused_kernel_outputs,
    graph_breaks_of,
    held_in_program,
    layout_copy,
    lowering_transients,
    mechanism_of,
    recognise,
    result_tuple_held,
    split_values_over_model,
    unused_saved_tensor,
    while_loop_host_code,
)
from conformance.output.triage import render_text, triage

USER_CASE = "my-own-convnet-infer"


class UserConvNet(nn.Module):
    """A user's model: a convolution, a ReLU and a 1x1 convolution head (the output is a convolution's)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)))


@pytest.fixture(scope="module")
def user_runs() -> dict[str, Result]:
    """The user's model on real inductor (raw verdicts, no manifest applied), clean and with a planted
    scratch buffer held across the compiled call."""
    from conformance.api.case import Case, Workload
    from conformance.backends.inductor import InductorBackend
    from conformance.run.engine import RunOptions, run_case
    from tests.faults import planted

    case = Case(USER_CASE, "inference", "mine", 0, lambda seed: Workload(UserConvNet(), (torch.randn(2, 3, 6, 6),)))
    options = RunOptions(steps=1)
    clean = run_case(case, InductorBackend(), options)
    faulty = run_case(case, planted(InductorBackend, "scratch-buffer")(), options)
    faulty.backend = "inductor"  # judged against inductor's manifest: the fault is the only difference
    return {"clean": clean, "planted": faulty}


def test_a_users_own_convnet_is_the_known_layout_copy(user_runs: dict[str, Result]) -> None:
    manifest = load_manifest("inductor")
    assert manifest.lookup(USER_CASE) is None  # no entry names this case
    r = apply(copy.deepcopy(user_runs["clean"]), manifest)
    assert r.raw_status == Status.FAIL_PEAK, r.reason
    assert r.status == Status.XFAIL, r.reason
    assert r.cause_parts == ["peak: layout-copy"] and r.new_cause_parts == []
    assert r.reason.startswith("expected cause (layout-copy: ") and "channels-last" in r.reason
    # without the mechanism entry the same record is an unexpected failure with a new cause
    bare = Manifest("inductor", None, [e for e in manifest.entries if e.mechanism != "layout-copy"])
    unexpected = apply(copy.deepcopy(user_runs["clean"]), bare)
    assert unexpected.status == Status.FAIL_PEAK and unexpected.new_cause_parts == ["peak: layout-copy"]


def test_growth_beyond_the_mechanisms_bound_still_fails(user_runs: dict[str, Result]) -> None:
    """The layout copy's bound is the bytes of the layout copies the generated program makes (its channels-last
    buffers and the row-major copies of them), read from the program: the measured excess is within it, and one
    byte planted beyond it fails."""
    grown = copy.deepcopy(user_runs["clean"])
    cause = cause_of(grown)
    assert cause is not None and grown.excess_bytes is not None
    bound = cause.evidence_bound("peak: layout-copy")
    assert bound is not None and 0 < grown.excess_bytes <= bound, (grown.excess_bytes, bound)
    peak = next(c for c in grown.checks if c.name == CheckName.PEAK)
    grown.excess_bytes = peak.excess_bytes = bound + 1
    r = apply(grown, load_manifest("inductor"))
    assert r.status == Status.FAIL_PEAK and not r.ok
    assert r.reason.startswith("known cause beyond its bound: 'peak: layout-copy'"), r.reason


def test_evidence_of_no_known_mechanism_stays_unexpected(user_runs: dict[str, Result]) -> None:
    r = apply(copy.deepcopy(user_runs["planted"]), load_manifest("inductor"))
    assert r.status == Status.FAIL_PEAK and not r.ok, r.reason
    assert r.new_cause_parts == r.cause_parts and not any(mechanism_of(p) for p in r.cause_parts), r.cause_parts
    assert r.expected is None  # no entry expected it
    assert not any(ch.isdigit() for p in r.cause_parts for ch in p)  # no size, no kernel number


# --------------------------------------------------------------------------- records made by hand


def _peak_record(case: str, statements: list[str], blamed: list[dict[str, Any]], excess: int, peak: int = 4096,
                 **extra: Any) -> Result:
    check = Check(CheckName.PEAK, Status.FAIL_PEAK, "measured peak over model", {"model_source": "received-graphs"},
                  blamed, excess)
    memory = MemoryFigures(model_peak_bytes=peak, model_source="received-graphs",
                           program_timeline=[(s, 0) for s in statements], **extra)
    return Result(case, "inductor", Status.FAIL_PEAK, checks=[check], excess_bytes=excess, memory=memory)


def _made(name: str, statement: str, op: str, nbytes: int, role: str = "intermediate") -> dict[str, Any]:
    return {"bytes": nbytes, "measured_op": "(outside any operator)", **program_buffer_fields(name, statement),
            "op": op, "role": role, "model": "generated program"}


def _fused(case: str, kernel: str, n: int, width: int) -> Result:
    """A fused kernel ``kernel`` writing ``n`` buffers of ``width`` floats, all allocated before it runs."""
    allocs = [f"fw:line {10 + i} buf{i} = empty_strided_cpu(({width}, ), (1, ), torch.float32)" for i in range(n)]
    call = f"fw:line {10 + n} {kernel}(arg0_1, {', '.join(f'buf{i}' for i in range(n))})"
    program = ["fw:line 8 arg0_1, = args", "fw:line 9 args.clear()", *allocs, call, "fw:line 30 return (buf0, )"]
    last = n - 1 if n < 2 else 1
    return _peak_record(case, program, [_made(f"buf{last}", allocs[last], kernel, width * 4)], width * 4)


def _layout(case: str, kernel: str, shape: tuple[int, int, int, int], copy: str = "") -> Result:
    """A convolution's channels-last result ``buf1`` copied row-major into ``buf2`` for the caller; ``copy``: the
    copy's shape and strides instead (an unbatched convolution's result is copied out squeezed)."""
    n, c, h, w = shape
    cl = f"({c * h * w}, 1, {w * c}, {c})"
    rm = f"({c * h * w}, {h * w}, {w}, 1)"
    program = [
        f"fw:line 10 buf0 = empty_strided_cpu(({n}, {c}, {h}, {w}), {cl}, torch.float32)",
        "fw:line 11 cpp_fused_convolution_0(arg2_1, buf0)",
        "fw:line 12 buf1 = extern_kernels.convolution(buf0, arg0_1, arg1_1, stride=(1, 1), …",
        f"fw:line 13 assert_size_stride(buf1, ({n}, {c}, {h}, {w}), {cl}, 'torch.ops.aten…",
        f"fw:line 14 buf2 = empty_strided_cpu({copy or f'({n}, {c}, {h}, {w}), {rm}'}, torch.float32)",
        f"fw:line 15 {kernel}(buf1, buf2)",
        "fw:line 16 return (buf2, )",
    ]
    nbytes = n * c * h * w * 4
    return _peak_record(case, program, [_made("buf2", program[4], kernel, nbytes, "output")], nbytes, peak=nbytes)


def _small_output_conv(copies: int = 1) -> Result:
    """module_db's Conv2d on inductor: a 2x4x3x4 input and a 5x4x3x3 weight copied channels-last
    (``copies`` times each) for an output of 2x5x1x2 floats: the model's peak (80 B) is the output."""
    program = ["fw:line 140 primals_1, primals_2, primals_3 = args",
               "fw:line 142 assert_size_stride(primals_1, (5, 4, 3, 3), (36, 9, 3, 1), 'input')",
               "fw:line 143 assert_size_stride(primals_2, (5, ), (1, ), 'input')",
               "fw:line 144 assert_size_stride(primals_3, (2, 4, 3, 4), (48, 12, 4, 1), 'input')"]
    blamed = []
    for k in range(copies):
        x, w = f"fw:line {150 + 4 * k} buf{2 * k} = empty_strided_cpu((2, 4, 3, 4), (48, 1, 16, 4), torch.float32)", \
            f"fw:line {151 + 4 * k} buf{2 * k + 1} = empty_strided_cpu((5, 4, 3, 3), (36, 1, 12, 4), torch.float32)"
        program += [x, w, f"fw:line {152 + 4 * k} cpp_fused_convolution_{k}(primals_3, primals_1, buf{2 * k}, …"]
        blamed += [{**_made(f"buf{2 * k}", x, "cpp_fused_convolution", 384), "dtype": "float32"},
                   {**_made(f"buf{2 * k + 1}", w, "cpp_fused_convolution", 720), "dtype": "float32"}]
    program += ["fw:line 170 buf9 = extern_kernels.convolution(buf0, buf1, primals_2, stride=(1, 1), …",
                "fw:line 171 return (buf9, )"]
    return _peak_record("moddb-Conv2d-0-infer", program, blamed, 1104 * copies, peak=80)


def test_an_unbatched_convolutions_result_copied_out_squeezed_is_the_layout_copy() -> None:
    """conv_transpose2d on a 3-D input (later samples): the channels-last 1x4x22x22 result is copied into a
    row-major 4x22x22 buffer for the caller, both alive; the same shape but for the batch of one.  A copy of
    another shape (the rows and columns swapped) is not a layout copy."""
    squeezed = _layout("op-conv-3-infer", "cpp_fused_squeeze_1", (1, 4, 22, 20), "(4, 22, 20), (440, 20, 1)")
    cause = cause_of(squeezed)
    assert cause is not None and cause.parts == ("peak: layout-copy",), cause
    swapped = _layout("op-conv-3-infer", "cpp_fused_permute_1", (1, 4, 22, 20), "(4, 20, 22), (440, 22, 1)")
    cause = cause_of(swapped)
    assert cause is not None and "peak: layout-copy" not in cause.parts, cause


def test_a_layout_copy_is_bounded_by_the_copies_its_program_makes_not_the_model_peak(tmp_path: Path) -> None:
    """A convolution whose output is small beside its input and weight copies more than the model's peak holds: the
    layout-copy bound is the bytes of the channels-last buffers the generated program allocates (384 B of input and
    720 B of weight here, its graph inputs not counted), so the entry gives no bound; each copy the program makes
    counts, and bytes the program's copies do not account for fail."""
    path = tmp_path / "inductor.toml"  # the shipped entry: no bound of its own
    path.write_text('[[expect]]\nmechanism = "layout-copy"\nstatus = "fail-peak"\nreason = "r"\n')
    manifest = load_manifest("inductor", path)
    once = apply(_small_output_conv(), manifest)
    assert once.status == Status.XFAIL and "layout-copy" in once.reason, once.reason
    cause = cause_of(_small_output_conv())
    assert cause is not None and cause.evidence_bound("peak: layout-copy") == 384 + 720
    twice = cause_of(_small_output_conv(copies=2))  # a program that copies each twice names twice the bytes
    assert twice is not None and twice.evidence_bound("peak: layout-copy") == 2 * (384 + 720)
    planted = _small_output_conv()
    peak = next(c for c in planted.checks if c.name == CheckName.PEAK)
    planted.excess_bytes = peak.excess_bytes = 384 + 720 + 4  # 4 B no copy in the program accounts for
    beyond = apply(planted, manifest)
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason


def test_fused_kernel_outputs_is_bounded_by_the_bytes_allocated_together() -> None:
    """Fusion can put over the model at most the buffers it allocates together (the graphs' schedule held none
    of them at its peak); the model's peak does not widen that, and a byte more is beyond it."""
    manifest = load_manifest("inductor")
    together = 4 * 27 * 4  # four buffers of 27 floats
    for peak in (64, 1 << 20):
        within = _fused("user-pad-infer", "cpp_fused_copy_slice_0", 4, 27)
        beyond = _fused("user-pad-infer", "cpp_fused_copy_slice_0", 4, 27)
        for r, excess in ((within, together), (beyond, together + 1)):
            assert r.memory is not None
            r.memory.model_peak_bytes = peak
            check = next(c for c in r.checks if c.name == CheckName.PEAK)
            r.excess_bytes = check.excess_bytes = excess
            check.blamed[0]["bytes"] = excess
        assert apply(within, manifest).status == Status.XFAIL, within.reason
        r = apply(beyond, manifest)
        assert r.status == Status.FAIL_PEAK and f"> {together} B" in r.reason, r.reason


def test_triage_groups_different_fused_kernels_as_one_mechanism() -> None:
    records = [_fused("gen-dag-101", "cpp_fused_amax_expand_relu_3", 2, 8),
               _fused("gen-dag-202", "cpp_fused_copy_slice_0", 4, 27),
               _fused("user-pad-infer", "cpp_fused_cat_constant_pad_nd_1", 3, 5),
               _layout("user-conv-infer", "cpp_fused_convolution_1", (2, 6, 8, 8)),
               _layout("user-deconv-infer", "cpp_fused_convolution_relu_2", (1, 3, 17, 17))]
    t = triage(records, fill=fill_cause)
    groups = {g.signature: sorted(r.case for r in g.results) for g in t.groups}
    assert groups == {"fused-kernel-outputs": ["gen-dag-101", "gen-dag-202", "user-pad-infer"],
                      "layout-copy": ["user-conv-infer", "user-deconv-infer"]}
    text = "\n".join(render_text(t))
    assert "2 cause group(s)" in text and "cpp_fused" not in text.split("cases:")[0]


def test_triage_regroups_records_written_before_mechanisms() -> None:
    """A record whose cause names a kernel (written before causes named mechanisms) is judged again."""
    old = [_fused("gen-dag-1", "cpp_fused_a_0", 2, 8), _fused("gen-dag-2", "cpp_fused_b_1", 2, 8)]
    for r, kernel in zip(old, ("cpp_fused_a", "cpp_fused_b")):
        r.cause = r.cause_parts[0] if r.cause_parts else f"peak: alive past modelled death: {kernel}"
        r.cause_parts = [r.cause]
    assert len({r.cause for r in old}) == 2
    assert [g.signature for g in triage(old, fill=fill_cause).groups] == ["fused-kernel-outputs"]


def test_a_new_part_is_grouped_apart_from_a_known_primary_part() -> None:
    known = _fused("gen-dag-1", "cpp_fused_a_0", 2, 8)
    news = _fused("gen-dag-2", "cpp_fused_b_0", 2, 8)
    for r in (known, news):
        fill_cause(r)
    news.new_cause_parts = ["peak: alive past modelled death: storage the model does not have"]
    t = triage([known, news])
    assert [g.signature for g in t.groups] == [news.new_cause_parts[0], "fused-kernel-outputs"]


def test_one_mechanism_found_by_two_checks_is_one_group() -> None:
    """IREE's packed result buffer decides through the watch on one pair and through the peak on another."""
    watch = Check(CheckName.BACKWARD_INPUTS, Status.FAIL_PEAK, "late", {"verdict": "released-late"}, [], 24)
    peak = Check(CheckName.PEAK, Status.FAIL_PEAK, "over", {}, [], 144)
    records = [Result("mlp-l-train", "iree-boxed", Status.FAIL_PEAK, checks=[watch], excess_bytes=24),
               Result("mlp-s-train", "iree-boxed", Status.FAIL_PEAK, checks=[peak], excess_bytes=144,
                      memory=MemoryFigures(findings={"backward_inputs": "released-late"}))]
    (group,) = triage(records, fill=fill_cause).groups
    assert group.signature == "result-buffer-packing" and group.count == 2
    assert set(group.parts) == {"backward-inputs: result-buffer-packing", "peak: result-buffer-packing"}


# --------------------------------------------------------------------------- the recognisers


def test_channels_last_is_a_dense_permuted_layout() -> None:
    assert channels_last((2, 4, 8, 8), (256, 1, 32, 4))
    assert channels_last((6, 4, 3, 3), (36, 1, 12, 4))
    assert not channels_last((2, 4, 8, 8), (256, 64, 8, 1))  # row-major
    assert not channels_last((2, 1, 8, 8), (64, 64, 8, 1))  # a size-1 dimension has no order
    assert not channels_last((2, 4, 8, 8), (512, 1, 64, 8))  # a strided view, not a layout
    assert not channels_last((8,), (1,))
    assert not channels_last((4, 8), (1, 4))  # a column-major matrix (an mm's layout), not a convolution's
    assert channels_last((2, 4, 5), (20, 1, 4))  # a 1-d convolution's channels-last


def _ev(source: str, finding: dict[str, Any], statements: list[str] = (), part: str = "") -> Evidence:  # type: ignore[assignment]
    return Evidence(source, part, finding, Program.from_events(list(statements)))


LOOP_PROGRAM = ["fw:line 5 buf0 = empty_strided_cpu((), (), torch.int64)", "fw:line 7 should_loop = buf1_cond_result",
                "fw:line 9 [trip 0] (buf1[0], buf1[1]) = while_loop_body_graph_0(while_loop_body_graph_0_ar…",
                "fw:line 12 del buf0", "fw:line 14 return (buf3, )"]


def test_while_loop_host_code_is_its_statements_not_any_late_name_in_a_loop_program() -> None:
    counter = {"finding": "late", "shape": [], "held_in": "name", "held_by": "buf0", "in_loop": True,
               "last_use": "fw:while_loop_body_graph_0#1:142 cpp_fused_add_0(while_loop_body_graph_0_arg1_1, …",
               "freed_after": "fw:line 12 del buf0"}
    assert while_loop_host_code(_ev("program", counter, LOOP_PROGRAM))
    dropped_free = {**counter, "freed_after": "fw:line 14 return (buf3, )"}  # the same counter, its del dropped
    assert while_loop_host_code(_ev("program", dropped_free, LOOP_PROGRAM)) is None
    predicate = {"finding": "late", "shape": [], "held_in": "name", "held_by": "buf1_cond_result, should_loop",
                 "in_loop": True, "freed_after": "fw:line 7 [trip 1] should_loop = buf1_cond_result"}
    assert while_loop_host_code(_ev("program", predicate, LOOP_PROGRAM))
    assert while_loop_host_code(_ev("program", counter, [s for s in LOOP_PROGRAM if "trip" not in s
                                                         and "should_loop" not in s])) is None  # no host loop


#: A loop that runs no trip (inductor's wrapper, gen-loop-725 of seed 90731): the counter's initial
#: value goes into the carry list, the condition reads it once, and its name is deleted after the loop.
NO_TRIP_PROGRAM = [
    "fw:line 161 buf0 = empty_strided_cpu((), (), torch.int64)", "fw:line 167 cpp_fused_zeros_0(buf0)",
    "fw:line 168 buf1 = [None] * 2", "fw:line 169 buf1[0] = buf0", "fw:line 170 buf1[1] = arg0_1",
    "fw:while_loop_cond_graph_0#1:83 cpp_fused_lt_zeros_1(while_loop_cond_graph_0_arg0_1, while_loop_cond_gr…",
    "fw:line 174 (buf1_cond_result,) = while_loop_cond_graph_0(while_loop_cond_graph_0_a…",
    "fw:line 175 should_loop = buf1_cond_result", "fw:line 177 buf1[0] = buf0.clone()",
    "fw:line 189 del arg0_1", "fw:line 194 del buf0", "fw:line 195 buf3 = buf1[1]", "fw:line 198 return (buf3, )"]


def test_an_initial_carry_deleted_after_a_loop_that_runs_no_trip_is_the_host_loop() -> None:
    held = {"producer": "fw:buf0", "finding": "late", "shape": [], "held_in": "name", "held_by": "buf0",
            "in_loop": False, "freed_after": "fw:line 194 del buf0",
            "last_use": "fw:while_loop_cond_graph_0#1:83 cpp_fused_lt_zeros_1(while_loop_cond_graph_0_arg0_1, …"}
    assert "initial carry" in str(while_loop_host_code(_ev("program", held, NO_TRIP_PROGRAM)))
    # the same name released at the return (its del dropped), or a name never put in the carry list: not this
    assert while_loop_host_code(_ev("program", {**held, "freed_after": "fw:line 198 return (buf3, )"},
                                    NO_TRIP_PROGRAM)) is None
    other = [s.replace("buf1[0] = buf0", "buf1[0] = buf2") for s in NO_TRIP_PROGRAM]
    assert while_loop_host_code(_ev("program", held, other)) is None
    # deleted before the loop ends: not held across it
    early = [s for s in NO_TRIP_PROGRAM if "del buf0" not in s]
    early.insert(early.index("fw:line 170 buf1[1] = arg0_1") + 1, "fw:line 171 del buf0")
    assert while_loop_host_code(_ev("program", {**held, "freed_after": "fw:line 171 del buf0"}, early)) is None


#: A convolution's backward on inductor (module_db's Conv2d training step): the extern
#: convolution_backward's weight gradient is taken by ``buf3 = buf2[1]`` and asserted channels-last.
CONV_BACKWARD = [
    "bw:line 96 primals_1, primals_3, convolution, tangents_1 = args",
    "bw:line 100 buf1 = empty_strided_cpu((2, 5, 1, 2), (10, 1, 10, 5), torch.float32)",
    "bw:line 107 buf2 = torch.ops.aten.convolution_backward.default(buf1, primals_3, pri…",
    "bw:line 108 del buf1", "bw:line 111 buf3 = buf2[1]",
    "bw:line 112 assert_size_stride(buf3, (5, 4, 3, 3), (36, 1, 12, 4), 'torch.ops.aten.…",
    "bw:line 114 buf4 = buf2[2]",
    "bw:line 115 assert_size_stride(buf4, (5, ), (1, ), 'torch.ops.aten.convolution_back…",
    "bw:line 117 return (buf3, buf4, None, )"]


def test_an_extern_kernels_channels_last_result_item_is_the_layout_copy() -> None:
    made = "bw:line 107 buf2 = torch.ops.aten.convolution_backward.default(buf1, primals_3, pri…"
    item = {**program_buffer_fields("buf2[1]", made), "bytes": 720, "shape": [5, 4, 3, 3]}
    assert "result item, channels-last" in str(layout_copy(_ev("peak", item, CONV_BACKWARD)))
    bias = {**item, **program_buffer_fields("buf2[2]", made), "shape": [5]}
    assert layout_copy(_ev("peak", bias, CONV_BACKWARD)) is None  # a row-major item: no layout
    row_major = [s.replace("(36, 1, 12, 4)", "(36, 9, 3, 1)") for s in CONV_BACKWARD]
    assert layout_copy(_ev("peak", item, row_major)) is None


def test_unused_saved_tensor_is_unpacked_and_never_read() -> None:
    f = {"finding": "late", "held_in": "name", "last_use": "bw:line 105 primals_2, mul, avg_pool2d, tangents_1 = ar…",
         "freed_after": "bw:line 115 return (buf0, None, )"}
    assert unused_saved_tensor(_ev("program", f))
    assert unused_saved_tensor(_ev("program", {**f, "last_use": "bw:line 107 buf1 = cpp_fused_mul_0(mul)"})) is None
    assert unused_saved_tensor(_ev("program", {**f, "last_use": "fw:line 5 a, b = args"})) is None  # not a backward


def test_result_tuple_layout_fused_and_workspace_recognisers() -> None:
    assert result_tuple_held(_ev("program", {"finding": "late-reference", "held_in": "tuple"}))
    assert result_tuple_held(_ev("program", {"finding": "late", "held_in": "name"})) is None
    layout = _layout("c", "cpp_fused_convolution_1", (2, 6, 8, 8))
    ev = _ev("peak", layout.checks[0].blamed[0], [p[0] for p in layout.memory.program_timeline])  # type: ignore[union-attr]
    assert layout_copy(ev) and "row-major copy of the channels-last buf1" in str(layout_copy(ev))
    fused = _fused("c", "cpp_fused_sum_1", 3, 4)
    ev = _ev("peak", fused.checks[0].blamed[0], [p[0] for p in fused.memory.program_timeline])  # type: ignore[union-attr]
    assert layout_copy(ev) is None and fused_kernel_outputs(ev)
    single = _fused("c", "cpp_fused_sum_1", 1, 4)  # one buffer: nothing allocated together
    ev = _ev("peak", single.checks[0].blamed[0], [p[0] for p in single.memory.program_timeline])  # type: ignore[union-attr]
    assert fused_kernel_outputs(ev) is None
    # a fused kernel whose long name the program model cut before its call's parenthesis (the op sweep's
    # interpolate.bilinear training step: buf10, saved for the backward, allocated with the kernel's other outputs)
    kernel = "cpp_fused__to_copy__unsafe_index_add_arange_clamp_mean_mul_pow_sub_view_0"
    allocs = [f"fw:line {10 + i} buf{i} = empty_strided_cpu((54, ), (1, ), torch.float32)" for i in range(3)]
    program = ["fw:line 9 args.clear()", *allocs, "fw:line 13 buf4 = buf3; del buf3", f"fw:line 14 {kernel[:60]}\u2026",
               "fw:line 15 return (buf0, buf2, )"]
    cut = _ev("peak", _made("buf2", allocs[2], kernel, 216, "saved"), program)
    assert fused_kernel_outputs(cut) == ("buf2 is one of 3 buffers allocated together before the fused kernel "
                                         "writing them")
    other = _ev("peak", _made("buf2", allocs[2], "cpp_fused_sum_1", 216, "saved"), program)
    assert fused_kernel_outputs(other) is None  # a cut name that is not the writer's, and the call does not name buf2
    workspace = {"bytes": 4352, "measured_op": "aten::_scaled_dot_product_flash_attention_for_cpu",
                 "model_death": "not in model"}
    program = ["fw:line 9 buf3 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(buf0, …"]
    assert extern_kernel_workspace(_ev("peak", workspace, program))
    assert extern_kernel_workspace(_ev("peak", workspace, [])) is None  # the program calls no such kernel


def test_errors_and_runtime_findings_name_their_mechanism() -> None:
    err = Result("gen-dag-1", "iree", Status.FAIL_COMPILE, "compile failed", notes=[
        "Traceback (most recent call last):\n  File \"/x/fx_importer.py\", line 9, in import_node\n"
        "NotImplementedError: auto_functionalized_v2 is not implemented"])
    cause = cause_of(err)
    assert cause is not None and cause.parts == ("fail-compile: mutating-custom-op-import",)
    other = cause_of(Result("c", "iree", Status.FAIL_COMPILE, "x", notes=["ValueError: something else"]))
    assert other is not None and other.parts == ("fail-compile: ValueError: something else",)
    held = Check(CheckName.BACKWARD_INPUTS, Status.FAIL_PEAK, "held", {"verdict": "held-for-call"}, [], 24)
    c = cause_of(Result("g", "iree", Status.FAIL_PEAK, checks=[held], excess_bytes=24))
    assert c is not None and c.parts == ("backward-inputs: backward-inputs-held",)


@pytest.mark.parametrize(("error", "mechanism"), [
    ("source.mlir:3:12: error: failed to legalize operation 'torch.constant.int'", "scalar-constant-import"),
    ("error: failed to legalize operation 'torch.constant.bool'", "scalar-constant-import"),
    ("AssertionError: Please convert all Tensors to FakeTensors first or instantiate FakeTensorMode with "
     "'allow_non_fake_inputs'. Found in aten.where.self(FakeTensor(..., size=(1, 5), dtype=torch.bool), tensor(0.)",
     "fake-retrace-constant"),
    ("error: 'linalg.generic' op inferred input/output operand #1 has shape's dimension #0 to be 5, but found 3",
     "generic-shape-mismatch"),
    ("error: 'linalg.generic' op tiling is not supported for the semi-affine indexing map: tile size 1",
     "semi-affine-tiling"),
    ("source.mlir:5:10: error: 'tensor.cast' op operand type 'tensor<10x5xi1>' and result type 'tensor<5x10x5xi1>' "
     "are cast incompatible", "static-shape-refused"),  # fmin of a size-1 operand: a cast where a broadcast belongs
    ("source.mlir:10:46: error: 'tensor.cast' op operand type 'tensor<0xi64>' and result type 'tensor<6xi64>' are "
     "cast incompatible", "static-shape-refused"),  # embedding_bag with empty offsets
    ("source.mlir:10:10: error: 'tensor.expand_shape' op expected dimension 0 of collapsed type to be static value "
     "of 2", "static-shape-refused"),  # fftshift
    ("source.mlir:5:10: error: 'linalg.generic' op expected operand #1 rank (2) to match the result rank of "
     "indexing_map (3)", "unbroadcast-operand"),  # polar of a (5, 10, 5) magnitude and a (10, 5) angle
    ("source.mlir:30:11: error: expected offsets to be non-negative, but got -1", "slice-out-of-bounds"),  # pad (1, 2)
    ("error: slice along dimension 0 runs out-of-bounds: 3 >= 3", "slice-out-of-bounds"),  # pad (0, 1)'s backward
    ("CompileError: IREE compile of the backward graph failed: TypeError: Unsupported argument type <class 'complex'>",
     "complex-scalar-import"),  # polar's backward
    ("conformance.api.adapter.CompileError: torch.compile route compiled no graph with IREE: Dynamo ran the case in "
     "eager (Dynamic shape operator Explanation: Operator `aten.nonzero.default`'s output shape depends on input)",
     "dynamo-eager-fallback"),
])
def test_the_sweep_s_compile_errors_name_their_mechanism(error: str, mechanism: str) -> None:
    """The classes the whole op sweep showed on IREE, read from the error a pair's record keeps."""
    cause = cause_of(Result("op-x-0-infer", "iree", Status.FAIL_COMPILE, "IREE compile failed", notes=[error]))
    assert cause is not None and cause.parts == (f"fail-compile: {mechanism}",), cause


def test_a_tensor_cast_error_that_is_not_the_refusal_names_no_mechanism() -> None:
    """Only the verifier's refusal of incompatible static shapes is ``static-shape-refused``: another tensor.cast
    or expand_shape error stays the error it is."""
    for error in ("error: 'tensor.cast' op requires the same element type for all operands and results",
                  "error: 'tensor.expand_shape' op expected rank expansion, but found source rank 2",
                  "error: 'linalg.generic' op expected indexing_map #0 to have 2 dim(s) to match the number of loops",
                  "error: slice along dimension 0 runs out-of-bounds",  # no extent: not the refusal's form
                  "TypeError: Unsupported argument type <class 'slice'>"):
        cause = cause_of(Result("op-x-0-infer", "iree", Status.FAIL_COMPILE, "IREE compile failed", notes=[error]))
        assert cause is not None and not any(mechanism_of(p) for p in cause.parts), cause


def test_a_call_s_transients_beyond_the_graph_s_intermediates_are_lowering_transients() -> None:
    """IREE lowers addbmm into a transpose into a transient and a matmul (its stream IR): the call's own buffers,
    which no graph-level model holds, are the whole excess, and exactly what its compiled program allocates."""
    call = "iree-hal call 1/1"
    finding = {"bytes": 512, **runtime_fields(CallTransients(call, 512, 0, 512)),
               "identified_by": "runtime call's buffers"}
    assert lowering_transients(_ev("peak", finding)) == "the call's own buffers (512 B) are its compiled program's " \
                                                        "(it allocates 512 B of them), beyond the graph's " \
                                                        "intermediates (0 B)"
    within = {**finding, **runtime_fields(CallTransients(call, 256, 256, 512))}
    assert lowering_transients(_ev("peak", within)) is None  # the model's schedule holds them: not this
    beyond = {**finding, **runtime_fields(CallTransients(call, 1024, 0, 512))}
    assert lowering_transients(_ev("peak", beyond)) is None  # more than the program asks for: unexplained
    unread = {**finding, **runtime_fields(CallTransients(call, 512, 0, None, program_unreadable=True))}
    assert lowering_transients(_ev("peak", unread)) is None  # no figure to hold them to
    assert lowering_transients(_ev("residual", finding)) is None  # transients die with the call


def _hal_peak(excess: int, blamed: list[tuple[int, SharedResultBuffer | CallTransients]]) -> Result:
    check = Check(CheckName.PEAK, Status.FAIL_PEAK, "measured peak over model", {"model_source": "received-graphs"},
                  [{"bytes": n, **runtime_fields(fact), "identified_by": "runtime call's buffers"}
                   for n, fact in blamed],
                  excess)
    memory = MemoryFigures(model_peak_bytes=1000, model_source="received-graphs")
    return Result("op-x-0-train", "iree-boxed", Status.FAIL_PEAK, checks=[check], excess_bytes=excess, memory=memory)


def _transients(allocated: int) -> CallTransients:
    return CallTransients("iree-hal call 2/2", allocated, 16, 192)


PACK = SharedResultBuffer("iree-hal call 1/2's result buffer", 128, "2/2", (("fw:add_2", 4),), (("fw:add", 4),))


def test_a_mechanism_whose_evidence_declares_its_bound_needs_none_in_its_entry(tmp_path: Path) -> None:
    """lowering-transients is held to what the compiled program allocates beyond the model's intermediates
    (192 - 16 B), shared-result-buffer to the bytes blame put on the buffer: an entry gives no bound, and an
    excess beyond either figure still fails."""
    path = tmp_path / "iree-boxed.toml"
    path.write_text('[[expect]]\nmechanism = "lowering-transients"\nstatus = "fail-peak"\nreason = "r"\n\n'
                    '[[expect]]\nmechanism = "shared-result-buffer"\nstatus = "fail-peak"\nreason = "r"\n')
    manifest = load_manifest("iree-boxed", path)
    both = apply(_hal_peak(112, [(64, PACK), (48, _transients(64))]), manifest)
    assert both.status == Status.XFAIL, both.reason
    cause = cause_of(_hal_peak(112, [(64, PACK), (48, _transients(64))]))
    assert cause is not None and cause.evidence_bound("peak: lowering-transients") == 192 - 16
    assert cause.evidence_bound("peak: shared-result-buffer") == 64
    unexplained = apply(_hal_peak(64 + 500, [(64, PACK)]), manifest)  # 500 B more than the buffer accounts for
    assert unexplained.status == Status.FAIL_PEAK and "beyond its bound" in unexplained.reason, unexplained.reason
    whole_program = apply(_hal_peak(176, [(176, _transients(192))]), manifest)
    assert whole_program.status == Status.XFAIL, whole_program.reason
    beyond = apply(_hal_peak(200, [(176, _transients(192))]), manifest)  # 24 B no program buffer holds
    assert beyond.status == Status.FAIL_PEAK, beyond.reason
    with pytest.raises(ManifestError, match="needs its bound"):  # any other memory mechanism still needs one
        path.write_text('[[expect]]\nmechanism = "early-gradient"\nstatus = "fail-peak"\nreason = "r"\n')
        load_manifest("iree-boxed", path)


class UserGate(nn.Module):
    """A user's model with a data-dependent branch: Dynamo splits it at ``torch.equal`` (a Python bool of the
    values), and the frame holds ``a`` as a local across the split, where the one traced graph frees it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.exp()
        b = a * 2
        c = b.sin()
        if torch.equal(a, c):
            return a
        return (c - b).cos()


@torch._dynamo.disable
def _untraced(h: torch.Tensor) -> torch.Tensor:
    """A function Dynamo is told not to trace: its ops run in eager PyTorch between two graphs."""
    return (h.sin() * 3).relu()


class UserUntraced(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.exp()
        return (_untraced(a) * 2).cos()


def test_a_users_own_model_split_by_dynamo_is_the_known_graph_break_split() -> None:
    """``torch.equal`` reads two of the first graph's tensors in eager code: such a split is not composed (what eager
    code reading a graph's tensors makes is not modelled), so it is held to the user-level graph."""
    from conformance.api.case import Case, Workload
    from conformance.backends.inductor import InductorBackend
    from conformance.run.engine import RunOptions, run_case

    case = Case("my-own-gate-infer", "inference", "mine", 0, lambda seed: Workload(UserGate(), (torch.randn(4, 8),)))
    raw = run_case(case, InductorBackend(), RunOptions(steps=1))
    assert raw.status == Status.FAIL_PEAK and "(user-graph)" in raw.reason, raw.reason
    assert any(n.startswith(GRAPH_BREAK_NOTE + "Data dependent operator") for n in raw.notes), raw.notes
    manifest = load_manifest("inductor")
    r = apply(copy.deepcopy(raw), manifest)
    assert r.status == Status.XFAIL and r.cause_parts == ["peak: graph-break-split"], (r.reason, r.cause_parts)
    # the same excess without the break's note is no known mechanism; twice the model's peak is beyond the bound
    unsplit = copy.deepcopy(raw)
    unsplit.notes = [n for n in unsplit.notes if not n.startswith(GRAPH_BREAK_NOTE)]
    assert apply(unsplit, manifest).status == Status.FAIL_PEAK
    # the bound is every value the step makes at once, beside 64 B of scalars: one byte more is beyond it
    memory = raw.memory
    assert memory is not None and memory.model_peak_bytes and memory.user_model_made_bytes
    assert memory.user_model_made_bytes > memory.model_peak_bytes  # a, b, c and (c - b).cos(): 5 values of 128 B
    grown = copy.deepcopy(raw)
    peak = next(c for c in grown.checks if c.name == CheckName.PEAK)
    grown.excess_bytes = peak.excess_bytes = memory.user_model_made_bytes - memory.model_peak_bytes + 65
    beyond = apply(grown, manifest)
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason


def test_a_split_with_eager_code_making_values_is_the_known_graph_break_split() -> None:
    """Where eager code between the graphs makes a value a graph reads (a ``torch._dynamo.disable``d function),
    the split is not composed: the pair is held to the user-level graph and the excess is graph-break-split,
    within its bound (the step's values made less the model peak, plus 64 B); a byte more is beyond it."""
    from conformance.api.case import Case, Workload
    from conformance.backends.inductor import InductorBackend
    from conformance.run.engine import RunOptions, run_case

    case = Case("my-own-untraced-infer", "inference", "mine", 0,
                lambda seed: Workload(UserUntraced(), (torch.randn(4, 8),)))
    raw = run_case(case, InductorBackend(), RunOptions(steps=1))
    assert raw.status == Status.FAIL_PEAK and "(user-graph)" in raw.reason, raw.reason
    assert any(n.startswith(GRAPH_BREAK_NOTE) for n in raw.notes), raw.notes
    manifest = load_manifest("inductor")
    r = apply(copy.deepcopy(raw), manifest)
    assert r.status == Status.XFAIL and r.cause_parts == ["peak: graph-break-split"], (r.reason, r.cause_parts)
    # the same excess without the break's note is no known mechanism
    unsplit = copy.deepcopy(raw)
    unsplit.notes = [n for n in unsplit.notes if not n.startswith(GRAPH_BREAK_NOTE)]
    assert apply(unsplit, manifest).status == Status.FAIL_PEAK
    memory = raw.memory
    assert memory is not None and memory.model_peak_bytes and memory.user_model_made_bytes
    grown = copy.deepcopy(raw)
    peak = next(c for c in grown.checks if c.name == CheckName.PEAK)
    grown.excess_bytes = peak.excess_bytes = memory.user_model_made_bytes - memory.model_peak_bytes + 65
    beyond = apply(grown, manifest)
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason


def test_a_scratch_buffer_planted_in_a_split_step_is_beyond_the_split() -> None:
    """The split's bound is the step's own values: a backend's 4 KiB scratch buffer in the same split
    step is not a value the step makes, and stays an unexpected failure."""
    from conformance.api.case import Case, Workload
    from conformance.backends.inductor import InductorBackend
    from conformance.run.engine import RunOptions, run_case
    from tests.faults import SCRATCH_BYTES, planted

    case = Case("my-own-gate-infer", "inference", "mine", 0, lambda seed: Workload(UserGate(), (torch.randn(4, 8),)))
    raw = run_case(case, planted(InductorBackend, "scratch-buffer")(), RunOptions(steps=1))
    assert any(n.startswith(GRAPH_BREAK_NOTE) for n in raw.notes), raw.notes
    assert raw.status == Status.FAIL_PEAK and (raw.excess_bytes or 0) >= SCRATCH_BYTES, raw.reason
    r = apply(raw, load_manifest("inductor"))
    assert r.status == Status.FAIL_PEAK and "beyond its bound" in r.reason, r.reason


def test_the_split_bound_is_read_from_the_values_made_and_taken_once_per_pair() -> None:
    breaks = ("Data dependent operator Explanation: Operator `aten.equal.default` has a non-Tensor output",)
    split = Evidence("peak", "alive past modelled death", model_source="user-graph", graph_breaks=breaks,
                     figures={"model_peak_bytes": 300}, model_made_bytes=1000)
    assert split_values_over_model(split) == 1000 - 300 + 64
    assert split_values_over_model(replace(split, model_made_bytes=0)) is None  # not recorded: no bound read
    found = recognise(split)
    assert found is not None and found.bound == 764 and found.bound_per_pair


def test_a_graph_break_is_the_split_only_for_a_peak_held_to_the_user_level_graph() -> None:
    breaks = ("Data dependent operator Explanation: Operator `aten.equal.default` has a non-Tensor output",)
    split = Evidence("peak", "alive past modelled death", model_source="user-graph", graph_breaks=breaks)
    found = recognise(split)
    assert found is not None and found.mechanism == "graph-break-split" and "aten.equal" in found.why
    assert recognise(Evidence("peak", "alive past modelled death", model_source="user-graph")) is None
    assert recognise(Evidence("peak", "alive past modelled death", model_source="received-graphs",
                              graph_breaks=breaks)) is None
    assert recognise(Evidence("residual", "still alive", model_source="user-graph", graph_breaks=breaks)) is None
    assert graph_breaks_of(["x", GRAPH_BREAK_NOTE + "why"]) == ("why",)


def test_a_step_dynamo_runs_in_eager_is_no_iree_compile_and_says_why() -> None:
    """A data-dependent op (nonzero) leaves Dynamo no graph: the IREE backend's compile failure names the
    reason Dynamo gave, and the manifests know the mechanism."""
    from conformance.api.case import Case, Workload
    from conformance.backends.iree import IreeBackend
    from conformance.run.engine import RunOptions, run_case

    class Nonzero(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nonzero(x)

    case = Case("my-own-nonzero-infer", "inference", "mine", 0, lambda seed: Workload(Nonzero(), (torch.randn(6),)))
    backend = IreeBackend()
    if backend.unavailable_reason():
        pytest.skip(backend.unavailable_reason() or "")
    raw = run_case(case, backend, RunOptions(steps=1))
    assert raw.status == Status.FAIL_COMPILE and "Dynamo ran the case in eager" in raw.reason, raw.reason
    assert "aten.nonzero" in raw.reason, raw.reason
    r = apply(copy.deepcopy(raw), load_manifest("iree"))
    assert r.status == Status.XFAIL and r.cause_parts == ["fail-compile: dynamo-eager-fallback"], r.reason


def test_every_mechanism_has_a_recogniser_that_can_answer() -> None:
    """Each name in the registry is reachable: the manifests' mechanism entries name registered ones."""
    for backend in ("inductor", "iree", "iree-boxed", "eager"):
        for e in load_manifest(backend).entries:
            assert not e.mechanism or e.mechanism in NAMES
    assert recognise(_ev("peak", {})) is None  # no evidence: no mechanism


def test_mechanism_entries_load_dump_and_narrow(tmp_path: Path) -> None:
    from conformance.checks.manifest import dump

    path = tmp_path / "inductor.toml"
    path.write_text('[[expect]]\nmechanism = "layout-copy"\ncase = "user-*"\nstatus = "fail-peak"\nreason = "r"\n'
                    'max_excess = 16\nmax_excess_pct = 50\nwhen = "torch>=2.0"\n')
    m = load_manifest("inductor", path)
    e = m.entries[0]
    assert e.bound(1000) == 16 + 500 and e.describe_excess() == " (<= +16 B + 50% of the model peak)"
    assert m.stale(["mlp-s-infer"]) == []
    assert e.covers("user-conv", "fail-peak", "peak: layout-copy") and e.covers("user-conv", "fail-peak",
                                                                                 "program: layout-copy")
    assert not e.covers("gen-dag-1", "fail-peak", "peak: layout-copy")  # narrowed by its case glob
    assert not e.covers("user-conv", "fail-peak", "peak: fused-kernel-outputs")
    path.write_text(dump(m))
    assert load_manifest("inductor", path).entries == m.entries


def test_fused_outputs_are_found_through_a_shortened_kernel_call() -> None:
    """The program model shortens long statements: the writer named by the blame is the kernel whose
    call follows the buffer's allocation (gen-dag-1486, hypothesis seed 7)."""
    program = ["fw:line 182 buf0 = empty_strided_cpu((8, 8), (8, 1), torch.float16)",
               "fw:line 184 buf1 = empty_strided_cpu((8, 1), (1, 8), torch.float32)",
               "fw:line 186 buf2 = empty_strided_cpu((8, 1), (1, 1), torch.float16)",
               "fw:line 189 cpp_fused_add_mean_mul_relu_sigmoid_sum_0(arg0_1, arg1_1, arg2_1, buf0,\u2026",
               "fw:line 192 return (buf0, buf2, )"]
    blamed = _made("buf2", program[2], "cpp_fused_add_mean_mul_relu_sigmoid_sum_0", 16, "output")
    assert fused_kernel_outputs(_ev("peak", blamed, program))
    other_writer = {**blamed, "op": "cpp_fused_other_1"}  # the shortened call is not the buffer's writer
    assert fused_kernel_outputs(_ev("peak", other_writer, program)) is None
    assert fused_kernel_outputs(_ev("program", {**blamed, "finding": "late"}, program)) is None  # a late release


def test_a_peak_beside_the_backward_input_watch_is_the_held_inputs() -> None:
    """IREE's compiled backward keeps its saved inputs (gen-dag-6890-train): the peak, which decides, blames
    nothing; the watch beside it says the inputs were held for the call."""
    peak = Check(CheckName.PEAK, Status.FAIL_PEAK, "measured peak 472 B > model peak 328 B", {}, [], 144)
    memory = MemoryFigures(model_peak_bytes=328, findings={"backward_inputs": "held-for-call"})
    c = cause_of(Result("gen-dag-6890-train", "iree", Status.FAIL_PEAK, checks=[peak], excess_bytes=144,
                        memory=memory))
    assert c is not None and c.parts == ("peak: backward-inputs-held",)
    memory.findings = {}
    c = cause_of(Result("g", "iree", Status.FAIL_PEAK, checks=[peak], excess_bytes=144, memory=memory))
    assert c is not None and c.parts == ("peak: peak over the model with nothing blamed",)


def test_an_early_gradient_is_a_returned_backward_buffer_blamed_at_the_peak() -> None:
    """zoo-vit-tiny-train's kind: a weight gradient made by an extern mm before a larger backward op."""
    program = ["bw:line 40 buf24 = empty_strided_cpu((192, 192), (192, 1), torch.float32)",
               "bw:line 41 extern_kernels.mm(reinterpret_tensor(buf20, (192, 8), (1, 192), 0), view_3, out=buf24)",
               "bw:line 45 buf30 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default(…",
               "bw:line 90 return (buf24, buf31, None, )"]
    blamed = _made("buf24", program[0], "extern_kernels.mm", 147456)
    ev = _ev("peak", blamed, program)
    assert recognise(ev) is not None and recognise(ev).mechanism == "early-gradient"  # type: ignore[union-attr]
    not_returned = _ev("peak", {**blamed, **program_buffer_fields("buf30", program[2])}, program)
    assert recognise(not_returned) is None


def _ev_error(error: str) -> Evidence:
    return Evidence("fail-compile", "", error=error)


def test_compiler_and_importer_errors_of_the_op_sweep_name_their_mechanism() -> None:
    """An aten op without a lowering is told from a custom op (both can read 'torch.operator'), and a
    '!torch.none' in an op's printed signature is not a None result."""

    def parts(note: str) -> tuple[str, ...]:
        cause = cause_of(Result("op-x-0-infer", "iree-boxed", Status.FAIL_COMPILE, "compile failed", notes=[note]))
        assert cause is not None
        return cause.parts

    opaque_aten = ("RuntimeError: JIT compilation failed. [source.mlir:21:12: error: failed to legalize operation "
                   "'torch.operator' that was explicitly marked illegal: %14:3 = \"torch.operator\"(%arg0, %5) "
                   "<{name = \"torch.aten._linalg_svd\"}> : (!torch.vtensor<[5,5],f32>, !torch.none) -> (...)]")
    assert parts(opaque_aten) == ("fail-compile: aten-op-no-lowering",)
    assert aten_op_no_lowering(_ev_error(opaque_aten)) == "no lowering for aten._linalg_svd"
    defined = ("[source.mlir:5:14: error: failed to legalize operation 'torch.aten.linalg_qr': %14:2 = "
               "\"torch.aten.linalg_qr\"(%13, %1)]")
    assert aten_op_no_lowering(_ev_error(defined)) == "no lowering for aten.linalg_qr"
    custom = ("[source.mlir:3:10: error: failed to legalize operation 'torch.operator' that was explicitly marked "
              "illegal: %0 = \"torch.operator\"(%arg0) <{name = \"conformance_gen.twin\"}>]")
    assert parts(custom) == ("fail-compile: opaque-custom-op",)
    assert parts("NotImplementedError: Higher-order operation 'with_effects' not implemented in the FxImporter "
                 "(tried '_import_hop_with_effects')") == ("fail-compile: effects-op-import",)
    assert parts("AssertionError: Heterogeneous lists are not supported: expected vtensor, got <class 'NoneType'>") \
        == ("fail-compile: none-in-list-import",)
    assert parts("CompileError: IREE compile of the forward graph failed: KeyError: torch.complex128") \
        == ("fail-compile: dtype-import",)
    assert parts("KeyError: 'weight'")[0] != "fail-compile: dtype-import"



def test_the_op_sweep_s_iree_link_verify_and_run_errors_name_their_mechanism() -> None:
    """Error texts as the op sweep's records keep them (each with a standalone repro in docs/findings)."""

    def parts(status: Status, error: str) -> tuple[str, ...]:
        cause = cause_of(Result("op-x-0-infer", "iree", status, error))
        assert cause is not None
        return cause.parts

    compiled = "CompileError: IREE compile of the forward graph failed: RuntimeError: JIT compilation failed. [{}]"
    assert parts(Status.FAIL_COMPILE, compiled.format("iree-lld: error: undefined symbol: log10f")) == (
        "fail-compile: libm-symbol-link",)
    assert parts(Status.FAIL_COMPILE, compiled.format("source.mlir:6:25: error: 'tm_tensor.topk' op region block must "
                                                      "end with a linalg_ext.yield i1!")) == (
        "fail-compile: topk-region-yield",)
    for run_error in ("ValueError: signalling fence: c/runtime/src/iree/async/semaphore.c:598: INVALID_ARGUMENT; "
                      "semaphore already signaled past 61",
                      "IndexError: Error invoking function: c/runtime/src/iree/hal/buffer_view.c:47: OUT_OF_RANGE; "
                      "buffer view byte length 200 exceeds backing buffer byte length 100"):
        assert parts(Status.FAIL_RUN, run_error) == ("fail-run: float64-result-buffer",)
    assert parts(Status.FAIL_RUN, "AssertionError: expected 0 outputs, got 1") == ("fail-run: returned-input-view",)
    assert parts(Status.FAIL_RUN, "AssertionError: expected a tensor")[0] != "fail-run: returned-input-view"


def test_a_freed_result_in_the_retained_results_runtime_buffer_is_recognised() -> None:
    """The residual blame of IREE's result pack (a loss beside the gradients) names a mechanism; a result buffer
    nothing retained keeps (a leak of results), or the same words from the peak, do not."""
    from conformance.checks.mechanism import Evidence, recognise

    kept = runtime_fields(ResultPack("iree-hal call 1/1's result buffer", 320, 256, 320, 5, 64, (("add_3", 4),)))
    found = recognise(Evidence("residual", "still alive: result buffer", {**kept, "bytes": 64}))
    assert found is not None and found.mechanism == "retained-result-pack"
    leak = "iree-hal call 1/1's result buffer (256 B allocated; alive in it: fw:addmm_2 256 B)"
    assert recognise(Evidence("residual", "still alive: result buffer", {"producer": leak, "bytes": 256})) is None
    assert recognise(Evidence("peak", "alive past modelled death", {**kept, "bytes": 64})) is None


def _extern_copy(kernel: str, excess: int, call: str = "alpha=1, beta=1, out=buf1)", between: str = "") -> Result:
    """baddbmm-1-infer's program: ``kernel`` fills buf0 (1000 B) from a one-element input, and the extern
    baddbmm reads it and writes buf1; blame names the extern kernel's result.  ``call``: the call's arguments
    after its operands, as the program model labelled them (cut short: ``alpha=0.6, beta=0.2, out=b…``, as in
    baddbmm-3-infer); ``between``: a statement between buf1's allocation and the call."""
    program = ["fw:line 79 arg0_1, arg1_1, arg2_1 = args", "fw:line 80 args.clear()",
               "fw:line 82 buf0 = empty_strided_cpu((5, 5, 10), (50, 10, 1), torch.float32)",
               f"fw:line 85 {kernel}(arg0_1, buf0)", "fw:line 86 del arg0_1",
               "fw:line 87 buf1 = empty_strided_cpu((5, 5, 10), (50, 10, 1), torch.float32)",
               *([f"fw:line 88 {between}"] if between else []),
               f"fw:line 89 extern_kernels.baddbmm(buf0, arg1_1, arg2_1, {call}",
               "fw:line 92 return (buf1, )"]
    made = _made("buf1", "fw:line 87 buf1 = empty_strided_cpu((5, 5, 10), (50, 10, 1), torch.float32)",
                 "extern_kernels.baddbmm (aten.baddbmm)", 1000)
    return _peak_record("op-baddbmm-7-infer", program, [made], excess, peak=1000)


def test_an_extern_kernels_operand_copied_for_it_is_bounded_by_the_copy() -> None:
    """The copy is recognised by the kernel inductor names after the extern op it copies for, whatever the
    case, and held to the copied operand's bytes: more is not this mechanism's."""
    manifest = load_manifest("inductor")
    r = apply(_extern_copy("cpp_fused_baddbmm_0", 1000), manifest)
    assert r.cause_parts == ["peak: extern-input-copy"] and r.status == Status.XFAIL, r.reason
    assert "buf0 is cpp_fused_baddbmm_0's copy of an operand of baddbmm" in r.reason
    beyond = apply(_extern_copy("cpp_fused_baddbmm_0", 1001), manifest)
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason
    other = apply(_extern_copy("cpp_fused_mul_0", 1000), manifest)  # a kernel of the graph's own, not the copy
    assert other.cause_parts != ["peak: extern-input-copy"] and other.status == Status.FAIL_PEAK, other.reason


def test_an_extern_call_cut_short_in_its_out_argument_still_writes_the_buffer_allocated_for_it() -> None:
    """The program model cuts a long statement (``out=b…``): the buffer allocated right before the call, whose
    name the cut ``out=`` begins, is what the call writes.  Not a name the cut does not begin, nor a buffer
    allocated before some other work."""
    manifest = load_manifest("inductor")
    for call in ("alpha=0.6, beta=0.2, out=b\u2026", "alpha=0.6, beta=0.2, out=buf\u2026", "alpha=0.6, be\u2026"):
        r = apply(_extern_copy("cpp_fused_baddbmm_0", 1000, call), manifest)
        assert r.cause_parts == ["peak: extern-input-copy"] and r.status == Status.XFAIL, (call, r.reason)
    for call, between in (("alpha=0.6, beta=0.2, out=c\u2026", ""),
                          ("alpha=0.6, beta=0.2, out=b\u2026", "cpp_fused_mul_1(arg1_1, buf1)")):
        r = apply(_extern_copy("cpp_fused_baddbmm_0", 1000, call, between), manifest)
        assert r.cause_parts != ["peak: extern-input-copy"] and r.status == Status.FAIL_PEAK, (call, r.reason)


def _tangent_peak(name: str, excess: int) -> Result:
    """A backward whose program dels ``name`` (a 4 B graph input) after its last read, blamed alive past it."""
    program = ["bw:line 145 primals_2, mul_1, tangents_1 = args", "bw:line 146 args.clear()",
               "bw:line 147 buf0 = empty_strided_cpu((5, ), (1, ), torch.float32)",
               "bw:line 148 cpp_fused_mul_0(tangents_1, mul_1, buf0)", "bw:line 149 del mul_1",
               "bw:line 150 del tangents_1", "bw:line 151 return (buf0, None, )"]
    made = {"bytes": 4, "measured_op": "(outside any operator)", "role": "tangent", "model": "generated program",
            **program_buffer_fields(name, "bw:line 145 primals_2, mul_1, tangents_1 = args"), "op": "cpp_fused_mul_0"}
    return _peak_record("my-own-train", program, [made], excess, peak=64)


def test_a_tangent_held_by_the_backward_call_is_bounded_by_its_bytes() -> None:
    manifest = load_manifest("inductor")
    r = apply(_tangent_peak("tangents_1", 4), manifest)
    assert r.cause_parts == ["peak: tangent-held-by-call"] and r.status == Status.XFAIL, r.reason
    beyond = apply(_tangent_peak("tangents_1", 5), manifest)
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason
    saved = apply(_tangent_peak("mul_1", 4), manifest)  # a saved activation, not a gradient the call receives
    assert saved.cause_parts != ["peak: tangent-held-by-call"] and saved.status == Status.FAIL_PEAK, saved.reason


def test_a_fused_kernel_writing_a_buffer_under_the_name_it_was_reused_as_is_its_writer() -> None:
    """Inductor reuses a buffer under the name of the value it will hold (``buf5 = buf3; del buf3``): the
    fused kernel writes ``buf5``, which is ``buf3`` allocated beside ``buf4``."""
    def record(rename: str) -> Result:
        program = ["fw:line 1 arg0_1, = args", "fw:line 2 args.clear()",
                   "fw:line 3 buf3 = empty_strided_cpu((), (), torch.float32)",
                   "fw:line 4 buf4 = empty_strided_cpu((), (), torch.float32)", rename,
                   "fw:line 6 cpp_fused_add_mean_pow_1(buf5, arg0_1, buf4)", "fw:line 7 return (buf5, )"]
        made = _made("buf3", "fw:line 3 buf3 = empty_strided_cpu((), (), torch.float32)", "cpp_fused_add_mean_pow_1", 4)
        return _peak_record("my-own-train", program, [made], 4, peak=64)

    renamed = cause_of(record("fw:line 5 buf5 = buf3; del buf3"))
    assert renamed is not None and renamed.parts == ("peak: fused-kernel-outputs",), renamed
    other = cause_of(record("fw:line 5 buf5 = buf4"))  # buf5 is another buffer: buf3 is not what it writes
    assert other is not None and other.parts != ("peak: fused-kernel-outputs",), other


def test_a_fused_kernels_bound_grows_with_the_buffers_it_keeps_together() -> None:
    """bicubic's backward: one kernel writes 17 tap buffers allocated together, 4176 B over a 2864 B model
    peak. A share of the model peak would fail it (146% of it); the buffers allocated together (17 x 384 B)
    hold it, and an excess beyond them still fails."""
    manifest = load_manifest("inductor")

    def record(excess: int) -> Result:
        r = _fused("op-bicubic-7-train", "cpp_fused__unsafe_index_put_add_0", 17, 96)
        assert r.memory is not None
        r.memory.model_peak_bytes = 2864
        r.excess_bytes = r.checks[0].excess_bytes = excess
        return r

    cause = cause_of(record(4176))
    assert cause is not None and cause.scale("peak: fused-kernel-outputs") == 17 * 384
    held = apply(record(4176), manifest)
    assert held.status == Status.XFAIL, held.reason
    beyond = apply(record(17 * 384 + 1), manifest)
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason


def _read_late(after_kernel: list[str], excess: int, reads: str = "saved_1") -> Result:
    """matrix_exp's backward in small: the fused kernel reads the saved ``saved_1`` (the pow backward fused into
    it) and writes the block matrices allocated before it; the program dels ``saved_1`` at ``bw:line 210``."""
    program = ["bw:line 200 primals_1, saved_1, tangents_1 = args", "bw:line 201 args.clear()",
               "bw:line 202 buf0 = empty_strided_cpu((5, 10), (10, 1), torch.float32)",
               "bw:line 203 buf1 = empty_strided_cpu((10, 10), (10, 1), torch.float32)",
               f"bw:line 204 cpp_fused_cat_mul_pow_0(primals_1, {reads}, tangents_1, buf0, buf1)",
               "bw:line 205 del buf0", *after_kernel, "bw:line 210 del saved_1",
               "bw:line 211 buf2 = torch.ops.aten.linalg_matrix_exp.default(buf1)", "bw:line 212 return (buf2, )"]
    made = {"bytes": 100, "measured_op": "aten::empty", "role": "saved", "model": "generated program",
            **program_buffer_fields("buf3", "fw:line 148 buf3 = torch.ops.aten.linalg_matrix_exp.default(buf2)"),
            "op": "torch.ops.aten.linalg_matrix_exp.default", "measured_death": "alive at measured peak",
            **release_fields("bw:line 210 del saved_1", 42)}
    return _peak_record("my-own-train", program, [made], excess, peak=808)


def test_a_buffer_read_last_by_a_fused_kernel_is_alive_beside_its_buffers_and_bounded_by_its_bytes() -> None:
    manifest = load_manifest("inductor")
    r = apply(_read_late([], 100), manifest)
    assert r.cause_parts == ["peak: fused-input-read-late"] and r.status == Status.XFAIL, r.reason
    assert "saved_1 is read last by the fused kernel cpp_fused_cat_mul_pow_0" in r.reason, r.reason
    beyond = apply(_read_late([], 101), manifest)  # one byte more than the buffer itself
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason
    # a backend that keeps it past that kernel (work between the reader and the release) is not fusion
    kept = apply(_read_late(["bw:line 206 buf4 = empty_strided_cpu((5, 5), (5, 1), torch.float32)",
                             "bw:line 207 cpp_fused_add_1(buf1, buf4)", "bw:line 208 del buf4"], 100), manifest)
    assert kept.cause_parts != ["peak: fused-input-read-late"] and kept.status == Status.FAIL_PEAK, kept.reason
    # nor is a kernel that does not read it
    unread = apply(_read_late([], 100, reads="primals_1"), manifest)
    assert unread.cause_parts != ["peak: fused-input-read-late"] and unread.status == Status.FAIL_PEAK, unread.reason


def _read_late_to_return(excess: int, after_kernel: tuple[str, ...] = (), returned: str = "buf2, buf3") -> Result:
    """fractional_max_pool2d's program in small: the seeds buffer ``buf0`` (the graph's ``inductor_seeds``, read
    early by ``inductor_lookup_seed``) is read by the one fused kernel that looks its seed up, draws the samples and
    pools; that kernel is the program's last, so inductor writes no ``del buf0`` and the ``return`` releases it."""
    ret = f"fw:line 308 return ({returned}, )"
    program = ["fw:line 297 arg0_1, = args", "fw:line 298 args.clear()",
               "fw:line 299 buf0 = empty_strided_cpu((1, ), (1, ), torch.int64)",
               "fw:line 301 aten.randint.low_out(-9223372036854775808, 9223372036854775807, [1], ou\u2026",
               "fw:line 302 buf1 = empty_strided_cpu((1, 3, 2), (6, 2, 1), torch.float32)",
               "fw:line 304 buf2 = empty_strided_cpu((1, 3, 2, 2), (12, 4, 2, 1), torch.float32)",
               "fw:line 305 buf3 = empty_strided_cpu((1, 3, 2, 2), (12, 4, 2, 1), torch.int64)",
               "fw:line 306 cpp_fused_fractional_max_pool2d_rand_0(buf0, arg0_1, buf1, buf2, buf3)",
               "fw:line 307 del arg0_1", *after_kernel, ret]
    made = {**_made("buf0", "fw:line 299 buf0 = empty_strided_cpu((1, ), (1, ), torch.int64)",
                    "aten.randint.low_out ()", 8), "measured_death": "alive at measured peak",
            **release_fields(ret, 10)}
    return _peak_record("my-own-infer", program, [made], excess, peak=168)


def test_a_buffer_read_by_the_last_fused_kernel_is_released_by_the_return_and_bounded_by_its_bytes() -> None:
    """The release of a buffer whose last reader is the program's last kernel is the ``return`` (no ``del``): the
    same fusion as a ``del`` right after the kernel, held to the buffer's bytes."""
    manifest = load_manifest("inductor")
    r = apply(_read_late_to_return(8), manifest)
    assert r.cause_parts == ["peak: fused-input-read-late"] and r.status == Status.XFAIL, r.reason
    assert "buf0 is read last by the fused kernel cpp_fused_fractional_max_pool2d_rand_0" in r.reason, r.reason
    beyond = apply(_read_late_to_return(9), manifest)  # one byte more than the buffer itself
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason
    # work between its reader and the return: kept past its last use, not fusion
    kept = apply(_read_late_to_return(8, ("fw:line 307 buf4 = empty_strided_cpu((1, ), (1, ), torch.float32)",
                                          "fw:line 307 cpp_fused_sum_1(buf2, buf4)")), manifest)
    assert kept.cause_parts != ["peak: fused-input-read-late"] and kept.status == Status.FAIL_PEAK, kept.reason
    # one the program dels before the return, held to the return by something else (the call's grad_outputs)
    deleted = apply(_read_late_to_return(8, ("fw:line 307 del buf0",)), manifest)
    assert deleted.cause_parts != ["peak: fused-input-read-late"] and deleted.status == Status.FAIL_PEAK, \
        deleted.reason
    # a buffer the return hands out is an output, not released there
    returned = apply(_read_late_to_return(8, returned="buf0, buf2, buf3"), manifest)
    assert returned.cause_parts != ["peak: fused-input-read-late"] and returned.status == Status.FAIL_PEAK, \
        returned.reason


def _fused_nothing_blamed(excess: int, exact: bool = True, kernel: str = "cpp_fused_index_reduce_0") -> Result:
    """index_reduce.mean's program: one fused kernel writes three 4 B buffers, all allocated before it runs, so
    blame (which names one allocation) cannot pick one of them and names nothing.  The measured peak (12 B) is
    the program's, at its third allocation, ``excess`` over the model."""
    program = [("fw:line 124 arg0_1, arg1_1, arg2_1 = args", 0), ("fw:line 125 args.clear()", 0),
               ("fw:line 127 buf0 = empty_strided_cpu((1, ), (1, ), torch.float32)", 4),
               ("fw:line 130 buf2 = empty_strided_cpu((1, ), (1, ), torch.float32)", 8),
               ("fw:line 131 buf4 = empty_strided_cpu((), (), torch.float32)", 12),
               (f"fw:line 132 {kernel}(arg0_1, arg1_1, arg2_1, buf0, buf2, buf4)", 12),
               ("fw:line 133 del buf0", 8), ("fw:line 134 del buf2", 4), ("fw:line 136 return (buf4, )", 4)]
    return _exact_program_record(program, [], excess, exact, Status.PASS if exact else Status.FAIL_PEAK)


def _exact_program_record(program: list[tuple[str, int]], blamed: list[dict[str, Any]], excess: int, exact: bool,
                          program_status: Status = Status.PASS) -> Result:
    """A peak failure ``excess`` over the model at the program's own peak (its last figure's most), with the
    program check's verdict and whether the measured timeline followed the program exactly."""
    measured = max(b for _, b in program)
    peak = Check(CheckName.PEAK, Status.FAIL_PEAK, f"measured peak {measured} B > model peak",
                 {"model_source": "received-graphs", "measured_peak_bytes": measured,
                  "model_peak_bytes": measured - excess}, blamed, excess)
    followed = Check(CheckName.PROGRAM, program_status, "",
                     {"timeline": "exact" if exact else "differs", "program_peak_bytes": measured})
    memory = MemoryFigures(model_peak_bytes=measured - excess, measured_peak_bytes=measured,
                           model_source="received-graphs", program_timeline=program)
    return Result("my-own-infer", "inductor", Status.FAIL_PEAK, checks=[peak, followed], excess_bytes=excess,
                  memory=memory)


def test_a_fused_kernels_buffers_of_one_size_are_recognised_at_the_programs_peak_with_nothing_blamed() -> None:
    """Blame names one allocation; three of 4 B each, allocated together for one kernel, give it none to name.
    The program the measurement follows exactly peaks allocating them, so the excess is the fusion's, up to
    the buffers less the one any schedule holds there (8 B).  Not where the measurement departs from the
    program, nor where the next call is no fused kernel, nor for more excess than the buffers can make."""
    manifest = load_manifest("inductor")
    r = apply(_fused_nothing_blamed(4), manifest)
    assert r.cause_parts == ["peak: fused-kernel-outputs"] and r.status == Status.XFAIL, r.reason
    assert "buf4 is one of 3 buffers allocated together" in r.reason
    for near in (_fused_nothing_blamed(9), _fused_nothing_blamed(4, exact=False),
                 _fused_nothing_blamed(4, kernel="extern_kernels.mm")):
        judged = apply(near, manifest)
        assert judged.cause_parts != ["peak: fused-kernel-outputs"] and judged.status == Status.FAIL_PEAK, judged.reason


def _seeds_and_fused_sample(excess: int, exact: bool = True) -> Result:
    """pca_lowrank's program in small: the seeds buffer ``buf0`` is read late by the one kernel that fuses the
    mean, the centring ``sub`` and the ``randn`` sample, whose two buffers (``buf2``, 64 B; ``buf3``, 32 B) are
    allocated together before it.  Blame names ``buf0`` (alive past its modelled death); the sample ``buf3`` is
    made before the graphs' schedule makes it, never past a death, so blame leaves that part unnamed."""
    program = [("fw:line 119 arg0_1, arg1_1 = args", 0), ("fw:line 120 args.clear()", 0),
               ("fw:line 121 buf0 = empty_strided_cpu((1, ), (1, ), torch.int64)", 8),
               ("fw:line 123 aten.randint.low_out(-9223372036854775808, 9223372036854775807, [1], ou\u2026", 8),
               ("fw:line 126 buf1 = empty_strided_cpu((4, 4), (4, 1), torch.float32)", 72),
               ("fw:line 128 extern_kernels.mm(arg1_1, reinterpret_tensor(arg0_1, (2, 4), (1, 2), 0)\u2026", 72),
               ("fw:line 131 buf2 = empty_strided_cpu((4, 4), (4, 1), torch.float32)", 136),
               ("fw:line 132 buf3 = empty_strided_cpu((4, 2), (2, 1), torch.float32)", 168),
               ("fw:line 133 cpp_fused_mean_randn_sub_0(buf1, buf0, buf2, buf3)", 168),
               ("fw:line 134 del buf0", 160), ("fw:line 135 del buf1", 96), ("fw:line 136 return (buf2, buf3, )", 96)]
    seeds = {**_made("buf0", "fw:line 121 buf0 = empty_strided_cpu((1, ), (1, ), torch.int64)",
                     "aten.randint.low_out ()", 8), "measured_death": "alive at measured peak",
             **release_fields("fw:line 134 del buf0", 13)}
    return _exact_program_record(program, [seeds], excess, exact)  # passed, its timeline followed exactly or not


def test_the_excess_blame_leaves_unnamed_beside_a_named_buffer_is_a_fused_kernels_when_the_program_shows_it() -> None:
    """24 B over the model: 8 B of seeds blame names (read late by the fused kernel), and 16 B it cannot name, the
    fused kernel's sample buffer made beside its other output.  The rest is fusion's, up to the kernel's buffers
    less the largest (32 B), where the measurement follows the program exactly; beyond that, or where the
    measurement departs from the program, the rest stays with the named part and fails its bound."""
    manifest = load_manifest("inductor")
    r = apply(_seeds_and_fused_sample(24), manifest)
    assert sorted(r.cause_parts) == ["peak: fused-input-read-late", "peak: fused-kernel-outputs"], r.cause_parts
    assert r.status == Status.XFAIL, r.reason
    for near in (_seeds_and_fused_sample(33), _seeds_and_fused_sample(24, exact=False)):
        judged = apply(near, manifest)
        assert judged.cause_parts == ["peak: fused-input-read-late"] and judged.status == Status.FAIL_PEAK, \
            judged.reason
        assert "beyond its bound" in judged.reason, judged.reason


def _output_blamed_at_backward_peak(excess: int, backward: bool = True) -> Result:
    """nanquantile's training step in small: the forward makes ``buf0`` and reuses it for its output
    (``buf6 = buf0; del buf0``), so blame's size-and-order match puts the 4 B output on a graph value that dies
    early; the peak is the backward's, one kernel's four 4 B buffers allocated together before it runs."""
    fw = [("fw:line 132 primals_1, primals_2 = args", 0), ("fw:line 133 args.clear()", 0),
          ("fw:line 136 buf0 = empty_strided_cpu((), (), torch.float32)", 4),
          ("fw:line 137 cpp_fused_mul_0(primals_2, primals_1, buf0)", 4),
          ("fw:line 150 buf6 = buf0; del buf0", 4), ("fw:line 151 buf7 = empty_strided_cpu((), (), torch.float32)", 8),
          ("fw:line 152 cpp_fused_lerp_1(primals_2, buf6, buf7)", 8), ("fw:line 153 return (buf6, buf7, )", 8)]
    bw = [("bw:line 147 mul_2, tangents_1 = args", 8), ("bw:line 148 args.clear()", 8),
          ("bw:line 149 buf0 = empty_strided_cpu((1, ), (1, ), torch.float32)", 12),
          ("bw:line 153 buf2 = empty_strided_cpu((1, ), (1, ), torch.float32)", 16),
          ("bw:line 155 buf4 = empty_strided_cpu((1, ), (1, ), torch.float32)", 20),
          ("bw:line 158 buf6 = empty_strided_cpu((), (), torch.float32)", 24),
          ("bw:line 159 cpp_fused_add_div_scatter_0(mul_2, tangents_1, buf0, buf2, buf4, buf6)", 24),
          ("bw:line 160 del buf0", 20), ("bw:line 161 del buf2", 16), ("bw:line 162 del buf4", 12),
          ("bw:line 169 return (buf6, None, )", 12)]
    program = fw + bw if backward else fw
    top = max(b for _, b in program)
    output = {**_made("buf0", "fw:line 136 buf0 = empty_strided_cpu((), (), torch.float32)", "cpp_fused_mul_0", 4,
                      role="output"), "measured_death": "alive at measured peak",
              "model_death": "when the caller drops the step's outputs"}
    peak = Check(CheckName.PEAK, Status.FAIL_PEAK, f"measured peak {top} B > model peak",
                 {"model_source": "received-graphs", "measured_peak_bytes": top, "model_peak_bytes": top - excess},
                 [output], excess)
    followed = Check(CheckName.PROGRAM, Status.PASS, "", {"timeline": "exact", "program_peak_bytes": top})
    memory = MemoryFigures(model_peak_bytes=top - excess, measured_peak_bytes=top, model_source="received-graphs",
                           program_timeline=program)
    return Result("my-own-train", "inductor", Status.FAIL_PEAK, checks=[peak, followed], excess_bytes=excess,
                  memory=memory)


def test_a_forward_output_blamed_at_a_backward_peak_names_no_excess() -> None:
    """The graphs hold every step output at a backward peak, so a forward output blame put on an early-dying value
    of its size names none of the excess: the excess is the backward kernel's buffers allocated together (up to
    them less the largest, 12 B).  More than that, or a peak in the forward (where the output may truly be early),
    keeps the output's words and fails."""
    manifest = load_manifest("inductor")
    r = apply(_output_blamed_at_backward_peak(7), manifest)
    assert r.cause_parts == ["peak: fused-kernel-outputs"] and r.status == Status.XFAIL, r.reason
    assert "buf6 is one of 4 buffers allocated together" in r.reason, r.reason
    for near in (_output_blamed_at_backward_peak(13), _output_blamed_at_backward_peak(4, backward=False)):
        judged = apply(near, manifest)
        assert judged.cause_parts != ["peak: fused-kernel-outputs"] and judged.status == Status.FAIL_PEAK, \
            judged.reason


def _fused_ahead_of_an_op(excess: int, deleted: str = "", exact: bool = True, reads: str = "getitem_1") -> Result:
    """lu_factor's float64 training step in small (the op sweep's ``op-linalg.lu_factor-0-float64-train``): the
    backward's first kernel writes three buffers, among them a piece of the ``cat`` the graph makes last (into
    ``buf13`` through its view ``buf12``), before the fallback ``lu_unpack`` that makes the peak while it reads
    the saved LU and pivots.  Blame puts the excess on the pivots (``getitem_1``, saved from the forward's
    ``buf1[1]``) and the forward's output, by size and order.  ``deleted``: a kernel buffer the backward drops
    before ``lu_unpack``; ``reads``: what ``lu_unpack`` reads besides the LU."""
    fw = [("fw:line 141 primals_2, primals_3 = args", 0), ("fw:line 142 args.clear()", 0),
          ("fw:line 145 buf0 = empty_strided_cpu((3, 5), (5, 1), torch.float64)", 120),
          ("fw:line 146 cpp_fused_mul_0(primals_3, primals_2, buf0)", 120),
          ("fw:line 149 buf1 = torch.ops.aten.linalg_lu_factor_ex.default(buf0)", 256), ("fw:line 150 del buf0", 256),
          ("fw:line 151 buf2 = buf1[0]", 136), ("fw:line 154 buf3 = buf1[1]", 136), ("fw:line 160 del buf1", 136),
          ("fw:line 164 buf6 = empty_strided_cpu((), (), torch.float64)", 140),
          ("fw:line 165 buf7 = empty_strided_cpu((), (), torch.float64)", 148),
          ("fw:line 166 buf8 = buf6; del buf6", 148), ("fw:line 167 cpp_fused_add_mean_pow_1(buf8, buf2, buf7)", 148),
          ("fw:line 168 return (buf8, primals_3, buf2, buf3, )", 148)]
    bw = [("bw:line 272 primals_3, getitem, getitem_1, tangents_1 = args", 148), ("bw:line 273 args.clear()", 148),
          ("bw:line 276 buf13 = empty_strided_cpu((3, 5), (5, 1), torch.float64)", 268),
          ("bw:line 277 buf12 = reinterpret_tensor(buf13, (3, 2), (5, 1), 3)", 268),
          ("bw:line 278 buf4 = empty_strided_cpu((3, 3), (3, 1), torch.float64)", 340),
          ("bw:line 279 buf6 = empty_strided_cpu((3, 5), (1, 3), torch.float64)", 460),
          ("bw:line 281 cpp_fused_add_cat_div_expand_mul_pow_slice_triu_0(tangents_1, getitem, \u2026", 460),
          ("bw:line 282 del tangents_1", 460)]
    if deleted:
        bw.append((f"bw:line 283 del {deleted}", 388))
    top = 724 - (72 if deleted else 0)
    bw += [(f"bw:line 284 buf0 = torch.ops.aten.lu_unpack.default(getitem, {reads})", top),
           ("bw:line 285 del getitem", top - 120), ("bw:line 286 del getitem_1", top - 132),
           ("bw:line 337 return (buf17, None, )", 136)]
    pivots = {**_made("buf1[1]", "fw:line 149 buf1 = torch.ops.aten.linalg_lu_factor_ex.default(buf0)",
                      "torch.ops.aten.linalg_lu_factor_ex.default (aten.mul, aten.linalg_lu_factor_ex)", 12,
                      role="saved"), "measured_death": "alive at measured peak",
              **release_fields("bw:line 286 del getitem_1", 40)}
    output = {**_made("buf6", "fw:line 164 buf6 = empty_strided_cpu((), (), torch.float64)",
                      "cpp_fused_add_mean_pow_1", 8, role="output"), "measured_death": "alive at measured peak",
              "model_death": "when the caller drops the step's outputs"}
    peak = Check(CheckName.PEAK, Status.FAIL_PEAK, f"measured peak {top} B > model peak",
                 {"model_source": "received-graphs", "measured_peak_bytes": top, "model_peak_bytes": top - excess},
                 [pivots, output], excess)
    followed = Check(CheckName.PROGRAM, Status.PASS, "", {"timeline": "exact" if exact else "within",
                                                          "program_peak_bytes": top})
    memory = MemoryFigures(model_peak_bytes=top - excess, measured_peak_bytes=top, model_source="received-graphs",
                           program_timeline=fw + bw)
    return Result("op-linalg.lu_factor-0-float64-train", "inductor", Status.FAIL_PEAK, checks=[peak, followed],
                  excess_bytes=excess, memory=memory)


def test_a_fused_kernel_ahead_of_the_op_making_the_peak_is_fusion_though_blame_names_the_ops_operand() -> None:
    """28 B over the model at ``lu_unpack``, where the backward's first kernel has written three buffers the graphs'
    schedule makes around and after it.  The pivots blame names are an operand of the op making the peak (any
    schedule holds them there) and the forward's output is held by the graphs too, so the excess is the kernel's
    buffers, up to them less the largest (192 B).  Not where one of them was dropped before the op, nor where the
    op does not read what blame named, nor beyond that bound, nor where the measurement departs from the
    program."""
    manifest = load_manifest("inductor")
    r = apply(_fused_ahead_of_an_op(28), manifest)
    assert r.cause_parts == ["peak: fused-kernel-outputs"] and r.status == Status.XFAIL, r.reason
    assert "is one of 3 buffers allocated together" in r.reason, r.reason
    for near in (_fused_ahead_of_an_op(28, deleted="buf4"), _fused_ahead_of_an_op(28, reads="primals_3"),
                 _fused_ahead_of_an_op(193), _fused_ahead_of_an_op(28, exact=False)):
        judged = apply(near, manifest)
        assert "peak: alive past modelled death: buffer made by an op" in judged.cause_parts, judged.cause_parts
        assert judged.status == Status.FAIL_PEAK, judged.reason


def _pack_residual(excess: int, allocated: int, slots: int, retained: int,
                   freed: tuple[tuple[str, int], ...] = ()) -> Result:
    """A residual whose blame names the retained results' runtime buffer (the gradients of a backward call), its
    ``slots`` the results' 64-byte slots as blame computes them from their sizes."""
    pack = ResultPack("iree-hal call 4/4's result buffer", allocated, retained, slots, 3, 64, freed)
    blamed = [{"bytes": allocated - retained, **runtime_fields(pack), "identified_by": "runtime call's buffers",
               "slot_bytes": slots, "retained_bytes": retained}]
    check = Check(CheckName.RESIDUAL, Status.FAIL_RESIDUAL, "residual over model", {"model_source": "user-graph"},
                  blamed, excess)
    memory = MemoryFigures(model_peak_bytes=1000, model_source="user-graph")
    return Result("op-x-0-train", "iree-boxed", Status.FAIL_RESIDUAL, checks=[check], excess_bytes=excess,
                  memory=memory)


def test_a_retained_result_pack_is_held_to_its_results_slots() -> None:
    """IREE's result pack keeps each retained gradient's whole 64-byte slot (three 20 B gradients in 192 B: 132 B
    over the model's exact bytes, more than the one 64 B slot the entry once allowed): the mechanism is bound by the
    slots the results take, read from their sizes, not by a figure fitted to a sample.  A pack larger than its
    results' slots (a runtime allocating 64 B more for the same results) is beyond that bound and still fails."""
    from conformance.checks.blame import _slot_bytes

    assert _slot_bytes([20, 20, 20]) == 192 and _slot_bytes([20]) == 20  # a single result is not packed
    manifest = load_manifest("iree-boxed")
    padded = apply(_pack_residual(132, 192, 192, 60), manifest)
    assert padded.status == Status.XFAIL and padded.cause_parts == ["residual: retained-result-pack"], padded.reason
    cause = cause_of(_pack_residual(132, 192, 192, 60))
    assert cause is not None and cause.evidence_bound("residual: retained-result-pack") == 192 - 60
    loss = (("fw:add_1", 4),)
    with_loss = apply(_pack_residual(68, 256, 256, 188, freed=loss), manifest)  # a loss's slot beside them
    assert with_loss.status == Status.XFAIL, with_loss.reason
    planted = apply(_pack_residual(196, 256, 192, 60), manifest)  # 64 B the slots do not account for
    assert planted.status == Status.FAIL_RESIDUAL and "beyond its bound" in planted.reason, planted.reason


def test_a_users_pool_with_a_one_entry_padding_is_inductors_backward_lowering_by_mechanism() -> None:
    """A model nobody here wrote, trained through an ``AvgPool2d(padding=[1])``: eager takes the one-entry list
    for both dimensions, inductor's backward lowering asserts two.  The real compile failure is recognised by
    what the lowering's own message says (its target and its window arguments), so the manifest expects it on
    any model; the same assertion text with two-entry arguments, or another lowering's target, is not it."""
    from conformance.api.case import Case, Workload
    from conformance.backends.inductor import InductorBackend
    from conformance.checks.mechanism import pool_backward_short_list
    from conformance.run.engine import RunOptions, run_case

    class Pooled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.pool = nn.Conv2d(2, 2, 1), nn.AvgPool2d(3, stride=1, padding=[1])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.pool(self.conv(x)).square().mean()

    def build(seed: int) -> Workload:
        return Workload(Pooled(), (torch.randn(1, 2, 5, 5),))

    case = Case("my-own-avgpool-train", "train_step", "mine", 0, build)
    raw = run_case(case, InductorBackend(), RunOptions(steps=1))
    assert raw.status == Status.FAIL_COMPILE and "LoweringException" in raw.reason, raw.reason
    r = apply(copy.deepcopy(raw), load_manifest("inductor"))
    assert r.status == Status.XFAIL and r.cause_parts == ["fail-compile: pool-backward-short-list"], r.reason
    error = "\n".join(raw.notes)
    assert (pool_backward_short_list(_ev_error(error)) or "").endswith("one-entry padding=[1]")
    both = re.sub(r"args\[4\]: \[1\]", "args[4]: [1, 1]", error)
    assert both != error and pool_backward_short_list(_ev_error(both)) is None
    other = error.replace("aten.avg_pool2d_backward.default", "aten.max_pool2d_with_indices_backward.default")
    assert pool_backward_short_list(_ev_error(other)) is None


_SDPA = "fw:line 123 buf1 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(arg0_1, …"
#: a fallback op's result tuple as inductor's wrapper holds it: ``buf1[1]`` (the logsumexp, 80 B) is never read,
#: and the tuple ``buf1`` goes only at ``del buf1``, three kernels after its item ``buf2`` was taken
TUPLE_PROGRAM = [("fw:line 120 arg0_1, arg1_1 = args", 0), ("fw:line 121 args.clear()", 0),
                 (_SDPA, 400),
                 ("fw:line 124 buf2 = buf1[0]", 400),
                 ("fw:line 126 buf3 = empty_strided_cpu((4, 20), (20, 1), torch.float32)", 720),
                 ("fw:line 127 cpp_fused_add_0(buf2, buf3)", 720),
                 ("fw:line 128 cpp_fused_mul_1(buf3)", 720),
                 ("fw:line 129 extern_kernels.mm(buf3, arg1_1, out=buf4)", 720),
                 ("fw:line 130 del buf1", 320), ("fw:line 131 return (buf4, )", 320)]


def _tuple_held(share: int, statements: list[tuple[str, int]] = TUPLE_PROGRAM) -> Result:
    finding = {"finding": "late", "held_in": "tuple", "held_by": "buf1", "bytes": 80, "shape": [4, 5],
               "dtype": "float32", "producer": "fw:buf1[1]", "op": "aten._scaled_dot_product_flash_attention_for_cpu",
               "last_use": _SDPA,
               "freed_after": "fw:line 130 del buf1", "in_loop": False, "released_in_loop": False}
    part = program_part(finding)
    check = Check(CheckName.PROGRAM, Status.FAIL_PEAK, f"generated program: excess {share} B over 0 B allowed",
                  {"timeline": "exact", PARTS_KEY: [part], SHARES_KEY: {part: share}}, [finding], share)
    memory = MemoryFigures(model_peak_bytes=720, measured_peak_bytes=720, model_source="received-graphs",
                           program_timeline=statements)
    return Result("my-own-attention-infer", "inductor", Status.FAIL_PEAK, checks=[check], excess_bytes=share,
                  memory=memory)


def test_a_held_result_tuple_is_bounded_by_its_items_bytes_over_the_programs_own_statements() -> None:
    """The bound is read from the generated program: the held item's 80 B times the four statements that do
    work from its last use to the tuple's ``del`` (320 B), not a share of the model peak.  Planted bytes over it
    fail, and so does a program whose ``del`` comes earlier than the hold the check measured."""
    ev = _ev("program", _tuple_held(320).checks[0].blamed[0], [s for s, _ in TUPLE_PROGRAM])
    assert held_in_program(ev) == 80 * 4
    manifest = load_manifest("inductor")
    held = apply(_tuple_held(320), manifest)
    assert held.status == Status.XFAIL and "result-tuple-held" in held.reason, held.reason
    planted = apply(_tuple_held(321), manifest)  # one byte-statement more than the program holds
    assert planted.status == Status.FAIL_PEAK and "beyond its bound" in planted.reason, planted.reason
    earlier = [s for s in TUPLE_PROGRAM if "del buf1" not in s[0]]
    earlier.insert(5, ("fw:line 125 del buf1", 640))  # the program frees the tuple right after taking its item
    moved = _tuple_held(320, earlier)
    moved.checks[0].blamed[0]["freed_after"] = "fw:line 125 del buf1"
    assert apply(moved, manifest).status == Status.FAIL_PEAK
    unnamed = apply(_tuple_held(320, [("fw:line 1 return ()", 0)]), manifest)  # no statement named: no bound read
    assert unnamed.status == Status.FAIL_PEAK, unnamed.reason


# --------------------------------------------------------------------------- the loops' derived bounds


def _eager_loop_autograd(excess: int) -> Result:
    """A training step with a while_loop held to its user-level graph (inductor cannot compile the loop's
    backward: eager's WhileLoopAutogradOp keeps the stacked carries), two trips of 512 B carries."""
    timeline = [("fw:mm", 512), ("fw:while_loop_stack_output.cond0:lt", 513),
                ("fw:while_loop_stack_output.body0:mm", 1017), ("fw:while_loop_stack_output.body0:add", 1529),
                ("fw:while_loop_stack_output.cond1:lt", 1018), ("fw:while_loop_stack_output.body1:mm", 1522),
                ("fw:while_loop_stack_output.body1:add", 2034), ("fw:cat", 3058), ("bw:mm_1", 2546)]
    stacked = {"bytes": 1024, "measured_op": "aten::cat", "producer": "1024 B made by aten::cat",
               "op": "aten::cat", "shape": None, "model_death": "not in model", "identified_by": "not identified"}
    check = Check(CheckName.PEAK, Status.FAIL_PEAK, "measured peak over model", {"model_source": "user-graph"},
                  [stacked], excess)
    memory = MemoryFigures(model_peak_bytes=3058, model_source="user-graph", model_timeline=timeline)
    return Result("my-loop-train", "inductor", Status.FAIL_PEAK, checks=[check], excess_bytes=excess, memory=memory)


def test_the_eager_loop_autograd_is_bounded_by_what_the_loops_trips_make() -> None:
    """The bound is the bytes the user-level model's loop makes over its trips (the rise at each
    while_loop_stack_output event: 1, then 504 + 512 per trip), read from the model the pair is held to; an
    excess within it is the known mechanism, a byte planted beyond it fails."""
    within = _eager_loop_autograd(1500)
    cause = cause_of(within)
    assert cause is not None and cause.parts == ("peak: while-loop-backward-eager",), cause
    assert cause.evidence_bound("peak: while-loop-backward-eager") == 1 + 2 * (504 + 512)
    manifest = load_manifest("inductor")
    assert apply(within, manifest).status == Status.XFAIL
    beyond = apply(_eager_loop_autograd(1 + 2 * (504 + 512) + 1), manifest)
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason


def test_a_host_loops_bound_is_what_its_program_holds_counted_per_part() -> None:
    """The host loop's bound is what the program check counts its names holding over the generated program (each
    held item's bytes x the work statements until its release), recorded per part with the part's facts: a part
    whose entries the record cut is still held to it, and a share planted beyond it fails."""
    counter = {"finding": "late", "shape": [], "dtype": "torch.int64", "held_in": "name", "held_by": "buf0",
               "in_loop": True, "bytes": 8, "explains_bytes": 24,
               "last_use": "fw:while_loop_body_graph_0#1:142 cpp_fused_add_0(while_loop_body_graph_0_arg1_1, …",
               "freed_after": "fw:line 12 del buf0"}
    part = program_part(counter)
    recorded = program_part_facts([counter, {**counter, "explains_bytes": 16}])  # two findings of the part
    assert recorded[part]["held_statement_bytes"] == 40

    def record(share: int) -> Result:
        figures = {PARTS_KEY: [part], SHARES_KEY: {part: share}, "cause_part_facts": recorded, "timeline": "exact"}
        check = Check(CheckName.PROGRAM, Status.FAIL_PEAK, "generated program holds", figures, [], share)
        memory = MemoryFigures(model_peak_bytes=1000, program_timeline=[(s, 0) for s in LOOP_PROGRAM])
        return Result("my-loop", "inductor", Status.FAIL_PEAK, checks=[check], excess_bytes=share, memory=memory)

    cause = cause_of(record(40))  # its entries cut: recognised and bounded from the part's facts
    assert cause is not None and cause.parts == ("program: while-loop-host-code",), cause
    assert cause.evidence_bound("program: while-loop-host-code") == 40
    manifest = load_manifest("inductor")
    assert apply(record(40), manifest).status == Status.XFAIL
    beyond = apply(record(41), manifest)
    assert beyond.status == Status.FAIL_PEAK and "beyond its bound" in beyond.reason, beyond.reason
