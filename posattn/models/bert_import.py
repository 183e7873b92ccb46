"""Start from a transformers BERT checkpoint (config.json + model.safetensors).

Content weights (word and segment embeddings, attention, feed-forward, LayerNorms, and the MLM
head when the checkpoint has one) are copied; the positional parameters of the chosen encoding
keep their own initialisation. With encoding="learned" the BERT position table is copied too
and the model computes exactly what transformers' BertModel computes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file

from ..errors import PosAttnConfigError, invalid
from .config import PosAttnConfig
from .masked_lm import PosAttnForMaskedLM
from .pretrained import PosAttnModel, PosAttnPreTrainedModel

# BERT parameter name -> posattn Encoder parameter name (regex substitutions).
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
# BERT's MLM head -> posattn's MaskedLMHead (the decoder weight is tied to the embeddings).
_HEAD_RENAMES = [
    (r"^cls\.predictions\.transform\.dense\.", "head.dense."),
    (r"^cls\.predictions\.transform\.LayerNorm\.", "head.norm."),
    (r"^cls\.predictions\.(decoder\.)?bias$", "head.decoder.bias"),
]
# Present in BERT checkpoints, not used by posattn's encoder.
_IGNORED = (
    r"^pooler\.",
    r"position_ids$",
    r"^cls\.seq_relationship\.",
    r"^cls\.predictions\.decoder\.weight$",
)


def config_from_bert(bert: dict, **overrides) -> PosAttnConfig:
    """PosAttnConfig with the sizes of a transformers BertConfig dict (and `overrides`)."""
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
        pad_token_id=bert.get("pad_token_id", 0),
    )
    values.update(overrides)
    return PosAttnConfig(**values)


def _rename(name: str, rules) -> str | None:
    for pattern, replacement in rules:
        renamed, count = re.subn(pattern, replacement, name)
        if count:
            return renamed
    return None


def state_dict_from_bert(weights: dict, with_head: bool) -> tuple[dict, dict]:
    """(encoder weights, MLM head weights) renamed from a BertModel / BertForMaskedLM file."""
    encoder, head = {}, {}
    for name, tensor in weights.items():
        name = name.removeprefix("bert.")
        if any(re.search(pattern, name) for pattern in _IGNORED):
            continue
        if (renamed := _rename(name, _HEAD_RENAMES)) is not None:
            if with_head:
                head[renamed] = tensor
            continue
        renamed = _rename(name, _RENAMES)
        if renamed is None:
            raise invalid("checkpoint parameter", name, "not a BERT parameter posattn knows")
        encoder[renamed] = tensor
    return encoder, head


def read_bert_config(path: str | Path) -> dict:
    """The config.json of a BERT checkpoint directory, with clear errors."""
    path = Path(path)
    for required in ("config.json", "model.safetensors"):
        if not (path / required).is_file():
            raise invalid("path", str(path), f"a BERT checkpoint directory containing {required}")
    try:
        config = json.loads((path / "config.json").read_text())
    except json.JSONDecodeError as error:
        raise invalid("config.json", str(path / "config.json"), f"valid JSON ({error})") from None
    if config.get("model_type", "bert") != "bert":
        raise invalid("model_type", config["model_type"], "a BERT checkpoint (model_type 'bert')")
    return config


def read_bert(path: str | Path) -> tuple[dict, dict]:
    """(config dict, weights) of a BERT checkpoint directory, with clear errors."""
    config = read_bert_config(path)
    try:
        weights = load_file(Path(path) / "model.safetensors")
    except (SafetensorError, OSError) as error:
        raise PosAttnConfigError(
            f"checkpoint file {Path(path) / 'model.safetensors'} is corrupt or unreadable: {error}"
        ) from None
    return config, weights


def import_bert(
    path: str | Path,
    encoding: str = "learned",
    encoding_options: dict | None = None,
    model_class: type[PosAttnPreTrainedModel] = PosAttnModel,
    **overrides,
) -> PosAttnPreTrainedModel:
    """A posattn model holding the content weights of the BERT checkpoint at `path`.

    The BERT position table is used only by encoding="learned"; every other encoding's
    positional parameters keep their own initialisation (as its paper trains them from scratch).
    """
    bert_config, weights = read_bert(path)
    config = config_from_bert(
        bert_config, encoding=encoding, encoding_options=encoding_options or {}, **overrides
    )
    model = model_class(config)
    load_bert_content(model, weights, str(path), keep_positions=encoding == "learned")
    return model


def load_bert_content(
    model: PosAttnPreTrainedModel, weights: dict, source: str, keep_positions: bool = False
) -> None:
    """Copy a BERT checkpoint's content weights (and its MLM head when `model` has one) into
    `model`, whose sizes must be the checkpoint's. BERT's position table is copied only with
    keep_positions (a `learned` model: its first max_len rows); every other positional
    parameter keeps its own initialisation. `source` names the checkpoint in errors."""
    encoder_weights, head_weights = state_dict_from_bert(
        weights, with_head=isinstance(model, PosAttnForMaskedLM)
    )
    table = encoder_weights.pop("encoding.table.weight", None)
    encoder = model.base_model.encoder  # PosAttnModel.encoder, for the bare model and heads
    own = encoder.state_dict()
    if keep_positions and table is not None:
        encoder_weights["encoding.table.weight"] = table[: own["encoding.table.weight"].shape[0]]
    for name, tensor in encoder_weights.items():
        if name in own and own[name].shape != tensor.shape:
            raise invalid(
                f"checkpoint parameter {name}",
                list(tensor.shape),
                f"the model's shape {list(own[name].shape)}: set the model's sizes to "
                f"the checkpoint's ({source})",
            )
    missing, unexpected = encoder.load_state_dict(encoder_weights, strict=False)
    if unexpected:
        raise invalid(
            "checkpoint parameters", unexpected, f"parameters of a {model.config.encoding} model"
        )
    positional = [name for name in missing if not name.startswith(("encoding.", "segment_bias."))]
    if positional:
        raise invalid("checkpoint", source, f"a complete BERT checkpoint; missing {positional}")
    if head_weights:
        model.load_state_dict(head_weights, strict=False)
