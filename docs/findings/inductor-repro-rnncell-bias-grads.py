"""Inductor computes an RNN cell's two bias gradients ahead of the hidden weight's gradient.

``mod-LSTMCell-train`` and ``mod-RNNCell-train`` on inductor (torch 2.13.0+cpu): the received
backward graph computes ``mm`` (grad of ``weight_ih``), ``sum`` (grad of ``bias_ih``), ``mm``
(grad of ``weight_hh``), then ``sum`` again (grad of ``bias_hh``, the same reduction).  Inductor
fuses the two reductions into one kernel (``cpp_fused_sum_*(buf, bufA, bufB)``) and schedules it
before the second ``mm``, so the second bias gradient (``4 x hidden`` floats for an LSTM cell,
``hidden`` for an RNN cell) is allocated one kernel earlier than the graph's order: at the
``mm``'s output, the step's peak, it is already alive.  Measured peak = received-graph model
+ 144 B (LSTMCell 8 -> 12, batch 3) and + 48 B (RNNCell); the measured CPU timeline follows the
generated program exactly.

Runs with plain ``python``: prints the backward wrapper's kernel order and exits 1 while the fused
bias-gradient reduction comes before the hidden weight's ``mm``.
"""

import re
import sys

import torch
from torch import nn
from torch._inductor.utils import run_and_get_code


def main() -> int:
    torch.manual_seed(0)
    cell = nn.LSTMCell(8, 12)
    x = torch.randn(3, 8)

    def step(x: torch.Tensor) -> torch.Tensor:
        return sum((t.square().mean() for t in cell(x)), torch.zeros(()))

    compiled = torch.compile(step, backend="inductor")

    def run() -> None:
        compiled(x).backward()

    _, sources = run_and_get_code(run)
    backward = sources[-1]
    calls = [line.strip() for line in backward.splitlines()
             if re.match(r"(extern_kernels\.mm|cpp_fused_sum_\d+)\(", line.strip())]
    print("\n".join(calls))
    mms = [i for i, c in enumerate(calls) if c.startswith("extern_kernels.mm(")]
    sums = [i for i, c in enumerate(calls) if c.startswith("cpp_fused_sum")]
    early = len(mms) >= 2 and bool(sums) and sums[0] < mms[-1]
    print("bias gradients reduced before the hidden weight's mm:" if early else "graph order kept:", early)
    return 1 if early else 0


if __name__ == "__main__":
    sys.exit(main())
