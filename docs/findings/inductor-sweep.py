"""Repros: what the module sweep (`conformance run --case 'mod-*' --backend inductor`) found in inductor's
generated programs on torch 2.13.0 (CPU).  Plain `python`, no harness: each finding compiles the
module alone, reads the wrapper inductor wrote (`run_and_get_code`), and shows the program-level
fact the harness's verdict rests on.

    python docs/findings/inductor-sweep.py [FINDING ...]     # default: every finding

Exit status 1 while any named finding still shows, 0 once none does.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import torch
import torch.nn as nn
from torch._inductor.utils import run_and_get_code


def programs(module: nn.Module, *inputs: torch.Tensor, train: bool = False) -> list[str]:
    """The `call` functions of the wrappers inductor generated for one step (forward, then backward)."""
    compiled = torch.compile(module)

    def step() -> None:
        if train:
            out = compiled(*inputs)
            (out.square().mean() + out.mean()).backward()
        else:
            with torch.no_grad():
                compiled(*inputs)

    torch._dynamo.reset()
    _, codes = run_and_get_code(step)
    return [code[code.index("def call(self, args):"):].split("\nrunner = ")[0] for code in codes]


def layout_copy() -> bool:
    """Conv2d inference: the convolution runs channels-last and its result is copied to a contiguous
    buffer for the caller, both alive at once (two output-sized buffers where eager has one)."""
    (forward,) = programs(nn.Conv2d(4, 6, 3, padding=1), torch.randn(2, 4, 8, 8))
    conv = re.search(r"(buf\d+) = extern_kernels\.convolution\(", forward)
    returned = re.search(r"return \((buf\d+), \)", forward)
    if conv is None or returned is None:
        return False
    result = conv.group(1)
    # the wrapper's check of the convolution's result states its layout (assert_size_stride on 2.13,
    # a grouped or metadata assert on later releases): channels-last strides on the same line
    channels_last = re.search(rf"assert\w*\([^\n]*\b{result}\b[^\n]*\(384, 1, 48, 6\)", forward)
    freed_before_return = f"del {result}\n" in forward.split(returned.group(0))[0].split(conv.group(0))[1]
    shows = channels_last is not None and returned.group(1) != result and not freed_before_return
    print(f"layout-copy: convolution result {result} channels-last={channels_last is not None}, "
          f"returned {returned.group(1)}, {result} freed before the copy returns: {freed_before_return}")
    return shows


def fused_buffers() -> bool:
    """CircularPad3d inference: one fused kernel writes every intermediate padded copy and the result,
    all allocated before it runs; the op-by-op schedule needs at most two of them at once."""
    (forward,) = programs(nn.CircularPad3d(1), torch.randn(2, 4, 4, 4, 4))
    kernel = re.search(r"(cpp_fused_\w+)\((.*)\)", forward)
    if kernel is None:
        return False
    written = [a.strip() for a in kernel.group(2).split(",") if a.strip().startswith("buf")]
    print(f"fused-buffers: {kernel.group(1)} writes {len(written)} buffers of the padded size: {written}")
    return len(written) > 2


class BroadcastBaddbmm(nn.Module):
    def forward(self, bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(bias, a, b)


def extern_input_copy() -> bool:
    """baddbmm with a one-element `self` (the op sweep's `baddbmm-1-infer`): eager's kernel reads the broadcast
    view, inductor first copies it into a full-size buffer with a kernel named after baddbmm, then calls
    `extern_kernels.baddbmm(copy, ..., out=result)`: the copy and the result are alive together, twice the peak
    of the op (the same on `stft`: unfold's windows copied densely for `aten._fft_r2c`)."""
    (forward,) = programs(BroadcastBaddbmm(), torch.randn(1), torch.randn(5, 5, 5), torch.randn(5, 5, 10))
    kernel = re.search(r"(cpp_fused_\w*baddbmm\w*)\((.*)\)", forward)
    extern = re.search(r"extern_kernels\.baddbmm\((\w+),", forward)
    if kernel is None or extern is None or extern.group(1) not in kernel.group(2):
        return False
    print(f"extern-input-copy: {kernel.group(1)}({kernel.group(2)}) fills {extern.group(1)}, the broadcast "
          f"operand extern_kernels.baddbmm reads")
    return True


def unused_saved() -> bool:
    """AvgPool2d training: the backward unpacks a saved tensor it never reads and never deletes, so the
    activation lives until the backward returns instead of at `args.clear()`."""
    module = nn.Sequential(nn.AvgPool2d(2))
    x = torch.randn(2, 4, 8, 8)
    scale = nn.Parameter(torch.ones(2, 4, 8, 8))

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale, self.module = scale, module

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.module(x * self.scale)

    backward = programs(Scaled(), x, train=True)[-1]
    unpacked = re.search(r"^\s*(.+) = args$", backward, re.M)
    if unpacked is None:
        return False
    names = [n.strip() for n in unpacked.group(1).split(",")]
    body = backward.split("args.clear()")[1]
    unused = [n for n in names if not re.search(rf"\b{n}\b", body)]
    print(f"unused-saved: the backward takes {names}; never read nor deleted: {unused}")
    return bool(unused)


def result_tuple() -> bool:
    """Transformer inference: the flash-attention op's whole result tuple is kept until a later `del`,
    so its logsumexp (never read) outlives its last use (the pattern of pytorch/pytorch#163227)."""
    torch.manual_seed(0)
    model = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                           dim_feedforward=32, dropout=0.0).eval()
    (forward,) = programs(model, torch.randn(5, 2, 16), torch.randn(5, 2, 16))
    lines = forward.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"\s*(buf\d+) = torch\.ops\.aten\._scaled_dot_product_flash_attention_for_cpu", line)
        if match is None:
            continue
        name = match.group(1)
        taken = next((j for j in range(i + 1, len(lines)) if f"{name}[0]" in lines[j]), None)
        deleted = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == f"del {name}"), None)
        if taken is not None and deleted is not None and deleted > taken + 1:
            print(f"result-tuple: {name} (flash attention's results) taken at line {taken}, deleted at line {deleted}")
            return True
    return False


def multilabel_margin() -> bool:
    """MultiLabelMarginLoss: entries after the first -1 in a target row still count once compiled
    (pytorch/pytorch#141017)."""
    torch.manual_seed(0)
    x, target = torch.randn(4, 5), torch.tensor([[3, 0, -1, 1, 2]] * 4)
    loss = nn.MultiLabelMarginLoss()
    eager, compiled = loss(x, target), torch.compile(loss)(x, target)
    print(f"multilabel-margin: eager {eager.item():.4f}, compiled {compiled.item():.4f}")
    return not torch.allclose(eager, compiled, rtol=1e-4, atol=1e-5)


FINDINGS: dict[str, Callable[[], bool]] = {
    "layout-copy": layout_copy,
    "fused-buffers": fused_buffers,
    "extern-input-copy": extern_input_copy,
    "unused-saved": unused_saved,
    "result-tuple": result_tuple,
    "multilabel-margin": multilabel_margin,
}


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in FINDINGS]
    if unknown:
        print(f"unknown finding(s) {unknown}; known: {', '.join(FINDINGS)}", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}")
    shown = [name for name in names or list(FINDINGS) if FINDINGS[name]()]
    print(f"still showing: {', '.join(shown) or 'none'}")
    return 1 if shown else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
