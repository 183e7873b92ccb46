"""transformers' optional outputs: `output_attentions` (the eager probabilities of every layer),
`output_hidden_states` (the embeddings output and every layer's output) and `return_dict=False`
on every model, checked against references computed from each layer's own eager logits."""

from __future__ import annotations

import pytest
import torch
from conftest import PROJECTED, layer_logits, randomised, settings_of, tiny_config

from posattn import (
    ENCODINGS,
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnForSequenceClassification,
    PosAttnModel,
    PosAttnSeq2SeqConfig,
)
from posattn.kernels import build_attention_mask


def batch(n: int = 9):
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 40, (2, n), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    segments = (torch.arange(n) > 4).long().expand(2, n)
    return ids, mask, segments


def reference_probabilities(encoder, x, layer: int, mask, segments) -> torch.Tensor:
    """softmax of the layer's eager logits (`MultiHeadAttention.logits`) for its input x,
    masked as the model masks: written without the attention module's forward."""
    block = encoder.layers[layer]
    if hasattr(block, "self_attention"):  # a decoder layer
        x = block.self_norm(x) if block.pre_norm else x
        terms = encoder.encoding.layer_terms(x.shape[1], x.device, x.dtype)[layer]
        logits = block.self_attention.logits(x, terms)
    else:
        x = block.attention_norm(x) if block.pre_norm else x
        segment_ids = segments if encoder.segment_bias is not None else None
        logits = layer_logits(encoder, x, layer, segment_ids)
    visible = build_attention_mask(mask, x.shape[1], encoder.config.causal, x.device)
    return torch.softmax(logits.masked_fill(~visible, float("-inf")), -1)


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_attentions_are_the_eager_probabilities_and_hidden_states_every_layers_output(
    encoding, norm
):
    causal, segments_mode = settings_of(encoding)[-1]
    config = tiny_config(encoding, causal=causal, segments=segments_mode, norm=norm, kernel="sdpa")
    model = randomised(PosAttnModel(config))
    ids, mask, segments = batch()
    with torch.no_grad():
        plain = model(ids, mask, segments).last_hidden_state
        out = model(ids, mask, segments, output_attentions=True, output_hidden_states=True)
    encoder = model.encoder
    # forcing the eager path for the call changes nothing but what is returned
    torch.testing.assert_close(out.last_hidden_state, plain, rtol=1e-9, atol=1e-9)
    assert isinstance(out.attentions, tuple) and isinstance(out.hidden_states, tuple)
    assert len(out.attentions) == config.num_layers
    assert len(out.hidden_states) == config.num_layers + 1
    embeddings = encoder.layer_inputs(ids, mask, segments)[0]
    torch.testing.assert_close(out.hidden_states[0], embeddings, rtol=0, atol=0)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state, rtol=0, atol=0)
    keys = config.encoding_options.get("k", 32) if encoding in PROJECTED else ids.shape[1]
    for layer, probs in enumerate(out.attentions):
        assert probs.shape == (2, config.num_heads, ids.shape[1], keys)
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]))
        if encoding in PROJECTED:  # rows over the k projected keys: no [n, n] to compare
            continue
        assert (probs[1, :, :6, 6:] == 0).all()  # real queries never see the padded keys
        with torch.no_grad():
            expected = reference_probabilities(
                encoder, out.hidden_states[layer], layer, mask, segments
            )
        torch.testing.assert_close(probs, expected, rtol=1e-9, atol=1e-12)
    # each recorded hidden state is the layer applied to the one before
    _, terms, visible, segment_bias = encoder.layer_inputs(ids, mask, segments)
    for layer in range(config.num_layers - (norm == "pre")):
        with torch.no_grad():
            after = encoder.layers[layer](
                out.hidden_states[layer], terms[layer], visible, segment_bias[layer]
            )
        torch.testing.assert_close(out.hidden_states[layer + 1], after, rtol=1e-12, atol=1e-12)


def test_config_defaults_and_return_dict_false_give_transformers_tuples():
    config = tiny_config("t5", num_labels=3)
    ids, mask, _ = batch()
    labels = torch.tensor([0, 2])
    model = randomised(PosAttnForSequenceClassification(config))
    with torch.no_grad():
        full = model(ids, mask, labels=labels, output_attentions=True, output_hidden_states=True)
        as_tuple = model(
            ids,
            mask,
            labels=labels,
            output_attentions=True,
            output_hidden_states=True,
            return_dict=False,
        )
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 4
    loss, logits, hidden_states, attentions = as_tuple
    torch.testing.assert_close(loss, full.loss)
    torch.testing.assert_close(logits, full.logits)
    assert len(hidden_states) == 3 and len(attentions) == 2
    for a, b in zip(attentions, full.attentions, strict=True):
        torch.testing.assert_close(a, b)
    # the config's output_* and return_dict are the defaults of every call
    config.output_hidden_states, config.return_dict = True, False
    # allowed on any kernel (transformers asks for "eager"): the call runs the eager path and
    # the model keeps the kernel it had
    config.output_attentions = True
    assert config.kernel == "auto" and config._attn_implementation == "posattn-auto"
    with torch.no_grad():
        from_config = model(ids, mask)
    assert isinstance(from_config, tuple) and len(from_config) == 3
    torch.testing.assert_close(from_config[0], full.logits)
    assert len(from_config[1]) == 3 and len(from_config[2]) == 2


@pytest.mark.parametrize(
    "model_class", [PosAttnModel, PosAttnForMaskedLM, PosAttnForCausalLM, PosAttnForSeq2SeqLM]
)
def test_every_model_returns_a_tuple_in_its_output_order(model_class):
    if model_class is PosAttnForSeq2SeqLM:
        config = PosAttnSeq2SeqConfig(
            vocab_size=40, d_model=24, num_heads=3, num_layers=2, ffn_dim=32, max_len=16
        )
    else:
        config = tiny_config("diet-rel", causal=model_class is PosAttnForCausalLM)
    model = randomised(model_class(config))
    ids, mask, _ = batch()
    kwargs = dict(output_attentions=True, output_hidden_states=True)
    if model_class is PosAttnForSeq2SeqLM:
        kwargs["decoder_input_ids"] = ids[:, :5]
    with torch.no_grad():
        full = model(ids, mask, **kwargs)
        as_tuple = model(ids, mask, return_dict=False, **kwargs)
    expected = full.to_tuple()
    assert type(as_tuple) is tuple and len(as_tuple) == len(expected)
    for got, want in zip(as_tuple, expected, strict=True):
        if isinstance(want, tuple):
            for a, b in zip(got, want, strict=True):
                torch.testing.assert_close(a, b)
        else:
            torch.testing.assert_close(got, want)
    names = list(full.keys())
    if model_class is PosAttnForSeq2SeqLM:
        assert names == [
            "logits",
            "decoder_hidden_states",
            "decoder_attentions",
            "cross_attentions",
            "encoder_last_hidden_state",
            "encoder_hidden_states",
            "encoder_attentions",
        ]
    else:
        assert names[-2:] == ["hidden_states", "attentions"]


def seq2seq_model(norm: str) -> PosAttnForSeq2SeqLM:
    config = PosAttnSeq2SeqConfig(
        vocab_size=40,
        d_model=24,
        num_heads=3,
        num_layers=2,
        num_decoder_layers=3,
        ffn_dim=32,
        max_len=16,
        dropout=0.0,
        attention_dropout=0.0,
        encoding="t5",
        norm=norm,
        kernel="sdpa",
    )
    return randomised(PosAttnForSeq2SeqLM(config))


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_seq2seq_returns_encoder_decoder_and_cross_attentions(monkeypatch, norm):
    model = seq2seq_model(norm)
    src, src_mask, _ = batch()
    tgt = src[:, :6].flip(0)
    # the cross-attention inputs each decoder layer sees, for the reference
    seen = []
    for layer in model.decoder.layers:
        original = layer.cross_attention.cross_attend

        def record(x, memory_kv, memory_mask=None, *args, _original=original, **kwargs):
            seen.append((x, memory_kv, memory_mask))
            return _original(x, memory_kv, memory_mask, *args, **kwargs)

        monkeypatch.setattr(layer.cross_attention, "cross_attend", record)
    with torch.no_grad():
        plain = model(src, src_mask, decoder_input_ids=tgt).logits
        seen.clear()
        out = model(
            src, src_mask, decoder_input_ids=tgt, output_attentions=True, output_hidden_states=True
        )
    torch.testing.assert_close(out.logits, plain, rtol=1e-9, atol=1e-9)
    assert len(out.encoder_attentions) == 2 and len(out.encoder_hidden_states) == 3
    assert len(out.decoder_attentions) == 3 and len(out.decoder_hidden_states) == 4
    assert len(out.cross_attentions) == 3
    torch.testing.assert_close(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    for layer, probs in enumerate(out.encoder_attentions):
        with torch.no_grad():
            expected = reference_probabilities(
                model.encoder, out.encoder_hidden_states[layer], layer, src_mask, None
            )
        torch.testing.assert_close(probs, expected, rtol=1e-9, atol=1e-12)
    for layer, probs in enumerate(out.decoder_attentions):
        assert probs.shape == (2, 3, 6, 6)
        assert (probs.triu(1) == 0).all()  # causal
        with torch.no_grad():
            expected = reference_probabilities(
                model.decoder, out.decoder_hidden_states[layer], layer, None, None
            )
        torch.testing.assert_close(probs, expected, rtol=1e-9, atol=1e-12)
    for layer, probs in enumerate(out.cross_attentions):
        assert probs.shape == (2, 3, 6, 9)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 6))
        assert (probs[1, :, :, 6:] == 0).all()  # padded source tokens
        x, (k, _), memory_mask = seen[layer]
        attention = model.decoder.layers[layer].cross_attention
        q = attention.split_heads(x @ attention.q_proj.weight.T + attention.q_proj.bias)
        logits = q @ k.transpose(-1, -2) / attention.head_dim**0.5
        logits = logits.masked_fill(~memory_mask, float("-inf"))
        torch.testing.assert_close(probs, torch.softmax(logits, -1), rtol=1e-9, atol=1e-12)


def test_encoder_outputs_given_as_a_tuple_are_reused():
    model = seq2seq_model("pre")
    src, src_mask, _ = batch()
    tgt = src[:, :4]
    with torch.no_grad():
        encoded = model.encoder(src, src_mask)
        direct = model(src, src_mask, decoder_input_ids=tgt).logits
        reused = model(
            attention_mask=src_mask, decoder_input_ids=tgt, encoder_outputs=(encoded,)
        ).logits
    torch.testing.assert_close(reused, direct, rtol=0, atol=0)


@pytest.mark.parametrize("encoding", ["t5", "rope", "shaw"])
def test_causal_lm_attentions_of_cached_steps_are_the_last_rows_of_the_full_forward(encoding):
    """With a cache, a new token's probabilities cover every cached key: they equal the last
    query row of the full forward's."""
    config = tiny_config(encoding, causal=True, segments="none")
    model = randomised(PosAttnForCausalLM(config))
    ids, _, _ = batch()
    with torch.no_grad():
        full = model(ids, output_attentions=True)
        prefix = model(ids[:, :-1], use_cache=True)
        step = model(ids[:, -1:], past_key_values=prefix.past_key_values, output_attentions=True)
    assert len(step.attentions) == config.num_layers
    for cached, whole in zip(step.attentions, full.attentions, strict=True):
        assert cached.shape == (2, config.num_heads, 1, ids.shape[1])
        torch.testing.assert_close(cached, whole[:, :, -1:], rtol=1e-9, atol=1e-12)
