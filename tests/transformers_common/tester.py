"""posattn's ModelTester: a tiny config and inputs for one model family and one encoding, as
transformers' own model tests build theirs (`BertModelTester` and the like)."""

from __future__ import annotations

import torch

from posattn import (
    PosAttnConfig,
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnForSequenceClassification,
    PosAttnModel,
    PosAttnSeq2SeqConfig,
    PosAttnSeq2SeqModel,
)
from posattn.encodings.linformer import LinformerOptions

# One family per config: the classes that run on it.
FAMILIES = {
    "encoder": (PosAttnModel, PosAttnForMaskedLM, PosAttnForSequenceClassification),
    "causal": (PosAttnModel, PosAttnForCausalLM),
    "seq2seq": (PosAttnSeq2SeqModel, PosAttnForSeq2SeqLM),
}
# The classes that must generate (causal and seq2seq language models).
GENERATES = (PosAttnForCausalLM, PosAttnForSeq2SeqLM)
# Settings beyond an encoding's defaults, run under their own label: DIET's segment bias
# inside attention (Eq. 2) in place of BERT's segment embeddings at the input.
SETTINGS = {"diet-abs+segments": ("diet-abs", {"segments": "attention"})}
# Options without a default (the rotary layout is never implicit).
REQUIRED_OPTIONS = {"rope": {"layout": "half"}, "xpos": {"layout": "half"}}


def random_ids(shape, high: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=generator)


class PosAttnModelTester:
    """Config and inputs of one family ("encoder", "causal" or "seq2seq") with one encoding.

    The attention mask pads the last two positions of every other row (right padding), so
    masked keys are exercised without a fully masked row.
    """

    def __init__(self, parent, family: str, setting: str, batch_size=3, seq_length=7) -> None:
        """setting: an encoding name, or a label of SETTINGS."""
        self.parent, self.family = parent, family
        self.encoding, self.overrides = SETTINGS.get(setting, (setting, {}))
        self.batch_size, self.seq_length = batch_size, seq_length
        self.encoder_seq_length = self.decoder_seq_length = self.key_length = seq_length
        if self.encoding == "linformer":  # keys and values projected to k positions
            self.key_length = LinformerOptions().k
        self.vocab_size = 99
        self.hidden_size = 32
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.intermediate_size = 37
        self.max_len = 64
        self.is_training = True
        self.is_encoder_decoder = family == "seq2seq"

    def config_kwargs(self, num_labels: int | None = 3) -> dict:
        """The config's arguments; num_labels=None leaves it out (transformers' config JSON
        writes id2label in its place)."""
        kwargs = dict(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            num_layers=self.num_hidden_layers,
            num_heads=self.num_attention_heads,
            ffn_dim=self.intermediate_size,
            max_len=self.max_len,
            encoding=self.encoding,
            encoding_options=dict(REQUIRED_OPTIONS.get(self.encoding, {})),
            causal=self.family == "causal",
            pad_token_id=0,
            **self.overrides,
        )
        if num_labels is not None:
            kwargs["num_labels"] = num_labels
        return kwargs

    def get_config(self) -> PosAttnConfig:
        if self.is_encoder_decoder:
            return PosAttnSeq2SeqConfig(**self.config_kwargs())
        return PosAttnConfig(**self.config_kwargs())

    def prepare_config_and_inputs_for_common(self):
        generator = torch.Generator().manual_seed(0)
        shape = (self.batch_size, self.seq_length)
        # Ids from 4 on: the special ids (pad 0, bos 2, eos 3) never occur inside a row.
        input_ids = random_ids(shape, self.vocab_size - 4, generator) + 4
        mask = torch.ones(shape, dtype=torch.long)
        mask[1::2, -2:] = 0
        inputs = {"input_ids": input_ids, "attention_mask": mask}
        if self.family == "encoder":
            inputs["token_type_ids"] = random_ids(shape, 2, generator)
        if self.is_encoder_decoder:
            inputs["decoder_input_ids"] = random_ids(shape, self.vocab_size - 4, generator) + 4
            inputs["decoder_attention_mask"] = torch.ones(shape, dtype=torch.long)
        return self.get_config(), inputs
