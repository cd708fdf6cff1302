"""Repro: ``torch.compile(mode="reduce-overhead")`` fails to lower a ``while_loop`` whose counter is a CPU
scalar and whose other carry is on the GPU; the default mode compiles the same module.

Plain ``python docs/findings/inductor-repro-cudagraph-while-loop-cpu-counter.py`` on a machine with CUDA
(torch only, no harness).  Exit status 1 while the fault shows, 0 once it is fixed; 2 without CUDA.

Found by the harness's first run on a GPU (H200, torch 2.11.0+cu130): every ``while_loop`` case
whose counter is made with ``torch.zeros((), dtype=torch.int64)`` (no device, as a user writes it on
CPU) is ``fail-compile`` on ``cudagraph`` with ``LoweringException: AssertionError: (0, TensorBox(...
'cpu' ...), TensorBox(... 'cuda:0' ...), device(type='cpu'))``, and passes on ``inductor-cuda``.
Eager runs it on CUDA.  The variant with the counter on the carry's device is printed too.
Without ``fullgraph=True`` Dynamo catches the backend's exception, graph-breaks and runs the loop eagerly:
the program runs, uncompiled (graph break ``GB0219``, "Backend compiler exception").
"""

from __future__ import annotations

import torch
from torch._higher_order_ops.while_loop import while_loop


class Recurrence(torch.nn.Module):
    def __init__(self, counter_on_gpu: bool) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(32, 32) / 32**0.5)
        self.counter_on_gpu = counter_on_gpu

    def forward(self, h: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        def cond(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < steps

        def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(h @ self.w)

        device = h.device if self.counter_on_gpu else None
        return while_loop(cond, body, (torch.zeros((), dtype=torch.int64, device=device), h))[1]


def attempt(mode: str | None, counter_on_gpu: bool) -> bool:
    torch._dynamo.reset()
    model = Recurrence(counter_on_gpu).cuda()
    h, steps = torch.randn(4, 32, device="cuda"), torch.tensor(3, device="cuda")
    expected = model(h, steps)
    try:
        # fullgraph: otherwise Dynamo turns the backend's exception into a graph break and runs the loop eagerly
        compiled = torch.compile(model, mode=mode, dynamic=False, fullgraph=True)
        for _ in range(3):  # warm-up, record, replay under reduce-overhead
            out = compiled(h, steps)
    except Exception as exc:  # the lowering error is what this repro shows
        print(f"mode={mode} counter_on_gpu={counter_on_gpu}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        return False
    ok = torch.allclose(out, expected, rtol=1e-5, atol=1e-6)
    print(f"mode={mode} counter_on_gpu={counter_on_gpu}: compiled, matches eager: {ok}")
    return ok


def main() -> int:
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 2
    print("torch", torch.__version__, torch.cuda.get_device_name())
    default_ok = attempt(None, counter_on_gpu=False)
    fault = not attempt("reduce-overhead", counter_on_gpu=False)
    attempt("reduce-overhead", counter_on_gpu=True)
    if fault and default_ok:
        print("FAULT: reduce-overhead cannot lower the loop the default mode compiles")
        return 1
    print("no fault" if not fault else "reduce-overhead fails, and so does the default mode")
    return 0 if not fault else 1


if __name__ == "__main__":
    raise SystemExit(main())
