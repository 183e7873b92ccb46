"""transformers' `generate` on posattn's models: the encoder-decoder's greedy search equals
posattn's own greedy decoder (posattn.lab.translation) token for token, its step scores equal
the full forward's logits of the prefix, beam search reorders the cached source keys, and the
causal LM decodes the same with and without its key/value cache."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_seq2seq_config
from test_causal_lm import random_lm
from test_seq2seq import TABLE4, inputs

from posattn import PosAttnForSeq2SeqLM, PosAttnSeq2SeqConfig
from posattn.lab.translation.decoding import SearchSettings, strip_eos
from posattn.lab.translation.translate import translate_ids


def translator(encoding: str, seed: int = 0):
    """A float64 seq2seq whose decoder is deeper than its encoder (the generation cache must
    follow the decoder); initialised with std 1 its greedy outputs vary by source and often
    reach the </s> chosen here (token 10)."""
    torch.manual_seed(seed)
    config = tiny_seq2seq_config(
        encoding, vocab_size=12, num_decoder_layers=3, init_std=1.0, eos_token_id=10
    )
    return PosAttnForSeq2SeqLM(config).double().eval()


def source(seed: int = 1):
    src, mask, _ = inputs(seed=seed, batch=3, n_src=7)
    return src % 12, mask


@pytest.mark.parametrize("encoding", TABLE4)
def test_greedy_generate_equals_the_own_greedy_decoder(encoding):
    model = translator(encoding)
    src, mask = source()
    own = translate_ids(model, src, mask, SearchSettings(beam_size=1, max_new_tokens=12))
    generated = model.generate(
        src,
        attention_mask=mask,
        max_new_tokens=12,
        do_sample=False,
        num_beams=1,
        output_logits=True,
        return_dict_in_generate=True,
    )
    eos = model.config.eos_token_id
    sequences = generated.sequences
    assert sequences[:, 0].tolist() == [model.config.decoder_start_token_id] * 3
    assert [strip_eos(row[1:], eos) for row in sequences.tolist()] == own
    # Each step's logits are the full (uncached) forward's at the last prefix position.
    with torch.no_grad():
        for step, logits in enumerate(generated.logits):
            prefix = sequences[:, : step + 1]
            full = model(src, mask, decoder_input_ids=prefix).logits[:, -1]
            live = ~(prefix[:, 1:] == eos).any(1)  # rows still decoding at this step
            torch.testing.assert_close(logits[live].double(), full[live], atol=1e-4, rtol=0)


def test_generated_tokens_vary_and_end():
    """The equality above is not vacuous: the sequences differ and some end in </s>."""
    model = translator("sinusoidal")
    src, mask = source()
    out = model.generate(src, attention_mask=mask, max_new_tokens=12, do_sample=False)
    rows = out.tolist()
    assert len({tuple(row) for row in rows}) > 1
    assert any(len(set(row)) > 3 for row in rows)
    assert any(model.config.eos_token_id in row for row in rows)


@pytest.mark.parametrize("encoding", ["t5", "rope", "shaw"])
def test_cached_generate_equals_uncached(encoding):
    model = translator(encoding, seed=3)
    src, mask = source(seed=2)
    kwargs = dict(attention_mask=mask, max_new_tokens=10, do_sample=False)
    for num_beams in (1, 3):
        cached = model.generate(src, num_beams=num_beams, **kwargs)
        plain = model.generate(src, num_beams=num_beams, use_cache=False, **kwargs)
        assert torch.equal(cached, plain), num_beams


def test_forward_with_a_generation_cache_equals_the_full_forward():
    model = translator("diet-rel")
    src, mask = source()
    target = torch.randint(4, 12, (3, 6))
    with torch.no_grad():
        full = model(src, mask, decoder_input_ids=target).logits
        first = model(src, mask, decoder_input_ids=target[:, :4], use_cache=True)
        encoder_outputs = (first.encoder_last_hidden_state,)
        rest = model(
            attention_mask=mask,
            encoder_outputs=encoder_outputs,
            decoder_input_ids=target[:, 4:],
            past_key_values=first.past_key_values,
        ).logits
    torch.testing.assert_close(torch.cat([first.logits, rest], dim=1), full)


def test_get_encoder_returns_model_outputs_and_refuses_attention_outputs():
    model = translator("t5")
    src, mask = source()
    encoder = model.get_encoder()
    out = encoder(input_ids=src, attention_mask=mask, return_dict=True)
    torch.testing.assert_close(out.last_hidden_state, model.encode(src, mask))
    assert not list(encoder.parameters()) or encoder.stack is model.encoder
    with pytest.raises(ValueError, match="output_attentions"):
        encoder(input_ids=src, output_attentions=True)
    with pytest.raises(ValueError, match="past_key_values"):
        model(src, mask, decoder_input_ids=src[:, :2], past_key_values=object())


@pytest.mark.parametrize("encoding", ["rope", "t5", "diet-rel", "xpos", "shaw"])
def test_causal_generate_with_cache_equals_without(encoding):
    model = random_lm(encoding, segments="none", max_len=32)
    prompt = torch.randint(1, 40, (2, 5), generator=torch.Generator().manual_seed(0))
    kwargs = dict(
        max_new_tokens=8,
        do_sample=False,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    cached = model.generate(prompt, **kwargs)
    plain = model.generate(prompt, use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, plain.sequences)
    torch.testing.assert_close(torch.stack(cached.logits), torch.stack(plain.logits))


def test_generate_translates_text_with_a_posattn_tokenizer_like_translate(tmp_path):
    """transformers 5 has no translation pipeline: tokenizer -> generate -> batch_decode is
    its replacement, and it gives `posattn translate`'s greedy output."""
    from translation_fixtures import build_toy_translation

    from posattn.data.translation_tokenizer import load_translation_tokenizer
    from posattn.lab.translation.translate import translate

    folder = build_toy_translation(tmp_path)
    tokenizer = load_translation_tokenizer(folder / "translation/toy/tokenizer")
    torch.manual_seed(1)  # a draw whose two outputs differ, so equality means something
    config = PosAttnSeq2SeqConfig(
        vocab_size=len(tokenizer),
        d_model=16,
        num_layers=1,
        num_heads=2,
        ffn_dim=16,
        max_len=32,
        encoding="t5",
        init_std=1.0,
    )
    model = PosAttnForSeq2SeqLM(config).eval()
    sources = ["the cat sat", "the big dog ran under the tree"]
    own, _ = translate(model, tokenizer, sources, SearchSettings(beam_size=1, max_new_tokens=8))
    batch = tokenizer(sources, padding=True, return_tensors="pt")
    ids = model.generate(**batch, max_new_tokens=8, do_sample=False)
    assert tokenizer.batch_decode(ids, skip_special_tokens=True) == own
    assert own[0] != own[1]
