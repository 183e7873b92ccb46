"""Load a transformers BERT checkpoint (config.json + model.safetensors) into posattn.

A BERT checkpoint is posattn's [learned] encoding with segments at the input, post-LN, GELU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file

from .config import EncoderConfig
from .errors import invalid
from .model import Encoder

# BERT parameter name -> posattn parameter name (regex substitutions, applied in order).
_RENAMES = [
    (r"^embeddings\.word_embeddings\.", "embeddings.word."),
    (r"^embeddings\.token_type_embeddings\.", "embeddings.segment."),
    (r"^embeddings\.position_embeddings\.", "encoding.table."),
    (r"^embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.query\.", r"layers.\1.attention.q_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.key\.", r"layers.\1.attention.k_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.value\.", r"layers.\1.attention.v_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.out_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.ffn.up."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.ffn.down."),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.ffn_norm."),
]
# Present in BERT checkpoints, not part of an encoder's hidden states.
_IGNORED = (r"^pooler\.", r"position_ids$", r"^cls\.")


def config_from_bert(bert: dict, **overrides) -> EncoderConfig:
    """EncoderConfig equivalent to a transformers BertConfig dict."""
    if bert.get("position_embedding_type", "absolute") != "absolute":
        raise invalid(
            "position_embedding_type",
            bert["position_embedding_type"],
            "only absolute BERT checkpoints map onto posattn's [learned] encoding",
        )
    if bert.get("hidden_act", "gelu") != "gelu":
        raise invalid("hidden_act", bert["hidden_act"], "posattn's encoder uses exact gelu")
    values = dict(
        vocab_size=bert["vocab_size"],
        d_model=bert["hidden_size"],
        num_layers=bert["num_hidden_layers"],
        num_heads=bert["num_attention_heads"],
        ffn_dim=bert["intermediate_size"],
        max_len=bert["max_position_embeddings"],
        dropout=bert.get("hidden_dropout_prob", 0.1),
        attention_dropout=bert.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=bert.get("layer_norm_eps", 1e-12),
        encoding="learned",
        segments="input",
        num_segments=bert.get("type_vocab_size", 2),
        norm="post",
        init_std=bert.get("initializer_range", 0.02),
    )
    values.update(overrides)
    return EncoderConfig(**values)


def state_dict_from_bert(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename BertModel weights (with or without a `bert.` prefix) to posattn's Encoder."""
    renamed = {}
    for name, tensor in weights.items():
        name = name.removeprefix("bert.")
        if any(re.search(pattern, name) for pattern in _IGNORED):
            continue
        new = name
        for pattern, replacement in _RENAMES:
            new = re.sub(pattern, replacement, new)
        if new == name:
            raise invalid("checkpoint parameter", name, "not a BertModel parameter posattn knows")
        renamed[new] = tensor
    return renamed


def load_bert(path: str | Path, **overrides) -> Encoder:
    """An Encoder holding the weights of the BERT checkpoint in directory `path`."""
    path = Path(path)
    for required in ("config.json", "model.safetensors"):
        if not (path / required).is_file():
            raise invalid("path", str(path), f"a BERT checkpoint directory containing {required}")
    config = config_from_bert(json.loads((path / "config.json").read_text()), **overrides)
    encoder = Encoder(config)
    encoder.load_state_dict(state_dict_from_bert(load_file(path / "model.safetensors")))
    return encoder
