"""What oneDNN's LSTM allocates through torch's CPU allocator, from its layouts.

With oneDNN on (the kernels users run), ``aten::lstm`` on float32 CPU tensors runs one
``mkldnn_rnn_layer`` per layer and direction (aten/src/ATen/native/mkldnn/RNN.cpp), and the
autograd engine one ``mkldnn_rnn_layer_backward`` for each.  Beside their outputs they make:

* the **workspace** (training only, ``at::GradMode::is_enabled()``): ``at::empty`` of
  ``workspace_desc().get_size()`` bytes, returned as the layer's fourth output (its shape
  in a traced graph is ``(0,)``) and kept by autograd for the backward;
* the **scratchpad** oneDNN's primitive books (ideep allocates it per call and frees it at
  the call's end), and **weight reorders**: the weights copied into the layout the
  primitive computes with, freed at the call's end;
* ATen's own temporaries: the summed bias (``_shuffle_bias``: ``bias_ih + bias_hh``, or
  zeros without biases) and, in the backward, zeros for an undefined output gradient, a
  contiguous copy of a non-contiguous one, and the cloned second bias gradient (an output).

The sizes follow oneDNN's ``rnn_utils`` (src/cpu/rnn/rnn_utils.hpp ``init_conf`` and
``set_workspace_sizes``, rnn_utils.cpp ``set_offsets`` and ``get_good_ld``, ref_rnn.cpp
``init_scratchpad``, common/memory_tracking.hpp ``registry_t::book``):

* ``get_good_ld(d, s) = rnd_up(d, 64 / s)``, plus ``64 / s`` when that is a multiple of 256
  (64-byte aligned rows that avoid 4K aliasing);
* each workspace and scratchpad region starts on a fresh page (``page_size = 4096``):
  ``set_offsets`` rounds the running offset up before every region, empty ones included;
* the workspace of one layer is, in that order: the gates (``T x N x ld(4H)``), the hidden
  states before the projection (``T x N x ld(H)``), the states (``2 x (T+1) x N x
  ld(max(I, H))``: the layer's input and output rows), the cell states (``2 x (T+1) x N x
  H``), and the three gradients of states a backward needs (layer, iteration, cell), all
  float32.  The oneDNN release torch 2.13 bundles (v3.12) books the iteration states once
  (v3.8 booked them twice); the measurements in tests/transients/ hold this;
* the scratchpad registry books the RNN space (its regions, aligned to a page: 4096 more),
  the per-layer pointer arrays (three of weights, one of biases: 8 bytes each, 128-byte
  aligned) and, on the brgemm path, ``brgemm_batch_element_t`` descriptors (40 bytes) per
  thread and K block.

The vector ISA changes two things, both bounded here (:class:`Bounds`):

* inference runs oneDNN's brgemm kernels (x64 with AVX2 or AVX-512), whose weights are
  blocked per gate in blocks of ``n_block = 2 x simd_width`` outputs (``ldgOi32o`` with
  AVX-512, ``ldgOi16o`` with AVX2; rnn_brgemm_utils.cpp ``configure_brgemm``): the hidden
  size is padded to 16 (AVX2) or 32 (AVX-512) per gate;
* the brgemm batch descriptors: ``(K blocks + 1)`` per thread, doubled where oneDNN fuses the
  layer and iteration GEMMs (``brgemm_fwd_iter_layer_fuse_possible``, which depends on the
  blocking it picks); an f32 LSTM's K is one block (``brgemm_calc_k_block``), so 2 to 4 per thread.

Training runs the reference GEMM path, whose layouts do not depend on the ISA: the
forward reorders the weights to ``ldigo`` with ``ld = get_good_ld(4H)``; the backward to
``ldgoi`` with ``ld = get_good_ld(I)`` (and ``get_good_ld(H)``), skipped where that is the
user's own layout, and computes the weight gradients in ``ldigo`` and the bias gradient in
a buffer of its own before copying them out.

A CPU without AVX2 runs other kernels (packed MKL GEMM) this module does not model: it
raises :class:`NotModelled`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PAGE = 4096
F32 = 4
POINTER = 8
ALIGN = 128  # memory_tracking's default (and minimal) alignment
BRGEMM_BATCH_ELEMENT = 40  # sizeof(brgemm_batch_element_t): two pointers, two paddings, a flag
LSTM_GATES = 4


class NotModelled(NotImplementedError):
    """Operands this module cannot say oneDNN's allocations for."""


@dataclass(frozen=True)
class Bounds:
    """Bytes whose exact value depends on the CPU: the least and the most any supported CPU allocates."""

    low: int
    high: int

    def __add__(self, other: Bounds | int) -> Bounds:
        if isinstance(other, int):
            return Bounds(self.low + other, self.high + other)
        return Bounds(self.low + other.low, self.high + other.high)

    __radd__ = __add__

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.low <= value <= self.high


def good_ld(dim: int, itemsize: int = F32) -> int:
    """``rnn_utils::get_good_ld``: rows padded to 64 bytes, not a multiple of 256 elements."""
    step = 64 // itemsize
    ld = math.ceil(dim / step) * step
    return ld + step if ld % 256 == 0 else ld


def _pages(regions: list[int]) -> int:
    """``set_offsets``: each region starts on a page (empty ones too); the size is the last end."""
    offset = 0
    for size in regions:
        offset = math.ceil(offset / PAGE) * PAGE + size
    return offset


@dataclass(frozen=True)
class LstmLayer:
    """One ``mkldnn_rnn_layer`` call: sequence ``T``, batch ``N``, input ``I``, hidden ``H``."""

    T: int
    N: int
    I: int  # noqa: E741 - oneDNN's names (slc/sic/dhc) as the PyTorch source calls them
    H: int

    def _states(self) -> int:
        return 2 * (self.T + 1) * self.N * good_ld(max(self.I, self.H)) * F32

    def _c_states(self) -> int:
        return 2 * (self.T + 1) * self.N * self.H * F32

    def _ws_regions(self, training: bool) -> list[int]:
        """gates, ht, states (layer; iteration states share it), cell states, three diff states, grid."""
        gates = self.T * self.N * good_ld(LSTM_GATES * self.H) * F32 if training else 0
        ht = self.T * self.N * good_ld(self.H) * F32 if training else 0
        diff = 2 * (self.T + 1) * self.N * good_ld(max(self.I, self.H)) * F32 if training else 0
        diff_c = self._c_states() if training else 0
        return [gates, ht, self._states(), self._c_states(), diff, diff, diff_c, 0]

    def workspace(self) -> int:
        """``workspace_desc().get_size()`` of forward training."""
        return _pages(self._ws_regions(True))

    def _scratch_regions(self, training: bool, merged_gates: bool) -> list[int]:
        """scratch gates (one iteration's, or every iteration's where the layer GEMM is merged), ht, diff ht, cell."""
        iters = self.T if merged_gates else 1
        gates = iters * self.N * good_ld(LSTM_GATES * self.H) * F32
        ht = self.N * good_ld(self.H) * F32
        diff_ht = self.N * good_ld(self.H) * F32 if training else 0
        return [gates, ht, diff_ht, 0]

    def _registry(self, space: int) -> int:
        """The registry around the RNN space: its page alignment, three pointer arrays of weights and one of biases."""
        pointers = 3 * (POINTER + ALIGN) + (POINTER * F32 + ALIGN)
        return space + PAGE + pointers

    def training_scratchpad(self, merged: bool) -> int:
        """Forward training and backward (the reference GEMM path): the workspace is apart; ``merged``: the
        layer GEMM runs over the whole sequence at once (``merge_gemm_layer``: forward with a batch
        under 128, backward always), so the scratch gates hold every iteration."""
        space = _pages(self._scratch_regions(True, merged))
        return self._registry(space)

    def inference_scratchpad(self) -> Bounds:
        """Forward inference (brgemm): every state region is in the scratchpad (no workspace), one
        iteration's gates, and the brgemm batch descriptors (one per thread and K block of the larger
        GEMM, plus one, for both GEMMs when oneDNN fuses them)."""
        space = _pages([*self._ws_regions(False), *self._scratch_regions(False, False)])
        threads = torch.get_num_threads()
        # an LSTM's K blocks are whole (brgemm_calc_k_block splits K only for vanilla RNN or AMX, neither
        # an f32 LSTM's): one block per GEMM, plus one, doubled where the two GEMMs are fused
        fewest = (1 + 1) * threads * BRGEMM_BATCH_ELEMENT + ALIGN
        most = 2 * (1 + 1) * threads * BRGEMM_BATCH_ELEMENT + ALIGN
        return Bounds(self._registry(space) + fewest, self._registry(space) + most)

    def inference_weights(self) -> Bounds:
        """Both weights blocked per gate in ``n_block`` outputs: 16 (AVX2) to 32 (AVX-512)."""
        def blocked(block: int) -> int:
            return (self.I + self.H) * LSTM_GATES * math.ceil(self.H / block) * block * F32
        _require_brgemm()
        return Bounds(blocked(16), blocked(32))

    def training_weights(self) -> int:
        """Forward training: both weights reordered to ``ldigo`` with a good leading dimension."""
        return (self.I + self.H) * good_ld(LSTM_GATES * self.H) * F32

    def backward_weights(self) -> int:
        """Backward: the weights in ``ldgoi`` where its good leading dimension is not the user's, and
        the weight and bias gradients computed in oneDNN's own buffers (``ldigo``), copied out after."""
        rows = LSTM_GATES * self.H
        ldgoi = sum(rows * good_ld(k) * F32 for k in (self.I, self.H) if good_ld(k) != k)
        diff = (self.I + self.H) * good_ld(rows) * F32 + rows * F32
        return ldgoi + diff


def _require_brgemm() -> None:
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        raise NotModelled(f"oneDNN's LSTM inference on a {capability} CPU (not the brgemm kernels) is not modelled")


def layer_of(x: torch.Tensor, w_ih: torch.Tensor, hx: torch.Tensor) -> LstmLayer:
    """The layer a ``mkldnn_rnn_layer`` call computes (its input is ``T x N x I``: batch_first is undone before)."""
    return LstmLayer(int(x.shape[0]), int(x.shape[1]), int(w_ih.shape[1]), int(hx.shape[-1]))
