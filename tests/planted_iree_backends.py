"""IREE adapters with planted lifetime faults: the memory comparison must still catch them.

Selected as ``tests.planted_iree_backends:ClassName``; they compile exactly like
``iree-boxed`` and differ only in what their wrapper keeps alive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from conformance.backends.iree import BoxedLaunch, CompileFn, IreeBoxedBackend, boxed_compile, boxed_source, runtime
from conformance.backends.iree_cache import jit_loader

KEPT: list[Any] = []


class _KeepingLaunch(BoxedLaunch):
    def __call__(self, args: list[Any]) -> Any:
        results = super().__call__(args)
        KEPT.append([r for r in results if isinstance(r, torch.Tensor)])  # never released: a leak
        return results


def keeping_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    launch = boxed_compile(gm, example_inputs)
    return _KeepingLaunch(launch.launch, launch.none_positions)


class LeakyResultsBackend(IreeBoxedBackend):
    """Keeps a reference to every result IREE returns (they live in IREE memory)."""

    name = "planted-iree-leaky-results"
    compile_graph: ClassVar[CompileFn] = staticmethod(keeping_compile)


class _KeepLastForwardResultLaunch(BoxedLaunch):
    def __call__(self, args: list[Any]) -> Any:
        results = super().__call__(args)
        KEPT.append([r for r in results if isinstance(r, torch.Tensor)][-1])  # one result, never released
        return results


def last_forward_result_keeping_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    launch = boxed_compile(gm, example_inputs)
    backward = any(n.op == "placeholder" and n.name.startswith("tangents") for n in gm.graph.nodes)
    return launch if backward else _KeepLastForwardResultLaunch(launch.launch, launch.none_positions)


class KeepsOneForwardResultBackend(IreeBoxedBackend):
    """Keeps the last result of every forward call (one small saved activation): IREE returned it in the
    call's one result buffer, so the whole buffer stays allocated."""

    name = "planted-iree-keeps-one-result"
    compile_graph: ClassVar[CompileFn] = staticmethod(last_forward_result_keeping_compile)


# -- a carried buffer kept per trip, inside the compiled loop ---------------------------------

#: The carries the planted loop kept, one HAL buffer view per trip (tests clear it).
KEPT_TRIPS: list[Any] = []
KEEPER = "conformance_leak"

_BODY = re.compile(r"func\.func private @(?P<name>[\w$.]*body[\w$.]*)\((?P<params>[^)]*)\)[^{]*\{\n(?P<ops>.*?)\n"
                   r"(?P<ret>    return (?P<values>[^:]*) : (?P<types>[^\n]*))\n", re.S)
_TENSOR = re.compile(r"!torch\.vtensor<\[(?P<dims>[\d,]+)\],(?P<dtype>f\d+)>")


def keep_a_carry_per_trip(mlir: str) -> str:
    """Every ``while_loop`` body of the imported program hands its first new floating-point carry (a
    value it computes, not one it passes through) to the host each trip, which keeps it: the
    ``scf.while`` bug's effect, one carried buffer per trip never freed, planted in IREE's own program."""
    planted, count = [], 0

    def plant(m: re.Match[str]) -> str:
        nonlocal count
        values = [v.strip() for v in m["values"].split(",")]
        types = [t.strip() for t in re.split(r",\s*(?=!torch)", m["types"])]
        for value, type_ in zip(values, types):
            tensor = _TENSOR.fullmatch(type_)
            if tensor is None or value.startswith("%arg"):
                continue
            builtin = f"tensor<{tensor['dims'].replace(',', 'x')}x{tensor['dtype']}>"
            count += 1
            planted.append(m["name"])
            return (f"{m.group(0)[:m.start('ret') - m.start()]}"
                    f"    %kept{count} = torch_c.to_builtin_tensor {value} : {type_} -> {builtin}\n"
                    f"    %kept_view{count} = hal.tensor.export %kept{count} : {builtin} -> !hal.buffer_view\n"
                    f"    func.call @{KEEPER}.keep(%kept_view{count}) : (!hal.buffer_view) -> ()\n"
                    f"{m['ret']}\n")
        return m.group(0)

    out = _BODY.sub(plant, mlir)
    assert planted, "no while_loop body with a computed floating-point carry to keep"
    return out.replace("module {\n", f"module {{\n  func.func private @{KEEPER}.keep(!hal.buffer_view)\n", 1)


class _Keeper:
    def __init__(self, iface: Any) -> None:
        pass

    def keep(self, view: Any) -> None:
        KEPT_TRIPS.append(view)


@dataclass
class _KeeperLaunch:
    """What :class:`BoxedLaunch` calls: the compiled module in a context that also holds the keeper."""

    module: Any
    entry_point: str

    @property
    def _is_async(self) -> bool:
        return self.entry_point.endswith("$async")

    def _resolve_target_binary(self, device: Any) -> tuple[Any, Any]:
        from iree.runtime import PyModuleInterface, VmContext

        iface = PyModuleInterface(KEEPER, _Keeper)
        iface.export("keep", "0r_v", _Keeper.keep)
        context = VmContext(device.vm_instance, [device.create_hal_module(), iface.create(), self.module])
        return context, self.module.lookup_function(self.entry_point)


def carry_keeping_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    source = boxed_source(gm, example_inputs)
    module = jit_loader(keep_a_carry_per_trip(source.mlir))(runtime().device)
    return BoxedLaunch(_KeeperLaunch(module, source.entry_point), source.none_positions)


class LeakyLoopCarryBackend(IreeBoxedBackend):
    """iree-boxed's loop route, with each loop's program keeping one carried buffer per trip (HAL memory)."""

    name = "planted-iree-leaky-loop-carry"
    compile_graph: ClassVar[CompileFn] = staticmethod(carry_keeping_compile)


# -- a buffer the runtime allocates inside the call, beyond what the program declares -------------

SCRATCH = "conformance_scratch"
#: bytes the planted host call allocates (and frees) inside each call of the program
SCRATCH_BYTES = 4096


class _Scratch:
    def __init__(self, iface: Any) -> None:
        pass

    def scratch(self) -> None:
        from iree.runtime import BufferUsage, MemoryType

        buffer = runtime().allocator.allocate_buffer(memory_type=MemoryType.DEVICE_LOCAL,
                                                     allowed_usage=BufferUsage.DEFAULT,
                                                     allocation_size=SCRATCH_BYTES)
        del buffer  # freed before the call returns: a transient, but not one the program allocates


def call_scratch_first(mlir: str) -> str:
    """The imported program's entry calls the host's ``scratch`` before its first op."""
    entry = re.search(r"func\.func @main\([^\n]*\{\n", mlir)
    assert entry, "no main function in the imported program"
    return (f"{mlir[:entry.end()]}    func.call @{SCRATCH}.scratch() : () -> ()\n{mlir[entry.end():]}"
            .replace("module {\n", f"module {{\n  func.func private @{SCRATCH}.scratch()\n", 1))


@dataclass
class _ScratchLaunch(_KeeperLaunch):
    def _resolve_target_binary(self, device: Any) -> tuple[Any, Any]:
        from iree.runtime import PyModuleInterface, VmContext

        iface = PyModuleInterface(SCRATCH, _Scratch)
        iface.export("scratch", "0v_v", _Scratch.scratch)
        context = VmContext(device.vm_instance, [device.create_hal_module(), iface.create(), self.module])
        return context, self.module.lookup_function(self.entry_point)


def scratch_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    source = boxed_source(gm, example_inputs)
    module = jit_loader(call_scratch_first(source.mlir))(runtime().device)
    return BoxedLaunch(_ScratchLaunch(module, source.entry_point), source.none_positions)


class RuntimeScratchBackend(IreeBoxedBackend):
    """iree-boxed with a host call inside each program call that allocates 4 KiB and frees it: transients
    beyond what the compiled program itself allocates."""

    name = "planted-iree-runtime-scratch"
    compile_graph: ClassVar[CompileFn] = staticmethod(scratch_compile)


class HoldsPreviousOutputsBackend(IreeBoxedBackend):
    """Keeps each call's outputs until its next call replaces them (a runtime caching its last results): the
    caller's dropped outputs stay allocated in IREE memory after every step.  The HAL's statistics alone cannot
    show it: each step frees the previous step's outputs as it keeps its own, so its live bytes end where they
    started."""

    name = "planted-iree-holds-previous-outputs"

    def compile(self, case: Any, workload: Any) -> Any:
        step = super().compile(case, workload)
        shipped = step.run

        def run() -> Any:
            out = shipped()
            step.previous = out  # type: ignore[attr-defined]  # released when the next call's outputs replace it
            return out

        step.run = run  # type: ignore[method-assign]
        return step
