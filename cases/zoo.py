"""The model zoo: real architectures nobody here wrote, built from configs with random weights.

torchvision (resnet18, mobilenet_v3_small), timm (a tiny ViT) and twelve Hugging Face transformers
architectures built from tiny configs (encoders: BERT, DistilBERT, RoBERTa; decoders: GPT-2, Llama,
Mistral, Qwen2; encoder-decoders: T5, BART, Whisper; ViT on images, Wav2Vec2 on audio), each as
inference and as a training step, sized to compile in seconds.  Nothing is downloaded: every model is
constructed from its class or config and initialised from the case's seed.  A transformers model
trains as its users train it: the loss it computes itself from ``labels``, stepped by AdamW.

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
    #: a transformers model's inputs by keyword (its modality is then what they are)
    feeds: Feeds | None = None
    #: the optimizer its training step steps with (``None``: the harness's default, SGD with momentum)
    optimizer: str | None = None


class _ImageStep(nn.Module):
    """Classification as a user writes it: logits, or the cross-entropy loss on fixed labels."""

    def __init__(self, net: nn.Module, trains: bool) -> None:
        super().__init__()
        self.net, self.trains = net, trains

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.net(images)
        return nn.functional.cross_entropy(logits, labels) if self.trains else logits


class _HfStep(nn.Module):
    """A transformers model called as its users call it, by keyword: logits, or the loss it computes
    itself from ``labels`` (the step's inputs are the keywords' tensors, in :attr:`names`' order)."""

    def __init__(self, net: nn.Module, trains: bool, names: tuple[str, ...]) -> None:
        super().__init__()
        self.net, self.trains, self.names = net, trains, names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        out = self.net(**dict(zip(self.names, tensors)))
        return out.loss if self.trains else out.logits


#: what a transformers model is fed: keyword -> tensor, drawn from the case's seed (``labels`` only
#: when it trains)
Feeds = Callable[[bool], dict[str, torch.Tensor]]


def _tokens(labels: str = "tokens", decoder: bool = False) -> Feeds:
    """Token ids; ``labels`` are the ids themselves (a language model), or one class per sequence
    (``"classes"``); an encoder-decoder's inference step also gets the decoder's ids."""

    def feeds(trains: bool) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, VOCAB, (BATCH, SEQ))
        fed = {"input_ids": ids}
        if decoder and not trains:
            fed["decoder_input_ids"] = torch.randint(0, VOCAB, (BATCH, SEQ // 2))
        if trains:
            fed["labels"] = torch.randint(0, CLASSES, (BATCH,)) if labels == "classes" else ids.clone()
        return fed

    return feeds


def _signal(name: str, *shape: int, decoder: bool = False) -> Feeds:
    """A non-token input (pixels, mel features, raw audio) of ``shape`` after the batch; labels are
    classes, or (``decoder``) a transcription's token ids."""

    def feeds(trains: bool) -> dict[str, torch.Tensor]:
        fed = {name: torch.randn(BATCH, *shape)}
        if decoder:
            tokens = torch.randint(3, VOCAB, (BATCH, SEQ // 2))
            fed["labels" if trains else "decoder_input_ids"] = tokens
        elif trains:
            fed["labels"] = torch.randint(0, CLASSES, (BATCH,))
        return fed

    return feeds


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
        cfg = getattr(transformers, config_class)(**{"vocab_size": VOCAB, **config})
        cfg._attn_implementation = "sdpa"  # the fused attention kernel, as transformers picks on CPU
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False  # a training step or a one-shot forward keeps no key/value cache
        return getattr(transformers, model_class)(cfg)

    return make


#: a tiny transformer: 2 layers, hidden 32, 2 heads, feed-forward 64, no dropout
_TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
_NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
_DECODER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 64}
_SEQ2SEQ = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
            "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "dropout": 0.0,
            "attention_dropout": 0.0, "activation_dropout": 0.0}


def _transformer(name: str, make: Callable[[], nn.Module], feeds: Feeds, description: str) -> ZooModel:
    return ZooModel(name, "transformers", make, "tokens", f"transformers {description}", feeds=feeds,
                    optimizer="adamw")


TRANSFORMERS = (
    _transformer("bert", _hf("BertConfig", "BertForSequenceClassification", **_TINY, **_NO_DROPOUT,
                             max_position_embeddings=64, num_labels=CLASSES),
                 _tokens("classes"), "BERT, 2 layers, hidden 32, sequence classification, 2x16 tokens"),
    _transformer("distilbert", _hf("DistilBertConfig", "DistilBertForSequenceClassification", dim=32, n_layers=2,
                                   n_heads=2, hidden_dim=64, max_position_embeddings=64, num_labels=CLASSES,
                                   dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0),
                 _tokens("classes"), "DistilBERT, 2 layers, dim 32, sequence classification, 2x16 tokens"),
    _transformer("roberta", _hf("RobertaConfig", "RobertaForMaskedLM", **_TINY, **_NO_DROPOUT,
                                max_position_embeddings=64, pad_token_id=1),
                 _tokens(), "RoBERTa, 2 layers, hidden 32, masked LM, 2x16 tokens"),
    _transformer("gpt2", _hf("GPT2Config", "GPT2LMHeadModel", n_embd=32, n_layer=2, n_head=2, n_positions=64,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0),
                 _tokens(), "GPT-2, 2 layers, hidden 32, causal LM, 2x16 tokens"),
    _transformer("llama", _hf("LlamaConfig", "LlamaForCausalLM", **_DECODER), _tokens(),
                 "Llama (RoPE, RMSNorm, SiLU MLP, grouped-query attention), 2 layers, 2x16 tokens"),
    _transformer("mistral", _hf("MistralConfig", "MistralForCausalLM", **_DECODER, sliding_window=None), _tokens(),
                 "Mistral (grouped-query attention), 2 layers, causal LM, 2x16 tokens"),
    _transformer("qwen2", _hf("Qwen2Config", "Qwen2ForCausalLM", **_DECODER), _tokens(),
                 "Qwen2 (grouped-query attention, biased q/k/v), 2 layers, causal LM, 2x16 tokens"),
    _transformer("t5", _hf("T5Config", "T5ForConditionalGeneration", d_model=32, d_kv=16, d_ff=64, num_layers=2,
                           num_decoder_layers=2, num_heads=2, dropout_rate=0.0, decoder_start_token_id=0,
                           pad_token_id=0),
                 _tokens(decoder=True), "T5 (relative position buckets), 2+2 layers, d_model 32, 2x16 tokens"),
    _transformer("bart", _hf("BartConfig", "BartForConditionalGeneration", **_SEQ2SEQ, max_position_embeddings=64,
                             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                             forced_eos_token_id=None),
                 _tokens(decoder=True), "BART, 2+2 layers, d_model 32, 2x16 tokens"),
    _transformer("hf-vit", _hf("ViTConfig", "ViTForImageClassification", **_TINY, **_NO_DROPOUT, image_size=IMAGE,
                               patch_size=8, num_channels=3, num_labels=CLASSES),
                 _signal("pixel_values", 3, IMAGE, IMAGE), "ViT, patch 8, 2 layers, hidden 32, 2x3x32x32"),
    _transformer("whisper", _hf("WhisperConfig", "WhisperForConditionalGeneration", **_SEQ2SEQ, num_mel_bins=16,
                                max_source_positions=16, max_target_positions=32, pad_token_id=0, bos_token_id=1,
                                eos_token_id=2, decoder_start_token_id=1, suppress_tokens=None,
                                begin_suppress_tokens=None),
                 _signal("input_features", 16, 32, decoder=True),
                 "Whisper (conv front end, 16 mel bins x 32 frames), 2+2 layers, d_model 32, 8 tokens"),
    _transformer("wav2vec2", _hf("Wav2Vec2Config", "Wav2Vec2ForSequenceClassification", **_TINY, conv_dim=(16, 16),
                                 conv_stride=(4, 4), conv_kernel=(8, 4), num_conv_pos_embeddings=8,
                                 num_conv_pos_embedding_groups=2, num_labels=CLASSES, hidden_dropout=0.0,
                                 attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
                                 final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0, feat_extract_norm="group"),
                 _signal("input_values", 400), "Wav2Vec2 (conv feature encoder, group norm), 2 layers, 2x400 samples"),
)


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
    *TRANSFORMERS,
)


def _builder(zoo: ZooModel, trains: bool) -> Callable[[int], Workload]:
    def build(seed: int) -> Workload:
        net = zoo.make()
        if trains:
            _no_dropout(net)
        if zoo.feeds is not None:
            fed = zoo.feeds(trains)
            return Workload(_HfStep(net, trains, tuple(fed)), tuple(fed.values()))
        inputs = (torch.randn(BATCH, 3, zoo.image_size, zoo.image_size), torch.randint(0, CLASSES, (BATCH,)))
        return Workload(_ImageStep(net, trains), inputs)

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
                          _builder(zoo, trains), trains=trains, optimizer=zoo.optimizer if trains else None,
                          requires=frozenset({"training"}) if trains else frozenset(), in_default=False,
                          description=f"{zoo.description}{': training step' if trains else ''}"))
