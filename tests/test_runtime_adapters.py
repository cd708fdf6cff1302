"""The shipped ``openvino`` and ``onnxrt`` adapters, on their real runtimes, in isolation workers (the native
domain is observed there only): their verdicts and figures on small cases, a fault planted in each runtime's
memory caught, the partitions OpenVINO ran in PyTorch on the record, neither runtime changing another
backend's verdict in a shared worker, and ``unavailable_reason`` where the runtime is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.api.result import Result, Status
from conformance.run.isolation import WorkerPool
from tests.planted_runtime_backends import HELD_BYTES

pytest.importorskip("openvino")
pytest.importorskip("onnxruntime")

REPO = Path(__file__).resolve().parent.parent
PLANTED = "tests.planted_runtime_backends"
OPENVINO = "conformance.backends.openvino:OpenVinoBackend"
ONNXRT = "conformance.backends.onnxrt:OnnxRtBackend"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool() as p:
        yield p


def _native(result: Result) -> tuple[int, int]:
    assert result.memory is not None and result.memory.domains is not None, result.reason
    native = result.memory.domains["native"]
    assert native.peak_bytes is not None and native.residual_bytes is not None
    return native.peak_bytes, native.residual_bytes


def _residuals(result: Result) -> list[int]:
    check = result.check("residual")
    assert check is not None, result.checks
    return list(check.figures["residual_per_step"])


def test_openvino_inference_is_measured_and_its_shared_output_buffer_caught(pool: WorkerPool) -> None:
    """OpenVINO's infer request writes every call's result into one buffer (``share_outputs=True``): the output
    the caller kept from call 0 is call 1's.  Its bytes, made by OpenVINO before the call, are counted."""
    result = pool.run("mlp-s-infer", OPENVINO, 300)
    assert result.status == Status.FAIL_PARITY, result.reason
    outputs = result.check("outputs")
    assert outputs is not None and outputs.status == Status.FAIL_PARITY
    assert "call 1 overwrote call 0's output[0]" in outputs.reason
    peak, residual = _native(result)
    assert peak >= 8 * 8 * 4  # its output (float32[8, 8]), in OpenVINO's buffer, counted while the caller holds it
    # what the call leaves: the infer request's tensor objects for this call, in OpenVINO's own library
    kept = result.check("residual")
    assert kept is not None and kept.status == Status.FAIL_RESIDUAL and residual > 0
    assert kept.blamed and all(str(b.get("op", "")).startswith("native:libopenvino") for b in kept.blamed)


def test_a_buffer_held_across_calls_through_openvino_fails_residual(pool: WorkerPool) -> None:
    control = pool.run("mlp-s-infer", OPENVINO, 300)
    held = pool.run("mlp-s-infer", f"{PLANTED}:OpenVinoHoldsBufferBackend", 300)
    assert [r - c for r, c in zip(_residuals(held), _residuals(control))] == [HELD_BYTES] * 3
    residual = held.check("residual")
    assert residual is not None and residual.status == Status.FAIL_RESIDUAL
    assert any(str(b.get("op", "")).startswith("native:") and b.get("bytes") == HELD_BYTES for b in residual.blamed)


def test_openvino_training_records_the_partitions_run_in_pytorch(pool: WorkerPool) -> None:
    """OpenVINO 2026.4 cannot convert the forward partition of a training step (its run raises; the partition
    falls back to its torch graph for good) and leaves the backward's tanh/threshold gradients to PyTorch."""
    result = pool.run("mlp-s-train", OPENVINO, 300)
    ran_in = {(f["part"].split()[0], f["ran_in"]) for f in result.fallbacks}
    assert ("forward", "pytorch") in ran_in and ("backward", "pytorch") in ran_in, result.fallbacks
    backward = next(f for f in result.fallbacks if f["part"].startswith("backward"))
    assert "aten.threshold_backward.default" in backward["ops"]
    assert any(n.startswith("fallback: forward graph 0 fused_0 ran in pytorch") for n in result.notes), result.notes


def test_onnxrt_inference_is_measured_and_outputs_held_across_calls_are_caught(pool: WorkerPool) -> None:
    control = pool.run("mlp-s-infer", ONNXRT, 300)
    peak, residual = _native(control)
    assert peak >= 2 * 8 * 32 * 4 and residual == 0  # two float32[8, 32] activations at once; nothing left
    assert control.fallbacks == []
    held = pool.run("mlp-s-infer", f"{PLANTED}:OnnxRtHoldsOutputsBackend", 300)
    assert held.status == Status.FAIL_RESIDUAL, held.reason
    assert [r - c for r, c in zip(_residuals(held), _residuals(control))] == [8 * 8 * 4] * 3


def _judged(result: Result) -> tuple[str, str, list[dict[str, object]]]:
    """What a neighbour could change: the values (parity) and whether the pair ran at all.  Not the bytes:
    ONNX Runtime keeps a few tens of bytes past some calls, not the same ones in every run."""
    parity = result.check("parity")
    ran = str(result.status) if result.status in (Status.FAIL_RUN, Status.FAIL_COMPILE, Status.CRASH) else "ran"
    return str(parity.status if parity is not None else None), ran, result.fallbacks


def test_runtimes_in_one_worker_change_no_other_backends_verdict(pool: WorkerPool) -> None:
    """openvino, onnxrt and eager one after another in a worker that ran the tests above, against each alone in a
    fresh worker: the same values and outcome (OpenVINO's decompositions, its wrong ``convolution_backward``
    among them, stay its own; ONNX Runtime's mod-Conv2d-train was a fail-run with OpenVINO's gradient shape)."""
    case = "mod-Conv2d-train"
    together = {b: pool.run(case, b, 300) for b in (OPENVINO, ONNXRT, "eager")}
    for backend in (OPENVINO, ONNXRT):
        with WorkerPool() as fresh:
            alone = fresh.run(case, backend, 300)
        assert _judged(alone) == _judged(together[backend]), (backend, alone.reason, together[backend].reason)
    eager = together["eager"]  # alone it is byte-exact: a pass is the same verdict
    assert eager.status == Status.PASS, eager.reason


@pytest.mark.parametrize(("backend", "module", "extra"), [
    ("OpenVinoBackend", "openvino", "openvino"), ("OnnxRtBackend", "onnxruntime", "onnxrt")])
def test_unavailable_where_the_runtime_is_not_installed(backend: str, module: str, extra: str) -> None:
    """The runtime's import made to fail as a missing package does (``sys.modules[name] = None``)."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules[{module!r}] = None
        from conformance.backends.{"openvino" if extra == "openvino" else "onnxrt"} import {backend}
        print({backend}().unavailable_reason())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"pip install 'torch-conformance[{extra}]'" in done.stdout, done.stdout
