"""Settings a config is given under names it does not declare.

transformers keeps any unknown keyword of a config as an attribute (users store their own
values so), which also keeps a misspelt setting: `PosAttnConfig(encodings="t5")` built the
default encoding and said nothing. posattn reads BERT's names of its settings as its own
(`BERT_ALIASES`), refuses a BERT option it does not have set to another value than the one
it implies (`BERT_FIXED`), and warns of a near spelling of a declared name, which it still
keeps as transformers does: a saved config may carry such attributes on purpose
(transformers' own model tests set `layer_norm_epsilon` on every config they load).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import warnings
from typing import Any

from transformers import PreTrainedConfig

from ..errors import invalid

# BERT's names of settings posattn has under its own names (read through `attribute_map`, so
# `PosAttnConfig(type_vocab_size=3)` sets num_segments and `config.type_vocab_size` reads it).
BERT_ALIASES = {
    "hidden_size": "d_model",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "ffn_dim",
    "max_position_embeddings": "max_len",
    "initializer_range": "init_std",
    "type_vocab_size": "num_segments",
    "hidden_dropout_prob": "dropout",
    "attention_probs_dropout_prob": "attention_dropout",
}
# BERT settings posattn does not have: the values it implies, and what to use for the others.
BERT_FIXED = {
    "hidden_act": ("gelu", "posattn's feed-forward and MLM head use exact gelu"),
    "position_embedding_type": (
        "absolute",
        "positions are chosen by `encoding` (learned is BERT's 'absolute'; "
        "bert-r and tupe-r carry T5's relative buckets; `posattn list` names them all)",
    ),
}
# How close a keyword must be to a declared name to be taken for a misspelling of it
# (difflib's ratio: "encodings" 0.94 to "encoding", "num_labels" 0.80 to "num_layers").
TYPO_CUTOFF = 0.85


class UnknownSettingWarning(UserWarning):
    """A config keyword that is not a setting but looks like a misspelt one."""


@functools.cache  # read on every config construction; a class's fields do not change
def own_settings(config_class: type) -> tuple[str, ...]:
    """The settings a posattn config declares beyond transformers' own, and their aliases."""
    inherited = {field.name for field in dataclasses.fields(PreTrainedConfig)}
    declared = [f.name for f in dataclasses.fields(config_class) if f.name not in inherited]
    return (*declared, *config_class.attribute_map)


def check_unknown_settings(config_class: type, kwargs: dict[str, Any]) -> None:
    """Refuse a BERT option posattn does not have set to a value other than the one it
    implies; warn of a keyword that looks like a misspelt declared setting."""
    for key, value in kwargs.items():
        if key in BERT_FIXED:
            implied, allowed = BERT_FIXED[key]
            if value != implied:
                raise invalid(key, value, f"{implied!r} only: {allowed}")
            continue
        # Aliases, and transformers' own keywords (num_labels, torch_dtype, generation
        # settings, private keys), which its __post_init__ consumes whatever they look like.
        if key in config_class.attribute_map or key.startswith("_"):
            continue
        if hasattr(PreTrainedConfig, key):
            continue
        close = difflib.get_close_matches(key, own_settings(config_class), n=1, cutoff=TYPO_CUTOFF)
        if close:
            warnings.warn(
                f"{config_class.__name__}: {key}={value!r} is not one of its settings and is "
                f"kept as a plain attribute, which nothing reads; did you mean {close[0]!r}?",
                UnknownSettingWarning,
                stacklevel=4,
            )
