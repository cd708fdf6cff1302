"""Repro: IREE leaks the result of a ``while_loop`` that runs zero trips (one carried buffer per call).

Plain ``python docs/findings/iree-repro-while-loop-zero-trips-leak.py`` (torch + iree-turbine, no
harness).  Exit status 1 while the fault shows, 0 once it is fixed.

The loop ``h <- tanh(h @ w)`` (everything carried, so the importer's additional-inputs fault stays
out of the way) is exported with ``iree.turbine.aot.export``, compiled for ``llvm-cpu`` and called
with ``iree.runtime`` on a ``local-sync`` device, whose HAL allocator counts the program's own
allocations.  With 3 trips, dropping the result frees everything the call allocated.  With 0 trips
(the condition false on entry) the result is the loop's initial carry, and its 512 B (4x32 fp32)
are never freed: the live bytes grow by 512 B with every call.  A function that returns its argument
without a loop frees it.  This is the ``scf.while`` carried-buffer class of bug the harness's loop
checks look for; the harness shows it as ``fail-residual`` (512 B per step) on ``loop-rnn`` at 0 trips
on ``iree-boxed`` (``conformance.run.scaling.loop_scaling('loop-rnn', ..., (0, 3))``).
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import torch
from torch._higher_order_ops.while_loop import while_loop


class Loop(torch.nn.Module):
    def forward(self, h: torch.Tensor, steps: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        def cond(i, h, n, w):  # type: ignore[no-untyped-def]
            return i < n

        def body(i, h, n, w):  # type: ignore[no-untyped-def]
            return i + 1, torch.tanh(h @ w), n.clone(), w.clone()

        return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h, steps, w))[1]


def main() -> int:
    import iree.runtime as rt
    from iree.turbine import aot

    h, w = torch.randn(4, 32), torch.randn(32, 32) / 6
    exported = aot.export(Loop(), h, torch.tensor(3), w)
    vmfb = bytes(exported.compile(save_to=None, target_backends="llvm-cpu").map_memory())
    config = rt.Config("local-sync")
    module = rt.VmModule.copy_buffer(config.vm_instance, vmfb)
    context = rt.VmContext(config.vm_instance, [rt.create_hal_module(config.vm_instance, config.device), module])
    main_fn = rt.FunctionInvoker(context, config.device, module.lookup_function("main"))
    stats = config.device.allocator

    def live() -> int:
        s = stats.statistics
        return int(s["device_bytes_allocated"] - s["device_bytes_freed"])

    leaked = {}
    for trips in (3, 0):
        before = live()
        for _ in range(4):
            out = main_fn(h.numpy(), np.array(trips, dtype=np.int64), w.numpy())
            expected = Loop()(h, torch.tensor(trips), w)
            assert np.allclose(out.to_host(), expected.numpy(), atol=1e-5)
            del out
            gc.collect()
        leaked[trips] = live() - before
        print(f"{trips} trips: {leaked[trips]} B still allocated after 4 calls with every result dropped")
    return 1 if leaked[0] > 0 else 0


if __name__ == "__main__":
    sys.exit(main())
