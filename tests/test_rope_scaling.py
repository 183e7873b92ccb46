"""RoPE's context-extension rules against transformers' own ROPE_INIT_FUNCTIONS and its Llama
rotation, at lengths below and past the original one."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import tiny_encoder
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from posattn.errors import PosAttnConfigError

HEADS, D_MODEL, MAX_LEN = 2, 32, 24  # head_dim 16: 8 rotated pairs
SCALINGS = [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 16,
        "beta_slow": 2,
        "mscale": 1.0,
        "mscale_all_dim": 0.5,
        "truncate": False,
    },
    {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    {
        "rope_type": "longrope",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "short_factor": [1.0, 1.1, 1.2, 1.4, 1.6, 2.0, 2.5, 3.0],
        "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0],
    },
]


def transformers_config(scaling: dict, base: float = 500.0) -> LlamaConfig:
    config = LlamaConfig(
        hidden_size=D_MODEL, num_attention_heads=HEADS, max_position_embeddings=MAX_LEN
    )
    config.rope_parameters = {**scaling, "rope_theta": base}
    return config


def rope_model(scaling: dict, base: float = 500.0):
    options = {"layout": "half", "base": base, "scaling": scaling}
    return tiny_encoder(
        "rope", d_model=D_MODEL, num_heads=HEADS, max_len=MAX_LEN, encoding_options=options
    )


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s["rope_type"])
@pytest.mark.parametrize("seq_len", [10, 40])
def test_frequencies_equal_transformers(scaling, seq_len):
    inverse, factor = rope_model(scaling).encoding.frequencies(seq_len)
    theirs, their_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](
        transformers_config(scaling), "cpu", seq_len
    )
    torch.testing.assert_close(inverse, theirs.double(), rtol=1e-6, atol=0)
    assert factor == pytest.approx(their_factor, rel=1e-12)


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s["rope_type"])
def test_rotation_equals_llama_with_the_same_rule(scaling):
    torch.manual_seed(0)
    n = 40  # past the original length, where the rules differ from plain RoPE
    q, k = torch.randn(1, HEADS, n, 16), torch.randn(1, HEADS, n, 16)
    terms = rope_model(scaling).encoding.layer_terms(n, torch.device("cpu"), torch.float64)[0]
    ours = terms.transform_qk(q, k)
    rotary = LlamaRotaryEmbedding(transformers_config(scaling))
    if scaling["rope_type"] == "dynamic":  # transformers grows the base on the forward's length
        rotary.inv_freq, rotary.attention_scaling = ROPE_INIT_FUNCTIONS["dynamic"](
            rotary.config, "cpu", n
        )
    if scaling["rope_type"] == "longrope":
        rotary.inv_freq, _ = ROPE_INIT_FUNCTIONS["longrope"](rotary.config, "cpu", n)
    cos, sin = rotary(q.float(), torch.arange(n)[None])
    theirs = apply_rotary_pos_emb(q, k, cos.double(), sin.double())
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)


def test_yarn_changes_the_logits_of_a_model_past_its_length():
    plain = tiny_encoder("rope", encoding_options={"layout": "half"})
    yarn = tiny_encoder(
        "rope", encoding_options={"layout": "half", "scaling": {"rope_type": "yarn", "factor": 4.0}}
    )
    yarn.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 40, (1, 9))
    assert (plain(ids) - yarn(ids)).abs().max() > 1e-4


@pytest.mark.parametrize(
    ("scaling", "message"),
    [
        ({"rope_type": "ntk-by-parts", "factor": 2.0}, "scaling.rope_type"),
        ({"rope_type": "linear"}, "needs ['factor']"),
        ({"rope_type": "linear", "factor": 2.0, "beta_fast": 3}, "keys of rope_type='linear'"),
        ({"rope_type": "yarn", "factor": 0.5}, "scaling.factor=0.5"),
        (
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0},
            "scaling.low_freq_factor",
        ),
        (
            {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]},
            "one factor per rotated pair",
        ),
    ],
)
def test_bad_scaling_is_refused_by_name(scaling, message):
    with pytest.raises(PosAttnConfigError, match=re.escape(message)):
        rope_model(scaling)


def test_scale_and_scaling_together_are_refused():
    with pytest.raises(PosAttnConfigError, match=re.escape("scale=2.0")):
        tiny_encoder(
            "rope",
            encoding_options={
                "layout": "half",
                "scale": 2.0,
                "scaling": {"rope_type": "linear", "factor": 2.0},
            },
        )


def test_a_scaled_rope_model_survives_save_and_load(tmp_path):
    from posattn import PosAttnConfig
    from posattn.models import PosAttnForMaskedLM

    scaling = SCALINGS[2]
    config = PosAttnConfig(
        vocab_size=30,
        d_model=D_MODEL,
        num_heads=HEADS,
        num_layers=1,
        ffn_dim=32,
        max_len=MAX_LEN,
        encoding="rope",
        encoding_options={"layout": "half", "scaling": scaling},
    )
    model = PosAttnForMaskedLM(config).eval()
    model.save_pretrained(tmp_path)
    loaded = PosAttnForMaskedLM.from_pretrained(tmp_path).eval()
    assert loaded.config.encoding_options["scaling"] == scaling
    ids = torch.randint(0, 30, (1, 12))
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
