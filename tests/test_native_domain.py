"""The native memory domain: a library's bytes outside torch's allocator are measured, never twice, and
memory no probe observes is never a pass (``conformance.checks.domains``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.api.case import select_cases
from conformance.api.result import Status
from conformance.checks.domains import MEMORY_CHECKS, Unobserved, plan
from conformance.probes.cpu import Allocation, MemoryTrace
from conformance.probes.native_heap import NativeHeapError, OutsideStorage, build, worker_environment
from conformance.run.engine import run_case
from conformance.run.isolation import WorkerPool
from tests.planted_native_backends import (
    LEAK_BYTES,
    NumpyLeakBackend,
    NumpyRuntimeBackend,
    UnprobedDomainBackend,
)

PLANTED = "tests.planted_native_backends"


def _native_available() -> bool:
    try:
        build()
    except NativeHeapError:
        return False
    return True


needs_native = pytest.mark.skipif(not _native_available(), reason="the native heap observer does not build here")


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool() as p:
        yield p


def _case(case_id: str):
    (case,) = select_cases([case_id])
    return case


@needs_native
def test_probe_counts_library_bytes_once_and_never_torch_allocator_bytes() -> None:
    """In a preloaded interpreter: numpy's array and a malloc through the process's own symbol are counted,
    torch's CPU allocator's bytes are not (the torch-cpu domain has them), and a freed block leaves nothing."""
    script = textwrap.dedent(f"""
        import ctypes, mmap
        from conformance.probes import native_heap
        native_heap.start_tracking()
        import numpy as np, torch
        libc = ctypes.CDLL(None)
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        keep = []
        def window(body):
            with native_heap.NativeHeapProbe() as probe:
                body()
            return probe.trace.peak_bytes, probe.trace.residual_bytes
        print("numpy", *window(lambda: keep.append(np.ones({LEAK_BYTES} // 8))))
        print("torch", *window(lambda: keep.append(torch.ones({LEAK_BYTES} // 4))))
        print("malloc", *window(lambda: libc.free(libc.malloc(12345))))
        def mapped():
            p = libc.mmap(None, 1 << 16, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
            keep.append(p)
        print("mmap", *window(mapped))
        print("munmap", *window(lambda: libc.munmap(keep[-1], 1 << 16)))
    """)
    env = worker_environment({**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "LD_PRELOAD" in env
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = {line.split()[0]: tuple(int(x) for x in line.split()[1:]) for line in out.stdout.splitlines()}
    assert figures["numpy"][1] == LEAK_BYTES and figures["numpy"][0] >= LEAK_BYTES  # + numpy's own transients
    assert figures["torch"] == (0, 0)  # torch's allocator: the torch-cpu domain's bytes, not counted again
    assert figures["malloc"] == (12345, 0)
    assert figures["mmap"] == (1 << 16, 1 << 16)
    assert figures["munmap"] == (0, 0)  # made before this window: its unmapping is not this window's


@needs_native
def test_native_leak_held_by_an_adapter_fails_residual_naming_the_native_domain(pool: WorkerPool) -> None:
    control = pool.run("mlp-s-infer", f"{PLANTED}:NumpyRuntimeBackend", 300)
    leak = pool.run("mlp-s-infer", f"{PLANTED}:NumpyLeakBackend", 300)
    assert control.status == Status.PASS, control.reason
    assert control.memory is not None and control.memory.domains is not None
    assert control.memory.domains["native"].peak_bytes > 0  # its outputs, measured in numpy's memory
    assert leak.status == Status.FAIL_RESIDUAL, leak.reason
    assert leak.excess_bytes == LEAK_BYTES
    assert leak.memory is not None and leak.memory.domains is not None
    assert leak.memory.domains["native"].residual_bytes == LEAK_BYTES
    assert leak.memory.domains["torch-cpu"].residual_bytes == 0
    assert any(str(b.get("op", "")).startswith("native:") and b.get("bytes") == LEAK_BYTES
               for b in leak.memory.blamed), leak.memory.blamed


@needs_native
def test_a_result_in_a_runtime_buffer_made_before_the_call_is_counted_while_held(pool: WorkerPool) -> None:
    """Outputs in buffers the runtime made at compile time (memory no window allocates) are still measured:
    never the vacuous 0 B a window alone would show."""
    result = pool.run("mlp-s-infer", f"{PLANTED}:SharedBufferBackend", 300)
    assert result.memory is not None and result.memory.domains is not None
    output_bytes = 8 * 8 * 4  # mlp-s-infer's output: float32[8, 8]
    assert result.memory.domains["native"].peak_bytes >= output_bytes
    assert result.memory.domains["native"].residual_bytes == 0  # dropped by the caller: not a leak
    assert any("(a pool;" in n for n in result.notes), result.notes


@needs_native
def test_declared_native_domain_catches_a_malloc_leak_with_torch_results(pool: WorkerPool) -> None:
    """The step's results are torch's; the adapter declares the native domain, so it is held on it."""
    result = pool.run("mlp-s-train", f"{PLANTED}:MallocLeakBackend", 300)
    assert result.status == Status.FAIL_RESIDUAL, result.reason
    assert result.excess_bytes == LEAK_BYTES
    assert result.memory is not None and result.memory.domains is not None
    assert result.memory.domains["native"].residual_bytes == LEAK_BYTES


@needs_native
def test_eager_is_not_held_on_the_native_domain(pool: WorkerPool) -> None:
    """Eager's bytes are all torch's allocator's: its verdict and figures are the torch-cpu domain's alone."""
    result = pool.run("mlp-s-train", "eager", 300)
    assert result.status == Status.PASS, result.reason
    assert result.memory is not None and result.memory.domains is None
    assert result.memory.measured_peak_bytes == result.memory.model_peak_bytes


def test_declared_domain_no_probe_observes_is_never_a_pass() -> None:
    result = run_case(_case("mlp-s-infer"), UnprobedDomainBackend())
    assert result.status == Status.SKIP
    assert "vendor-npu" in result.reason and "not judged" in result.reason
    assert not [c for c in result.checks if c.name.value in MEMORY_CHECKS]
    check = next(c for c in result.checks if c.name.value == "memory-domains")
    assert check.figures["unobserved"][0]["domain"] == "vendor-npu"


@pytest.mark.parametrize("backend", [NumpyRuntimeBackend(), NumpyLeakBackend()], ids=lambda b: b.name)
def test_results_outside_torch_without_the_native_observer_are_unobserved(backend: NumpyRuntimeBackend) -> None:
    """In a process without the observer (this one), results in numpy memory are memory nobody measured:
    neither a pass (the leak) nor a failure (the clean runtime), a skip saying so."""
    result = run_case(_case("mlp-s-infer"), backend)
    assert result.status == Status.SKIP, result.reason
    check = next(c for c in result.checks if c.name.value == "memory-domains")
    assert check.figures["unobserved"][0]["cause"] == "result"


def _trace(*blocks: tuple[int, int]) -> MemoryTrace:
    return MemoryTrace("native", [Allocation(ptr, n, 0) for ptr, n in blocks], exact=False)


def test_plan_holds_results_in_native_memory_and_names_those_nobody_saw() -> None:
    outside = {2: [OutsideStorage("output[0]", 1000, 64)]}
    inside = plan(("torch-cpu",), {"torch-cpu"}, False, None, outside, {2: _trace((960, 256))})
    assert inside.held_on_native and not inside.unobserved
    pooled = {2: [OutsideStorage("output[0]", 1000, 64, pool="libruntime.so", pool_bytes=4096)]}
    assert plan(("torch-cpu",), {"torch-cpu"}, False, None, pooled, {2: _trace()}).unobserved == ()
    unseen = plan(("torch-cpu",), {"torch-cpu"}, False, None, outside, {2: _trace()})
    assert unseen.unobserved == (Unobserved("native", "result", "", 2, "output[0]", 64),)
    no_observer = plan(("torch-cpu",), {"torch-cpu"}, False, "not preloaded", outside, {})
    assert not no_observer.held_on_native and no_observer.unobserved[0].why == "not preloaded"
    # a backend with probes of its own (IREE's HAL) says through them where its results live
    assert plan(("torch-cpu", "iree-hal"), {"torch-cpu", "iree-hal"}, True, "not preloaded", outside, {}) \
        == plan(("torch-cpu", "iree-hal"), {"torch-cpu", "iree-hal"}, True, "x", {}, {})
    declared = plan(("torch-cpu", "native"), {"torch-cpu"}, False, None, {}, {})
    assert declared.held_on_native and not declared.unobserved
    assert plan(("torch-cpu", "native"), {"torch-cpu"}, False, "no compiler", {}, {}).unobserved[0].cause == "declared"


INPUT_VIEW_CASES = '''
import numpy as np
import torch
from torch import nn

from conformance.api.case import Case, Workload, register


class ReturnsAViewOfItsInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lin(x), x.t()


def build(seed: int) -> Workload:
    torch.manual_seed(seed)
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((6, 4)).astype(np.float32))
    return Workload(ReturnsAViewOfItsInput(), (x,))


register(Case("numpy-input-view-infer", "inference", "numpy-input", 0, build,
              description="an input made by numpy (its storage not torch's allocator's), returned as a view"))
'''


@needs_native
def test_a_result_in_the_callers_input_memory_is_the_callers(tmp_path: Path) -> None:
    """An input whose memory numpy made (not resizable, as a runtime's buffer is not) returned as a view: the
    result lives in the caller's memory, made before the call, so the pair is judged as any eager pair
    (before, it was a 'memory not observed' skip, as gen-dag-6634 was beside a second backend)."""
    (tmp_path / "input_view_cases.py").write_text(INPUT_VIEW_CASES)
    proc = subprocess.run([sys.executable, "-m", "conformance", "run", "--cases", "input_view_cases.py", "--case",
                           "numpy-input-view-infer", "--backend", "eager", "--out", "out", "--no-history",
                           "--no-report"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "numpy-input-view-infer@eager: pass" in proc.stdout + proc.stderr
