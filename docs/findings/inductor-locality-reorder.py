"""Repro: inductor's `reorder_for_locality` raises linalg.multi_dot's inference peak (torch 2.13.0, CPU).

The op sweep's op-linalg.multi_dot-3-infer (OpInfo sample 3: 2x4, 4x3, 3x5, 5x3, 3x2): the received graph
computes `mm = a3 @ a4` (5x2), `mm_1 = a2 @ mm` (3x2), `mm_2 = a0 @ a1` (2x3), `mm_3 = mm_2 @ mm_1`, so at most
64 B of intermediates are alive (mm_1 and mm_2 beside the result).  The post-grad pass `reorder_for_locality`
(inference graphs only) moves each op's producers right before it, in argument order: `mm_2` is moved ahead of
`mm`, and the wrapper computes `buf0 = a0 @ a1` first and holds it across the other chain, 88 B at its peak
(buf0 + buf1 + buf2).  The harness measured exactly the program's 88 B against the graph's 64 B.  Plain
`python`, no harness: it reads the wrappers (`run_and_get_code`) compiled with and without the pass and
replays their allocations and `del`s.  Exit status 1 while the pass raises the peak, 0 once it does not.
"""

from __future__ import annotations

import math
import re

import torch
import torch._inductor.config as config
from torch._inductor.utils import run_and_get_code

SHAPES = [(2, 4), (4, 3), (3, 5), (5, 3), (3, 2)]
_ALLOC = re.compile(r"^\s*(buf\d+) = empty_strided_cpu\(\(([^()]*)\), \(([^()]*)\), torch\.float32\)")


def wrapper(reorder: bool) -> str:
    """The `call` of the wrapper inductor generates for multi_dot on SHAPES, with the pass on or off."""
    torch._dynamo.reset()
    xs = [torch.randn(*s) for s in SHAPES]
    with config.patch(reorder_for_locality=reorder, fx_graph_cache=False):
        _, (code,) = run_and_get_code(torch.compile(lambda *a: torch.linalg.multi_dot(list(a))), *xs)
    return code[code.index("def call(self, args):"):].split("\nrunner = ")[0]


def peak(code: str) -> int:
    """Most bytes of the wrapper's own buffers alive at once: each lives from its allocation to its `del`."""
    live: dict[str, int] = {}
    top = 0
    for line in code.splitlines():
        if (m := _ALLOC.match(line)) is not None:
            live[m.group(1)] = 4 * math.prod(int(x) for x in m.group(2).replace(" ", "").split(",") if x)
            top = max(top, sum(live.values()))
        elif (d := re.match(r"^\s*del (buf\d+)$", line)) is not None:
            live.pop(d.group(1), None)
    return top


def main() -> int:
    on, off = wrapper(True), wrapper(False)
    first_on = re.search(r"extern_kernels\.mm\((\w+), (\w+)", on)
    first_off = re.search(r"extern_kernels\.mm\((\w+), (\w+)", off)
    print(f"first mm with reorder_for_locality: {first_on and first_on.groups()}, peak {peak(on)} B")
    print(f"first mm without it:               {first_off and first_off.groups()}, peak {peak(off)} B")
    return 1 if peak(on) > peak(off) else 0


if __name__ == "__main__":
    raise SystemExit(main())
