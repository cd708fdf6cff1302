"""The model of a generated program: wrappers written the way inductor writes them, judged by their lifetimes.

Fast: no compiler runs here; the wrappers are source text, interpreted over fake tensors.
The tests against inductor's real output are in test_fault_matrix.py and test_backends_clean.py.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import conformance.cases.gen_ops  # noqa: F401  (registers conformance_gen::twin)
import conformance.models.program as program_module
from conformance.models.lifetime import Observation
from conformance.models.program import ProgramError, WrapperProgram, late_references, late_releases, model_program

PREAMBLE = """
import torch
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
async_compile = AsyncCompile()
cpp_fused_0 = async_compile.cpp_pybinding(['float*'], r'''kernel''')
cpp_fused_1 = async_compile.cpp_pybinding(['float*'], r'''kernel''')
async_compile.wait(globals())
del async_compile
"""
F32 = 4


def program(body: str, extra: str = "") -> WrapperProgram:
    call = "def call(args):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    return WrapperProgram(PREAMBLE + textwrap.dedent(extra) + "\n" + call)


def inputs(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    with FakeTensorMode():
        return [torch.empty(s) for s in shapes]


def findings(body: str, *shapes: tuple[int, ...], extra: str = "", trips: list[int] | None = None):
    model = model_program(program(body, extra), inputs(*shapes), Observation(trips or []))
    return model, late_releases(model.events, model.storages, model.work_events), late_references(model.findings)


CLEAN = """
    arg0_1, = args
    args.clear()
    buf0 = empty_strided_cpu((16, 16), (16, 1), torch.float32)
    cpp_fused_0(arg0_1, buf0)
    buf1 = empty_strided_cpu((16, 16), (16, 1), torch.float32)
    extern_kernels.mm(buf0, buf0, out=buf1)
    del buf0
    buf2 = buf1; del buf1  # reuse
    cpp_fused_1(buf2)
    return (buf2, )
"""


def test_a_clean_program_has_no_findings_and_its_own_timeline() -> None:
    model, late, refs = findings(CLEAN, (16, 16))
    assert late == [] and refs == []
    assert model.peak_bytes == 2 * 16 * 16 * F32  # buf0 and buf1 during the mm
    out = [s for s in model.storages if s.role == "output"]
    assert len(out) == 1 and out[0].nbytes == 16 * 16 * F32  # buf1's storage, renamed buf2


def test_a_del_emitted_late_is_named_with_where_it_should_have_died() -> None:
    late_body = CLEAN.replace("    del buf0\n", "").replace("    cpp_fused_1(buf2)\n",
                                                          "    cpp_fused_1(buf2)\n    del buf0\n")
    model, late, _ = findings(late_body, (16, 16))
    (f,) = late
    assert f.kind == "late" and f.storage.producer.endswith("buf0") and f.storage.nbytes == 16 * 16 * F32
    assert "extern_kernels.mm" in model.events[f.last_use]
    assert "cpp_fused_1" in model.events[f.should_die]  # the first work after its last use
    assert f.storage.held_by == "buf0"
    assert "del buf0" in model.events[f.freed or 0]


def test_a_missing_del_keeps_the_buffer_to_the_end() -> None:
    model, late, _ = findings(CLEAN.replace("    del buf0\n", ""), (16, 16))
    (f,) = late
    assert f.storage.producer.endswith("buf0") and "return" in model.events[f.freed or 0]


TUPLE = """
    arg0_1, = args
    args.clear()
    buf1 = torch.ops.conformance_gen.twin.default(arg0_1)
    buf2 = buf1[0]
    buf3 = buf1[1]
    {del_tuple}
    buf4 = empty_strided_cpu((16, 16), (16, 1), torch.float32)
    extern_kernels.mm(buf2, buf3, out=buf4)
    del buf2
    del buf3
    return (buf4, )
"""


def test_the_result_tuple_freed_after_its_items_are_taken_is_clean() -> None:
    _, late, refs = findings(TUPLE.format(del_tuple="del buf1"), (16, 16))
    assert late == [] and refs == []


def test_a_result_tuple_never_deleted_blocks_its_items_at_their_last_use() -> None:
    """pytorch/pytorch#163227: the items die in time through their own names, but the tuple still
    references them at their last use, where the kernel could have reused them."""
    model, late, refs = findings(TUPLE.format(del_tuple="pass"), (16, 16))
    assert late == []  # freed when the tuple goes: right after their last use is over (return)
    (ref,) = refs
    assert ref.binding.label == "buf1"
    assert {s.producer for s in ref.blocked} == {"buf1[0]", "buf1[1]"}
    assert "extern_kernels.mm" in model.events[ref.should_die]
    assert "buf3 = buf1[1]" in model.events[ref.binding.last_load]


CAT = """
    arg0_1, = args
    args.clear()
    buf1 = empty_strided_cpu((32, 16), (16, 1), torch.float32)
    buf0 = reinterpret_tensor(buf1, (16, 16), (16, 1), 256)  # alias
    cpp_fused_0(arg0_1, buf0)
    buf2 = empty_strided_cpu((16, 16), (16, 1), torch.float32)
    extern_kernels.mm(reinterpret_tensor(buf1, (16, 32), (32, 1), 0), {operand}, out=buf2)
    del buf0
    del buf1
    return (buf2, )
"""


def test_an_alias_into_a_concatenated_buffer_kept_to_its_base_release_blocks_nothing() -> None:
    """Inductor deletes a ``cat``'s alias names with the buffer itself: the alias (half the storage) is
    kept past its last read (the kernel writing into it), but the buffer is reused whole or not at
    all, through its own name, which the last use reads."""
    _, late, refs = findings(CAT.format(operand="reinterpret_tensor(buf1, (32, 16), (16, 1), 0)"), (16, 16))
    assert late == [] and refs == []


def test_a_whole_tensor_kept_past_its_last_read_still_blocks_the_reuse() -> None:
    """The same program with a second name for the whole buffer kept past its last read: flagged."""
    body = CAT.format(operand="reinterpret_tensor(buf1, (32, 16), (16, 1), 0)").replace(
        "    cpp_fused_0(arg0_1, buf0)\n", "    cpp_fused_0(arg0_1, buf0)\n    buf9 = buf1\n    cpp_fused_1(buf9)\n")
    _, _, refs = findings(body.replace("    del buf1\n", "    del buf1\n    del buf9\n"), (16, 16))
    (ref,) = refs
    assert ref.binding.label == "buf9"


CONJ = """
    arg0_1, = args
    args.clear()
    buf0 = empty_strided_cpu((16, 16), (16, 1), torch.complex64)
    buf0.copy_(arg0_1, False)
    del arg0_1
    buf2 = torch.ops.aten._conj.default(buf0)
    buf3 = buf2
    buf4 = torch.ops.aten.clone.default(buf3)
{dels}
    buf5 = torch.ops.aten.neg.default(buf4)
    del buf4
    return (buf5, )
"""


def test_a_name_released_with_the_view_its_storage_is_last_read_through_blocks_nothing() -> None:
    """Inductor's ``fft.hfft``: a conjugate view of ``buf0`` is read last by a clone and every name of the
    storage is deleted right after it; ``buf0`` and ``buf2`` were last read before, but the view read at the
    last use holds the storage as long as they do, and a storage read through a view is not reused in place."""
    with FakeTensorMode():
        (x,) = [torch.empty((16, 16), dtype=torch.complex64)]
    for dels in ("    del buf0\n    del buf2\n    del buf3", "    del buf3\n    del buf0\n    del buf2"):
        model = model_program(program(CONJ.format(dels=dels)), [x], Observation([]))
        assert late_references(model.findings) == []
        assert late_releases(model.events, model.storages, model.work_events) == []


def test_a_name_kept_past_the_view_its_storage_is_last_read_through_still_blocks() -> None:
    """The same program with ``buf0`` deleted only after the next op: held past every view, flagged."""
    with FakeTensorMode():
        (x,) = [torch.empty((16, 16), dtype=torch.complex64)]
    body = CONJ.format(dels="    del buf2\n    del buf3").replace("    del buf4\n", "    del buf4\n    del buf0\n")
    model = model_program(program(body), [x], Observation([]))
    refs = late_references(model.findings)
    assert [r.binding.label for r in refs] == ["buf0"]


def test_a_scratch_buffer_the_program_never_uses_is_named() -> None:
    body = CLEAN.replace("    cpp_fused_1(buf2)\n", "    buf9 = empty_strided_cpu((64,), (1,), torch.float32)\n"
                                                   "    del buf9\n    cpp_fused_1(buf2)\n")
    _, late, _ = findings(body, (16, 16))
    (f,) = late
    assert f.kind == "never-used" and f.storage.producer.endswith("buf9") and f.storage.nbytes == 64 * F32


LOOP = """
    arg0_1, = args
    args.clear()
    buf1 = [None] * 1
    buf1[0] = arg0_1
    (cond_result,) = cond_fn([buf1[0]])
    should_loop = cond_result
    if not should_loop:
        buf1[0] = arg0_1.clone()
    while should_loop:
        (buf1[0],) = body_fn([buf1[0]])
        (cond_result,) = cond_fn([buf1[0]])
        should_loop = cond_result
    del arg0_1
    buf2 = buf1[0]
    return (buf2, )
"""
LOOP_FUNCTIONS = """
def cond_fn(args):
    a, = args
    args.clear()
    c = empty_strided_cpu((), (), torch.bool)
    cpp_fused_0(a, c)
    del a
    return (c, )
def body_fn(args):
    a, = args
    args.clear()
    n = empty_strided_cpu((16, 16), (16, 1), torch.float32)
    cpp_fused_1(a, n)
    del a
    cpp_fused_0(n)
    return (n, )
"""


@pytest.mark.parametrize("trips", [0, 1, 3])
def test_a_host_loop_runs_for_the_observed_trips(trips: int) -> None:
    model, late, _ = findings(LOOP, (16, 16), extra=LOOP_FUNCTIONS, trips=[trips])
    bodies = sum(1 for e in model.events if "body_fn#" in e and "cpp_fused_1" in e)
    assert bodies == trips
    out = [s for s in model.storages if s.role == "output"]
    assert out and out[0].nbytes == 16 * 16 * F32  # the last carry (or the clone of the input)
    held = {f.storage.producer for f in late}
    if trips >= 2:  # the carry list holds the previous state while the next body runs
        assert any(f.storage.nbytes == 16 * 16 * F32 and f.storage.held_by == "buf1" for f in late), held
        assert any(f.storage.nbytes == 1 and "should_loop" in f.storage.held_by for f in late), held


def test_a_loop_without_an_observed_trip_count_is_not_guessed() -> None:
    with pytest.raises(ProgramError, match="no observed trip count"):
        findings(LOOP, (16, 16), extra=LOOP_FUNCTIONS, trips=[])


@pytest.mark.parametrize("line, what", [
    ("x = lambda: 1", "unsupported expression Lambda"),
    ("for i in range(2): pass", "unsupported statement For"),
    ("y = mystery(arg0_1)", "unknown name 'mystery'"),
])
def test_what_the_interpreter_does_not_know_is_an_error_naming_the_line(line: str, what: str) -> None:
    with pytest.raises(ProgramError) as err:
        findings(f"arg0_1, = args\n{line}\nreturn (arg0_1, )", (4,))
    assert what in str(err.value) and line.split(":")[0] in str(err.value)


def test_a_wrapper_without_a_call_function_is_refused() -> None:
    with pytest.raises(ProgramError, match="no `call` function"):
        WrapperProgram(PREAMBLE)


RENAMED_CHECKS = """
from tests.wrapper_checks import assert_tensor_metadata
assert_size_stride_grouped = torch._C._dynamo.guards.assert_size_stride
assert_alignment_v2 = torch._C._dynamo.guards.assert_alignment
lenient_check = lambda t, size, stride, *rest: None  # passes whatever the layout (torch 2.14's on fakes)
"""


@pytest.mark.parametrize("check", [
    "assert_size_stride(buf1, (16, 16), (16, 1))",
    "assert_size_stride_grouped(buf1, (16, 16), (16, 1))",
    "assert_alignment_v2(buf1, 16)",
    "assert_tensor_metadata(buf1, dtype=torch.float32)",
    "torch.ops.aten._assert_tensor_metadata.default(buf1, (16, 16), (16, 1), torch.float32)",
    "assert_size_stride(buf0, (16, 16), (16, 1))",
])
def test_a_check_is_neither_work_nor_a_use_whatever_it_is_called(check: str) -> None:
    """Checks are known by what they do on fake tensors (look, write nothing, return no tensor),
    not by name: on torch 2.15 `assert_size_stride_grouped` and `assert_tensor_metadata` were taken
    for work, and buf0, freed after them, for a late `del`."""
    checked = CLEAN.replace("    del buf0\n", f"    {check}\n    del buf0\n")
    model, late, refs = findings(checked, (16, 16), extra=RENAMED_CHECKS)
    clean, _, _ = findings(CLEAN, (16, 16), extra=RENAMED_CHECKS)
    assert late == [] and refs == []
    assert model.peak_bytes == clean.peak_bytes and len(model.work_events) == len(clean.work_events)


@pytest.mark.parametrize("call", ["extern_kernels.mm(buf0, buf0, out=buf1)", "buf1.add_(1)",
                                  "torch.ops.aten.add_.Tensor(buf1, buf0)"])
def test_a_call_that_writes_an_argument_is_work(call: str) -> None:
    """The other side of the rule: a call that returns nothing but writes an operand still works."""
    late_body = CLEAN.replace("    del buf0\n", f"    {call}\n    del buf0\n")
    model, late, _ = findings(late_body, (16, 16), extra=RENAMED_CHECKS)
    clean, _, _ = findings(CLEAN, (16, 16), extra=RENAMED_CHECKS)
    assert len(model.work_events) == len(clean.work_events) + 1
    if "buf0" not in call:
        (f,) = late  # buf0's last use was the mm before it: freed after this work, late
        assert f.storage.producer.endswith("buf0")


@pytest.mark.parametrize("check", ["assert_size_stride", "assert_size_stride_grouped",
                                   "assert_tensor_metadata", "lenient_check"])
def test_a_layout_the_program_asserts_is_the_layout_it_returns(check: str) -> None:
    """A fallback kernel may make another layout than its meta function says (oneDNN's convolution
    backward returns a channels-last weight gradient); the program's own check states the real one,
    and what the program returns is modelled in it (the engine copies a gradient by its layout)."""
    body = f"""
        arg0_1, = args
        args.clear()
        buf0 = torch.ops.aten.clone.default(arg0_1)
        {check}(buf0, (2, 3, 4, 4), (48, 1, 12, 3))
        return (buf0, )
    """
    prog = program(body, extra=RENAMED_CHECKS)
    model_program(prog, inputs((2, 3, 4, 4)))
    assert prog.result_layouts == [((2, 3, 4, 4), (48, 1, 12, 3))]
    unchecked = program(body.replace(f"{check}(buf0, (2, 3, 4, 4), (48, 1, 12, 3))", "pass"), extra=RENAMED_CHECKS)
    model_program(unchecked, inputs((2, 3, 4, 4)))
    assert unchecked.result_layouts == [((2, 3, 4, 4), (48, 16, 4, 1))]


def test_an_input_view_keeps_its_storage_offset_for_the_wrapper_s_relative_reinterpret() -> None:
    """The op sweep's as_strided.partial_views: the caller passes a view at offset 5, and inductor returns
    ``reinterpret_tensor(arg0_1, (2, 2), (1, 2), -5)``, an offset counted from the input's own."""
    with FakeTensorMode():
        view = torch.empty(10)[5:]
    body = """
        arg0_1, = args
        args.clear()
        return (reinterpret_tensor(arg0_1, (2, 2), (1, 2), -5), )
    """
    model = model_program(program(body), [view], Observation([]))
    assert model.peak_bytes == 0 and not [s for s in model.storages if s.role == "output" and s.nbytes]


COPY_INTO_A_SLICE = """
    arg0_1, = args
    args.clear()
    buf0 = torch.ops.aten.full.default([4, 8], 0, dtype=torch.float32, layout=torch.strided, device=torch.device('cpu'))
    buf1 = torch.ops.aten.slice.Tensor(buf0, 1, 0, 5)
    buf2 = torch.ops.aten.copy.default(buf1, arg0_1)
    del buf0
    del buf1
    return (buf2, )
"""


@pytest.mark.parametrize("run", [1, 2])
def test_a_fallback_op_s_result_has_its_kernel_s_storage_on_every_model(run: int) -> None:
    """``aten.copy`` of a slice clones the slice's whole base (``clone_preserve_strides``): 4 x 8 floats,
    not the slice's 4 x 5 extent.  FakeTensorMode's dispatch cache gives the extent on its second sight of the
    same call, which made a generated program's model depend on the pairs modelled before it."""
    real = torch.ops.aten.copy.default(torch.zeros(4, 8)[:, :5], torch.ones(4, 5))
    assert real.untyped_storage().nbytes() == 4 * 8 * F32
    for _ in range(run):
        model = model_program(program(COPY_INTO_A_SLICE), inputs((4, 5)), Observation([]))
    copies = [s for s in model.storages if "copy" in s.op]
    assert [s.nbytes for s in copies] == [4 * 8 * F32]


def test_the_compile_the_received_graphs_come_from_makes_kernel_storages() -> None:
    """The received graphs' fake values come from Dynamo's own FakeTensorMode: inside the harness's compile it
    runs without the dispatch cache, so ``aten.copy`` of a slice is its base's size however often it was seen."""
    from conformance.api.aot import modelled_compile

    def copied() -> int:
        mode = FakeTensorMode()  # made as Dynamo makes its own, reading the config
        with mode:
            base = torch.empty(4, 8)
            return torch.ops.aten.copy.default(base[:, :5], torch.empty(4, 5)).untyped_storage().nbytes()

    with modelled_compile():
        assert [copied(), copied()] == [4 * 8 * F32] * 2


def _all_kept(n: int) -> str:
    """``n`` buffers each computed from the one before and all returned: every one is held past its last use
    to the end, as a forward holds what it saves for its backward."""
    body = ["arg0_1, = args", "args.clear()", "buf0 = empty_strided_cpu((4, ), (1, ), torch.float32)",
            "cpp_fused_0(arg0_1, buf0)"]
    for i in range(1, n):
        body += [f"buf{i} = empty_strided_cpu((4, ), (1, ), torch.float32)", f"cpp_fused_0(buf{i - 1}, buf{i})"]
    return "\n".join([*body, "return (" + "".join(f"buf{i}, " for i in range(n)) + ")"])


def test_the_work_per_statement_stays_flat_as_the_program_doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 59: the program model grows linearly with the program.  Counted, not timed: the tensors the
    interpreter walks per statement, on a program twice as long.  Asking every live name at every kernel (what
    it did before) walks a number that grows with the program: at twice the length, twice per statement at least."""
    walked = [0]
    tensors = program_module._tensors

    def counting(value: object):  # type: ignore[no-untyped-def]
        for t in tensors(value):
            walked[0] += 1
            yield t

    monkeypatch.setattr(program_module, "_tensors", counting)
    per_statement = []
    for n in (40, 80):
        walked[0] = 0
        model, late, refs = findings(_all_kept(n), (4,))
        assert late == [] and refs == []  # clean: each buffer is returned (its last use) and outlives the call
        per_statement.append(walked[0] / len(model.events))
    assert per_statement[1] <= 1.25 * per_statement[0], per_statement
