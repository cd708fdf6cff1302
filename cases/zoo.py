"""The model zoo: real architectures nobody here wrote, built from configs with random weights.

torchvision (resnet18, mobilenet_v3_small), timm (a tiny ViT) and Hugging Face transformers
(BERT, GPT-2, Llama built from small configs), each as inference and as a training step,
sized to compile in seconds.  Nothing is downloaded: every model is constructed from its
class or config and initialised from the case's seed.

Registered through the ``conformance.cases`` entry point (as a third-party package would
register its own), and only where the library is installed: ``pip install
'torch-conformance[models]'`` (torchvision needs the torch release it was built for, see
``constraints/zoo.txt``).  ``conformance list cases`` says which families are missing here.
Zoo cases run when selected (``--case 'zoo-*'``), not in a run that names no case.

Training steps run with every dropout probability at 0 (a random mask would make the
float64 reference and the backend disagree); inference runs in eval mode, where dropout is
not in the graph at all.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from conformance.api.case import Case, CaseKind, Workload, register, unavailable

BATCH = 2
IMAGE = 32  # side of the square RGB input, unless a model says otherwise
SEQ = 16
VOCAB = 128
CLASSES = 10


@dataclass(frozen=True)
class ZooModel:
    """One architecture: how to build it (random weights) and what it takes."""

    name: str
    library: str  # the module that must import for the model to be registered
    make: Callable[[], nn.Module]
    modality: str  # "image" | "tokens"
    description: str
    image_size: int = IMAGE


class _ImageStep(nn.Module):
    """Classification as a user writes it: logits, or the cross-entropy loss on fixed labels."""

    def __init__(self, net: nn.Module, trains: bool) -> None:
        super().__init__()
        self.net, self.trains = net, trains

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.net(images)
        return nn.functional.cross_entropy(logits, labels) if self.trains else logits


class _TokenStep(nn.Module):
    """A transformers model called as its users call it: logits, or the loss it computes itself."""

    def __init__(self, net: nn.Module, trains: bool) -> None:
        super().__init__()
        self.net, self.trains = net, trains

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.trains:
            return self.net(input_ids=input_ids, labels=labels, use_cache=False).loss
        return self.net(input_ids=input_ids, use_cache=False).logits


def _no_dropout(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


def _resnet18() -> nn.Module:
    return _import("torchvision").models.resnet18(num_classes=CLASSES)


def _mobilenet_v3_small() -> nn.Module:
    return _import("torchvision").models.mobilenet_v3_small(num_classes=CLASSES)


def _vit_tiny() -> nn.Module:
    return _import("timm").create_model("vit_tiny_patch16_224", pretrained=False, img_size=IMAGE, patch_size=8,
                             depth=2, num_classes=CLASSES)


def _hf(config_class: str, model_class: str, **config: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        transformers = _import("transformers")
        cfg = getattr(transformers, config_class)(vocab_size=VOCAB, **config)
        cfg._attn_implementation = "sdpa"  # the fused attention kernel, as transformers picks on CPU
        return getattr(transformers, model_class)(cfg)

    return make


MODELS = (
    # at 32x32 their last stage normalizes 2 values per channel (batch 2, 1x1): gradients too
    # ill-conditioned for a float32-vs-float64 parity check (eager float32 itself is 10% off the
    # float64 reference after two optimizer steps); at 64x64, 8 values
    ZooModel("resnet18", "torchvision", _resnet18, "image",
             "torchvision resnet18 (conv, batch norm, max pool), 2x3x64x64", image_size=64),
    ZooModel("mobilenetv3s", "torchvision", _mobilenet_v3_small, "image",
             "torchvision mobilenet_v3_small (depthwise conv, hardswish, squeeze-excite), 2x3x64x64",
             image_size=64),
    ZooModel("vit-tiny", "timm", _vit_tiny, "image",
             "timm vit_tiny (patch 8, depth 2, fused attention), 2x3x32x32"),
    ZooModel("bert", "transformers",
             _hf("BertConfig", "BertForSequenceClassification", hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=2, intermediate_size=64, max_position_embeddings=64, num_labels=CLASSES,
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
             "tokens", "transformers BERT, 2 layers, hidden 32, sequence classification, 2x16 tokens"),
    ZooModel("gpt2", "transformers",
             _hf("GPT2Config", "GPT2LMHeadModel", n_embd=32, n_layer=2, n_head=2, n_positions=64,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0),
             "tokens", "transformers GPT-2, 2 layers, hidden 32, causal LM, 2x16 tokens"),
    ZooModel("llama", "transformers",
             _hf("LlamaConfig", "LlamaForCausalLM", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64),
             "tokens", "transformers Llama (RoPE, RMSNorm, SiLU MLP, grouped-query attention), 2 layers, "
             "2x16 tokens"),
)


def _builder(zoo: ZooModel, trains: bool) -> Callable[[int], Workload]:
    def build(seed: int) -> Workload:
        net = zoo.make()
        if trains:
            _no_dropout(net)
        if zoo.modality == "image":
            inputs = (torch.randn(BATCH, 3, zoo.image_size, zoo.image_size), torch.randint(0, CLASSES, (BATCH,)))
            return Workload(_ImageStep(net, trains), inputs)
        ids = torch.randint(0, VOCAB, (BATCH, SEQ))
        labels = torch.randint(0, CLASSES, (BATCH,)) if zoo.name == "bert" else ids.clone()
        return Workload(_TokenStep(net, trains), (ids, labels))

    return build


def _installed(library: str) -> bool:
    """Found on the path (importing torchvision or transformers costs seconds per process,
    so the import itself waits for a case's build)."""
    return importlib.util.find_spec(library) is not None


def _import(library: str) -> Any:
    """``library``, or an error that says why it does not load (torchvision built for another
    torch release fails to load its operators)."""
    try:
        return importlib.import_module(library)
    except Exception as exc:
        raise RuntimeError(f"{library} is installed but does not import ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:160]}); it needs the torch release it was built for: "
                           "see constraints/zoo.txt") from exc


def register_zoo() -> None:
    """Register every zoo model whose library is installed here (entry point ``conformance.cases``)."""
    for zoo in MODELS:
        if not _installed(zoo.library):
            unavailable(f"zoo ({zoo.library})", f"{zoo.library} is not installed: pip install "
                        "'torch-conformance[models]' (see constraints/zoo.txt)")
            continue
        for trains in (False, True):
            kind: CaseKind = "train_step" if trains else "inference"
            register(Case(f"zoo-{zoo.name}-{'train' if trains else 'infer'}", kind, "zoo", 0,
                          _builder(zoo, trains), trains=trains,
                          requires=frozenset({"training"}) if trains else frozenset(), in_default=False,
                          description=f"{zoo.description}{': training step' if trains else ''}"))
