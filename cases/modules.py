"""The module sweep: every ``torch.nn`` module class with a CPU kernel, alone, at small sizes.

The first models a user tries are made of these: if the harness is not exact on each one
alone, its verdicts on their compositions cannot be read.  Each module is a case for
inference (``mod-<Name>-infer``) and, where it has a gradient, for a training step
(``mod-<Name>-train``): a module without parameters has its first floating input scaled by a
learnable tensor of its shape (so it trains too), and the loss is the mean square plus the mean of
every floating output (so no gradient is zero in exact arithmetic: see :class:`_Step`).
Modules whose forward draws random numbers (``RReLU``, ``FractionalMaxPool``, a dropout with
``p > 0``) run for inference only, in eval mode, where they draw none; dropouts train with
``p = 0``.

:data:`MODULES` lists the ``torch.nn`` classes the sweep covers, and :data:`LEFT_OUT` the ones it
does not, each with the reason; ``tests/test_module_sweep.py`` holds every class ``torch.nn``
exports to one of the two, so a release that adds a module shows up as a failing test.

Selected by ``--case 'mod-*'`` (not in a run that names no case: the sweep is 200 pairs per
backend).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from conformance.api.case import Case, CaseKind, Workload, register

Inputs = Callable[[], tuple[torch.Tensor, ...]]


def _randn(*shape: int) -> Inputs:
    return lambda: (torch.randn(*shape),)


def _pair(*shape: int) -> Inputs:
    return lambda: (torch.randn(*shape), torch.randn(*shape))


def _triple(*shape: int) -> Inputs:
    return lambda: (torch.randn(*shape), torch.randn(*shape), torch.randn(*shape))


VEC = _randn(4, 8)
SEQ = _randn(2, 5, 16)  # batch, sequence, model width
IMG1 = _randn(2, 4, 16)
IMG2 = _randn(2, 4, 8, 8)
IMG3 = _randn(2, 4, 4, 4, 4)


@dataclass(frozen=True)
class SweptModule:
    """One module class at a small size: how to build it and its inputs."""

    name: str  # the case id's part: the class name, and a variant where a class appears twice
    make: Callable[[], nn.Module]
    inputs: Inputs
    trains: bool = True  # has a gradient and draws no random numbers in train mode
    note: str = ""
    what: str = ""  # what the case runs, where it is more than the class alone (a small block)

    def describe(self) -> str:
        """The case's description: the class alone, its variant, or the block it stands in."""
        cls, _, variant = self.name.partition("-")
        if self.what:
            return self.what
        return f"torch.nn.{cls} alone" + (f" ({variant.replace('-', ' ')})" if variant else "")


def _with(cls: type[nn.Module], *args: object) -> Callable[[], nn.Module]:
    return lambda: cls(*args)


def _loss_inputs(n: int = 6, classes: int = 5) -> Inputs:
    return lambda: (torch.randn(n, classes), torch.randint(0, classes, (n,)))


def _positive_pair() -> Inputs:
    return lambda: (torch.rand(4, 8) * 0.9 + 0.05, torch.rand(4, 8))


MODULES: tuple[SweptModule, ...] = (
    # linear, bilinear, identity
    SweptModule("Identity", nn.Identity, VEC),
    SweptModule("Linear", lambda: nn.Linear(8, 6), VEC),
    SweptModule("Bilinear", lambda: nn.Bilinear(8, 6, 5), lambda: (torch.randn(4, 8), torch.randn(4, 6))),
    # convolutions
    SweptModule("Conv1d", lambda: nn.Conv1d(4, 6, 3, padding=1), IMG1),
    SweptModule("Conv2d", lambda: nn.Conv2d(4, 6, 3, padding=1), IMG2),
    SweptModule("Conv3d", lambda: nn.Conv3d(4, 6, 3, padding=1), IMG3),
    SweptModule("Conv1d-BatchNorm1d", lambda: nn.Sequential(
        nn.Conv1d(4, 6, 3, padding=1, bias=False), nn.BatchNorm1d(6), nn.ReLU()), IMG1,
        what="a block: torch.nn.Conv1d (no bias), BatchNorm1d, ReLU"),
    SweptModule("Conv2d-GroupNorm-block", lambda: nn.Sequential(
        nn.Conv2d(4, 8, 3, padding=1, bias=False), nn.GroupNorm(2, 8), nn.SiLU()), IMG2,
        what="a block: torch.nn.Conv2d (no bias), GroupNorm, SiLU"),
    SweptModule("Conv2d-depthwise", lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4), IMG2),
    SweptModule("ConvTranspose1d", lambda: nn.ConvTranspose1d(4, 6, 3, stride=2), IMG1),
    SweptModule("ConvTranspose2d", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2), IMG2),
    SweptModule("ConvTranspose3d", lambda: nn.ConvTranspose3d(4, 6, 3, stride=2), IMG3),
    SweptModule("ConvTranspose1d-grouped", lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, groups=2), IMG1),
    SweptModule("ConvTranspose2d-grouped", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2), IMG2),
    SweptModule("Unfold", lambda: nn.Unfold(3, padding=1), IMG2),
    SweptModule("Fold", lambda: nn.Fold((4, 4), 2), _randn(2, 16, 9)),
    SweptModule("Fold-strided-columns", lambda: nn.Fold((4, 4), 2), lambda: (torch.randn(2, 9, 16).transpose(1, 2),)),
    # activations
    *(SweptModule(cls.__name__, cls, VEC) for cls in (
        nn.ReLU, nn.ReLU6, nn.Sigmoid, nn.Tanh, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.Hardshrink, nn.LeakyReLU,
        nn.LogSigmoid, nn.Softplus, nn.Softshrink, nn.PReLU, nn.Softsign, nn.Tanhshrink, nn.Hardsigmoid,
        nn.Hardswish, nn.SiLU, nn.Mish, nn.Hardtanh)),
    SweptModule("Threshold", lambda: nn.Threshold(0.1, 20.0), VEC),
    SweptModule("GLU", nn.GLU, VEC),
    SweptModule("Softmax", lambda: nn.Softmax(dim=-1), VEC),
    SweptModule("Softmin", lambda: nn.Softmin(dim=-1), VEC),
    SweptModule("LogSoftmax", lambda: nn.LogSoftmax(dim=-1), VEC),
    SweptModule("Softmax2d", nn.Softmax2d, IMG2),
    SweptModule("RReLU", nn.RReLU, VEC, trains=False, note="random slopes in train mode"),
    SweptModule("MultiheadAttention", lambda: nn.MultiheadAttention(16, 2, batch_first=True), _triple(2, 5, 16)),
    # normalization
    SweptModule("BatchNorm1d", lambda: nn.BatchNorm1d(8), VEC),
    SweptModule("BatchNorm2d", lambda: nn.BatchNorm2d(4), IMG2),
    SweptModule("BatchNorm3d", lambda: nn.BatchNorm3d(4), IMG3),
    SweptModule("InstanceNorm1d", lambda: nn.InstanceNorm1d(4, affine=True), IMG1),
    SweptModule("InstanceNorm2d", lambda: nn.InstanceNorm2d(4, affine=True), IMG2),
    SweptModule("InstanceNorm3d", lambda: nn.InstanceNorm3d(4, affine=True), IMG3),
    SweptModule("LayerNorm", lambda: nn.LayerNorm(16), SEQ),
    SweptModule("GroupNorm", lambda: nn.GroupNorm(2, 4), IMG2),
    SweptModule("RMSNorm", lambda: nn.RMSNorm(16), SEQ),
    SweptModule("LocalResponseNorm", lambda: nn.LocalResponseNorm(3), IMG2),
    SweptModule("CrossMapLRN2d", lambda: nn.CrossMapLRN2d(3), IMG2),
    # dropout (p = 0 when training: a random mask would make the references disagree)
    *(SweptModule(cls.__name__, _with(cls, 0.0), shape) for cls, shape in (
        (nn.Dropout, VEC), (nn.Dropout1d, IMG1), (nn.Dropout2d, IMG2), (nn.Dropout3d, IMG3),
        (nn.AlphaDropout, VEC), (nn.FeatureAlphaDropout, IMG2))),
    # padding
    *(SweptModule(cls.__name__, _with(cls, 1), shape) for cls, shape in (
        (nn.ReflectionPad1d, IMG1), (nn.ReflectionPad2d, IMG2), (nn.ReflectionPad3d, IMG3),
        (nn.ReplicationPad1d, IMG1), (nn.ReplicationPad2d, IMG2), (nn.ReplicationPad3d, IMG3),
        (nn.ZeroPad1d, IMG1), (nn.ZeroPad2d, IMG2), (nn.ZeroPad3d, IMG3),
        (nn.CircularPad1d, IMG1), (nn.CircularPad2d, IMG2), (nn.CircularPad3d, IMG3))),
    *(SweptModule(cls.__name__, _with(cls, 1, 0.5), shape) for cls, shape in (
        (nn.ConstantPad1d, IMG1), (nn.ConstantPad2d, IMG2), (nn.ConstantPad3d, IMG3))),
    # embeddings
    SweptModule("Embedding", lambda: nn.Embedding(20, 8), lambda: (torch.randint(0, 20, (4, 6)),)),
    SweptModule("EmbeddingBag", lambda: nn.EmbeddingBag(20, 8, mode="mean"),
                lambda: (torch.randint(0, 20, (12,)), torch.tensor([0, 3, 7, 9]))),
    SweptModule("EmbeddingBag-sum", lambda: nn.EmbeddingBag(20, 8, mode="sum"),
                lambda: (torch.randint(0, 20, (4, 3)),)),
    SweptModule("Embedding-max_norm", lambda: nn.Embedding(20, 8, max_norm=1.0),  # renorms its weight in place
                lambda: (torch.randint(0, 20, (4, 6)),)),
    SweptModule("EmbeddingBag-max-padding_idx", lambda: nn.EmbeddingBag(20, 8, mode="max", padding_idx=0),
                lambda: (torch.randint(0, 20, (4, 3)),)),
    # recurrent
    SweptModule("RNN", lambda: nn.RNN(8, 12), _randn(5, 3, 8)),
    SweptModule("LSTM", lambda: nn.LSTM(8, 12), _randn(5, 3, 8)),
    SweptModule("GRU", lambda: nn.GRU(8, 12), _randn(5, 3, 8)),
    SweptModule("GRU-2layer", lambda: nn.GRU(8, 12, num_layers=2), _randn(5, 3, 8)),
    SweptModule("LSTM-bidirectional", lambda: nn.LSTM(8, 12, bidirectional=True, batch_first=True),
                _randn(3, 5, 8)),
    SweptModule("RNNCell", lambda: nn.RNNCell(8, 12), _randn(3, 8)),
    SweptModule("LSTMCell", lambda: nn.LSTMCell(8, 12), _randn(3, 8)),
    SweptModule("GRUCell", lambda: nn.GRUCell(8, 12), _randn(3, 8)),
    # transformer
    SweptModule("TransformerEncoderLayer",
                lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), SEQ),
    SweptModule("TransformerDecoderLayer",
                lambda: nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True), _pair(2, 5, 16)),
    SweptModule("TransformerEncoder", lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2, enable_nested_tensor=False), SEQ),
    SweptModule("TransformerDecoder", lambda: nn.TransformerDecoder(
        nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2), _pair(2, 5, 16)),
    SweptModule("Transformer", lambda: nn.Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True),
                _pair(2, 5, 16)),
    # pixel shuffles, upsampling, shape
    SweptModule("PixelShuffle", lambda: nn.PixelShuffle(2), IMG2),
    SweptModule("PixelUnshuffle", lambda: nn.PixelUnshuffle(2), IMG2),
    SweptModule("ChannelShuffle", lambda: nn.ChannelShuffle(2), IMG2),
    SweptModule("Upsample-nearest", lambda: nn.Upsample(scale_factor=2), IMG2),
    SweptModule("Upsample-bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), IMG2),
    SweptModule("Upsample-bicubic", lambda: nn.Upsample(scale_factor=2, mode="bicubic"), IMG2),
    SweptModule("Upsample-trilinear", lambda: nn.Upsample(scale_factor=2, mode="trilinear"), IMG3),
    SweptModule("UpsamplingNearest2d", lambda: nn.UpsamplingNearest2d(scale_factor=2), IMG2),
    SweptModule("UpsamplingBilinear2d", lambda: nn.UpsamplingBilinear2d(scale_factor=2), IMG2),
    SweptModule("Flatten", nn.Flatten, IMG2),
    SweptModule("Unflatten", lambda: nn.Unflatten(1, (2, 4)), VEC),
    # pooling
    SweptModule("MaxPool1d", lambda: nn.MaxPool1d(2), IMG1),
    SweptModule("MaxPool2d", lambda: nn.MaxPool2d(2), IMG2),
    SweptModule("MaxPool3d", lambda: nn.MaxPool3d(2), IMG3),
    SweptModule("AvgPool1d", lambda: nn.AvgPool1d(2), IMG1),
    SweptModule("AvgPool2d", lambda: nn.AvgPool2d(2), IMG2),
    SweptModule("AvgPool3d", lambda: nn.AvgPool3d(2), IMG3),
    SweptModule("LPPool1d", lambda: nn.LPPool1d(2, 2), IMG1),
    SweptModule("LPPool2d", lambda: nn.LPPool2d(2, 2), IMG2),
    SweptModule("LPPool3d", lambda: nn.LPPool3d(2, 2), IMG3),
    SweptModule("AdaptiveMaxPool1d", lambda: nn.AdaptiveMaxPool1d(5), IMG1),
    SweptModule("AdaptiveMaxPool2d", lambda: nn.AdaptiveMaxPool2d(3), IMG2),
    SweptModule("AdaptiveMaxPool3d", lambda: nn.AdaptiveMaxPool3d(3), IMG3),
    SweptModule("AdaptiveAvgPool1d", lambda: nn.AdaptiveAvgPool1d(5), IMG1),
    SweptModule("AdaptiveAvgPool2d", lambda: nn.AdaptiveAvgPool2d(3), IMG2),
    SweptModule("AdaptiveAvgPool3d", lambda: nn.AdaptiveAvgPool3d(3), IMG3),
    SweptModule("FractionalMaxPool2d", lambda: nn.FractionalMaxPool2d(2, output_size=4), IMG2, trains=False,
                note="random pooling regions: one draw per call"),
    SweptModule("FractionalMaxPool3d", lambda: nn.FractionalMaxPool3d(2, output_size=2), IMG3, trains=False,
                note="random pooling regions: one draw per call"),
    SweptModule("MaxUnpool2d-roundtrip", lambda: _Unpool(), IMG2,
                what="torch.nn.MaxPool2d (indices returned), then MaxUnpool2d on its output"),
    # distances
    SweptModule("CosineSimilarity", nn.CosineSimilarity, _pair(4, 8)),
    SweptModule("PairwiseDistance", nn.PairwiseDistance, _pair(4, 8)),
    # losses
    *(SweptModule(cls.__name__, cls, _pair(4, 8)) for cls in (
        nn.L1Loss, nn.MSELoss, nn.SmoothL1Loss, nn.HuberLoss, nn.SoftMarginLoss, nn.HingeEmbeddingLoss,
        nn.MultiLabelSoftMarginLoss)),
    SweptModule("CrossEntropyLoss", nn.CrossEntropyLoss, _loss_inputs()),
    SweptModule("NLLLoss", nn.NLLLoss, _loss_inputs()),
    SweptModule("MultiMarginLoss", nn.MultiMarginLoss, _loss_inputs()),
    SweptModule("MultiLabelMarginLoss", nn.MultiLabelMarginLoss,
                lambda: (torch.randn(4, 5), torch.tensor([[3, 0, -1, 1, 2]] * 4))),
    SweptModule("BCELoss", nn.BCELoss, _positive_pair()),
    SweptModule("BCEWithLogitsLoss", nn.BCEWithLogitsLoss, _positive_pair()),
    SweptModule("KLDivLoss", lambda: nn.KLDivLoss(reduction="batchmean"),
                lambda: (torch.randn(4, 8).log_softmax(-1), torch.rand(4, 8).softmax(-1))),
    SweptModule("PoissonNLLLoss", nn.PoissonNLLLoss, _positive_pair()),
    SweptModule("CosineEmbeddingLoss", nn.CosineEmbeddingLoss,
                lambda: (torch.randn(4, 8), torch.randn(4, 8), torch.tensor([1.0, -1.0, 1.0, -1.0]))),
    SweptModule("MarginRankingLoss", nn.MarginRankingLoss,
                lambda: (torch.randn(6), torch.randn(6), torch.tensor([1.0, -1.0] * 3))),
    SweptModule("TripletMarginLoss", nn.TripletMarginLoss, _triple(4, 8)),
    SweptModule("TripletMarginWithDistanceLoss", nn.TripletMarginWithDistanceLoss, _triple(4, 8)),
    SweptModule("LinearCrossEntropyLoss", lambda: nn.LinearCrossEntropyLoss(8, 5),
                lambda: (torch.randn(6, 8), torch.randint(0, 5, (6,)))),
)


class _Unpool(nn.Module):
    """``MaxUnpool2d`` needs the indices ``MaxPool2d`` returns: the round trip users run."""

    def __init__(self) -> None:
        super().__init__()
        self.pool, self.unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, indices = self.pool(x)
        return self.unpool(y, indices)


#: ``torch.nn`` classes the sweep leaves out, and why (the rest of ``torch.nn``'s modules are swept).
LEFT_OUT: dict[str, str] = {
    "Module": "the base class", "Sequential": "a container", "ModuleList": "a container",
    "ModuleDict": "a container", "ParameterList": "a container", "ParameterDict": "a container",
    "Container": "a deprecated container",
    "SyncBatchNorm": "needs a process group (torch.distributed)",
    "RNNBase": "a base class (RNN, LSTM, GRU swept)", "RNNCellBase": "a base class (the cells swept)",
    "MaxUnpool1d": "as MaxUnpool2d (swept through its round trip)",
    "MaxUnpool3d": "as MaxUnpool2d (swept through its round trip)",
    "DataParallel": "a multi-device wrapper", "NLLLoss2d": "a deprecated alias of NLLLoss (swept)",
    "GaussianNLLLoss": "its forward raises on a negative variance (`torch.any(var < 0)`): a branch on tensor "
                       "values, which a step's static ATen graph cannot hold",
    "CTCLoss": "its output's shape depends on the targets' values (aten._ctc_loss has a dynamic output shape): "
               "a step's static ATen graph cannot hold it",
    "AdaptiveLogSoftmaxWithLoss": "returns a named tuple built from python-side cluster index lists; its "
                                  "ops (linear, log_softmax, index_select) are swept",
}


def swept_classes() -> set[str]:
    """The ``torch.nn`` class names the sweep runs."""
    return {m.name.split("-")[0] for m in MODULES} | {"MaxUnpool2d"}


class _Step(nn.Module):
    """The module called as a step: its outputs, or (training) the mean square plus the mean of each
    floating output, summed; ``scaled``: the first floating input is scaled elementwise by a learnable
    tensor (a module without parameters then has a gradient).

    Neither may make a gradient zero in exact arithmetic, which no relative parity can hold (it is
    rounding noise): the mean square alone gives a normalization's bias a zero gradient (its output
    has zero mean), and a scalar scale has a zero gradient through a scale-invariant module
    (``CosineSimilarity``, ``CosineEmbeddingLoss``)."""

    def __init__(self, module: nn.Module, trains: bool, scaled: torch.Size | None) -> None:
        super().__init__()
        self.module, self.trains = module, trains
        self.scale = nn.Parameter(torch.ones(scaled)) if trains and scaled is not None else None

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        if self.scale is not None:
            first = next(i for i, t in enumerate(inputs) if t.is_floating_point())
            inputs = (*inputs[:first], inputs[first] * self.scale, *inputs[first + 1 :])
        out = self.module(*inputs)
        if not self.trains:
            return out
        return sum((t.square().mean() + t.mean() for t in _floating(out)), torch.zeros(()))


def _floating(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, tuple | list):
        return [t for item in out for t in _floating(item)]
    return []


def _builder(swept: SweptModule, trains: bool) -> Callable[[int], Workload]:
    def build(seed: int) -> Workload:
        inputs, module = swept.inputs(), swept.make()
        # only a module without parameters needs the scale to have a gradient: before a normalization,
        # the scale's gradient is zero up to rounding, which no parity check can hold
        floating = [t for t in inputs if t.is_floating_point()]
        scaled = floating[0].shape if floating and not any(True for _ in module.parameters()) else None
        return Workload(_Step(module, trains, scaled), inputs)

    return build


def register_all() -> None:
    """Register the sweep's cases for every module class this torch release has."""
    for swept in MODULES:
        if not hasattr(nn, swept.name.split("-")[0]):
            continue
        for trains in (False, True) if swept.trains else (False,):
            kind: CaseKind = "train_step" if trains else "inference"
            register(Case(f"mod-{swept.name}-{'train' if trains else 'infer'}", kind, "modules", 0,
                          _builder(swept, trains), trains=trains,
                          requires=frozenset({"training"}) if trains else frozenset(), in_default=False,
                          description=f"{swept.describe()}{', training step' if trains else ''}"
                                      f"{f' ({swept.note})' if swept.note else ''}"))


register_all()
