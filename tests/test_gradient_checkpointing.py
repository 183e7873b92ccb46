"""`model.gradient_checkpointing_enable()` on every stack (encoder, causal LM, encoder-decoder):
the layers really recompute in the backward pass, and every gradient (positional parameters
included) equals the un-checkpointed model's, without dropout and with dropout under one seed
(torch's checkpoint restores the RNG state for the recomputation)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import tiny_config, tiny_seq2seq_config
from transformers import DynamicCache

from posattn import (
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
)
from posattn.errors import PosAttnConfigError

pytestmark = pytest.mark.filterwarnings("ignore:`gradient_checkpointing_enable` is deprecated")


def masked_lm(encoding: str, dropout: float) -> PosAttnForMaskedLM:
    config = tiny_config(encoding, dropout=dropout, attention_dropout=dropout)
    return PosAttnForMaskedLM(config)


def causal_lm(encoding: str, dropout: float) -> PosAttnForCausalLM:
    config = tiny_config(
        encoding, causal=True, segments="none", dropout=dropout, attention_dropout=dropout
    )
    return PosAttnForCausalLM(config)


def seq2seq(encoding: str, dropout: float) -> PosAttnForSeq2SeqLM:
    config = tiny_seq2seq_config(
        encoding,
        vocab_size=40,
        dropout=dropout,
        attention_dropout=dropout,
        label_smoothing=0.1,
    )
    return PosAttnForSeq2SeqLM(config)


def batch(kind: str) -> dict:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 40, (2, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    if kind == "seq2seq":
        labels = torch.randint(4, 40, (2, 7), generator=generator)
        return dict(input_ids=ids, attention_mask=mask, labels=labels)
    labels = ids.clone()
    if kind == "masked":
        labels[:, ::2] = -100
    return dict(input_ids=ids, attention_mask=mask, labels=labels)


def gradients(model, inputs: dict, seed: int) -> dict[str, torch.Tensor]:
    model.zero_grad()
    torch.manual_seed(seed)
    model(**inputs).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def layer_ffn_calls(model) -> list[int]:
    """Counts calls of each layer's feed-forward: inside the checkpointed forward, so a
    recomputation counts twice (a pre-hook: the recomputation stops as soon as it has the
    tensors the backward needs, possibly inside the feed-forward)."""
    calls = []
    for module in model.modules():
        if type(module).__name__ in ("EncoderLayer", "DecoderLayer"):
            calls.append(0)
            index = len(calls) - 1

            def count(*_, index=index):
                calls[index] += 1

            module.ffn.register_forward_pre_hook(count)
    return calls


CASES = [
    ("masked", masked_lm, "tupe-r"),
    ("masked", masked_lm, "shaw"),
    ("masked", masked_lm, "diet-abs"),
    ("causal", causal_lm, "t5"),
    ("causal", causal_lm, "rope"),
    ("seq2seq", seq2seq, "diet-rel"),
    ("seq2seq", seq2seq, "sinusoidal"),
]


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated")
@pytest.mark.parametrize("dropout", [0.0, 0.2])
@pytest.mark.parametrize(("kind", "build", "encoding"), CASES)
def test_checkpointed_gradients_equal_plain_ones(kind, build, encoding, dropout):
    torch.manual_seed(0)
    plain = build(encoding, dropout).double().train()
    checkpointed = copy.deepcopy(plain)
    checkpointed.gradient_checkpointing_enable()
    assert checkpointed.is_activation_checkpointing
    inputs = batch(kind)
    expected = gradients(plain, inputs, seed=5)
    calls = layer_ffn_calls(checkpointed)
    got = gradients(checkpointed, inputs, seed=5)
    assert calls and all(count == 2 for count in calls), calls  # forward + recompute
    assert expected.keys() == got.keys()
    positional = [name for name in got if ".encoding." in name]
    assert positional or encoding in ("sinusoidal", "rope")
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], msg=name)
    if dropout:
        # The seed matters, so the equality above compared the same dropout masks.
        assert any(
            not torch.allclose(gradients(plain, inputs, seed=6)[name], expected[name])
            for name in expected
        )


def test_disabling_restores_the_plain_forward_and_eval_ignores_it():
    model = causal_lm("alibi", 0.0).double()
    model.activation_checkpointing_enable()  # transformers 5's name for the same switch
    calls = layer_ffn_calls(model)
    model.eval()
    with torch.no_grad():
        model(torch.randint(4, 40, (1, 5)))
    assert calls == [1, 1]
    model.train()
    model.activation_checkpointing_disable()
    model(**batch("causal")).loss.backward()
    assert calls == [2, 2]


def test_a_cache_in_checkpointed_training_is_dropped_when_empty_else_refused():
    model = causal_lm("rope", 0.0).double().train()
    model.activation_checkpointing_enable()
    ids = torch.randint(4, 40, (2, 5))
    empty = DynamicCache()
    model(ids, past_key_values=empty).logits.sum().backward()
    assert empty.get_seq_length() == 0  # the recomputation did not append twice
    filled = DynamicCache()
    model.eval()
    with torch.no_grad():
        model(ids, past_key_values=filled)
    model.train()
    with pytest.raises(PosAttnConfigError, match="past_key_values"):
        model(ids[:, :1], past_key_values=filled)


def test_reentrant_checkpointing_is_refused_with_the_reason():
    model = masked_lm("tupe-r", 0.0)
    with pytest.raises(PosAttnConfigError, match="use_reentrant"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert model.is_activation_checkpointing


def test_no_split_modules_name_the_repeated_layers_of_every_stack():
    for model in (masked_lm("t5", 0.0), causal_lm("rope", 0.0), seq2seq("t5", 0.0)):
        layers = {type(m).__name__ for m in model.modules() if hasattr(m, "ffn")}
        assert layers and layers <= set(model._no_split_modules)
    assert {type(m).__name__ for m in seq2seq("t5", 0.0).modules() if hasattr(m, "ffn")} == {
        "EncoderLayer",
        "DecoderLayer",
    }


@pytest.mark.parametrize("build", [masked_lm, seq2seq])
def test_input_embeddings_require_grad_while_the_hook_is_on(build):
    """`enable_input_require_grads` (adapters over frozen embeddings) makes the input
    embeddings' output require grad until `disable_input_require_grads`."""
    model = build("t5", 0.0)
    embeddings = model.get_input_embeddings()
    embeddings.requires_grad_(False)
    outputs = []
    embeddings.register_forward_hook(lambda module, args, out: outputs.append(out))
    ids, encoder = torch.randint(4, 40, (1, 5)), model.get_encoder()
    model.enable_input_require_grads()
    encoder(ids)
    model.disable_input_require_grads()
    encoder(ids)
    assert [out.requires_grad for out in outputs] == [True, False]
