"""Inputs and losses as transformers defines them: `inputs_embeds`, `config.problem_type`
(against BertForSequenceClassification's own loss on the same logits), the causal LM's
`shift_labels` (against transformers' ForCausalLMLoss) and the config's token ids."""

from __future__ import annotations

import pytest
import torch
from conftest import randomised, tiny_config
from torch import nn
from transformers import BertConfig, BertForSequenceClassification
from transformers.loss.loss_utils import ForCausalLMLoss

from posattn import (
    PosAttnConfig,
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnForSequenceClassification,
    PosAttnModel,
    PosAttnSeq2SeqConfig,
)
from posattn.errors import PosAttnConfigError


def ids_and_mask(n: int = 8):
    ids = torch.randint(5, 40, (2, n), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return ids, mask


@pytest.mark.parametrize(
    ("model_class", "encoding"),
    [
        (PosAttnModel, "learned"),
        (PosAttnModel, "tupe-r"),
        (PosAttnForMaskedLM, "diet-abs"),
        (PosAttnForSequenceClassification, "shaw"),
        (PosAttnForCausalLM, "rope"),
    ],
)
def test_inputs_embeds_equal_the_word_vectors_of_input_ids(model_class, encoding):
    causal = model_class is PosAttnForCausalLM
    model = randomised(model_class(tiny_config(encoding, causal=causal, num_labels=3)))
    ids, mask = ids_and_mask()
    embeds = model.get_input_embeddings()(ids)
    with torch.no_grad():
        from_ids = model(ids, mask)[0]
        from_embeds = model(attention_mask=mask, inputs_embeds=embeds)[0]
        moved = model(attention_mask=mask, inputs_embeds=embeds + 0.1 * torch.randn_like(embeds))[0]
    torch.testing.assert_close(from_embeds, from_ids, rtol=0, atol=0)
    assert not torch.allclose(moved, from_ids)  # the vectors are really used


def test_inputs_embeds_in_the_encoder_decoder_replace_the_scaled_word_vectors():
    config = PosAttnSeq2SeqConfig(
        vocab_size=40, d_model=16, num_heads=2, num_layers=1, ffn_dim=20, max_len=16
    )
    model = randomised(PosAttnForSeq2SeqLM(config))
    src, mask = ids_and_mask()
    tgt = src[:, :5]
    word = model.get_input_embeddings()  # scaled by sqrt(d_model), as the model reads it
    torch.testing.assert_close(word(src), word.weight[src] * 16**0.5, rtol=0, atol=0)
    with torch.no_grad():
        from_ids = model(src, mask, decoder_input_ids=tgt).logits
        from_embeds = model(
            attention_mask=mask,
            inputs_embeds=word(src),
            decoder_inputs_embeds=word(tgt),
        ).logits
    torch.testing.assert_close(from_embeds, from_ids, rtol=0, atol=1e-12)


def test_a_plain_embedding_set_on_the_encoder_decoder_is_kept_and_scaled():
    config = PosAttnSeq2SeqConfig(
        vocab_size=40, d_model=16, num_heads=2, num_layers=1, ffn_dim=20, max_len=16
    )
    model = randomised(PosAttnForSeq2SeqLM(config))
    src, _ = ids_and_mask()
    plain = torch.nn.Embedding(40, 16)
    model.set_input_embeddings(plain)
    assert model.get_input_embeddings() is plain  # transformers' contract
    assert model.encoder.embeddings.word is plain and model.decoder.embeddings.word is plain
    torch.testing.assert_close(plain(src), plain.weight[src] * 4.0, rtol=0, atol=0)
    with pytest.raises(PosAttnConfigError, match=r"embeddings='Linear'.*nn\.Embedding"):
        model.set_input_embeddings(torch.nn.Linear(16, 40))


def test_ids_and_embeds_together_or_neither_or_misshapen_are_refused():
    model = PosAttnModel(tiny_config("t5"))
    ids, _ = ids_and_mask()
    embeds = model.get_input_embeddings()(ids)
    with pytest.raises(PosAttnConfigError, match="exactly one of input_ids and inputs_embeds"):
        model(ids, inputs_embeds=embeds)
    with pytest.raises(PosAttnConfigError, match="exactly one of input_ids and inputs_embeds"):
        model()
    with pytest.raises(PosAttnConfigError, match=r"inputs_embeds=\(2, 8, 5\).*d_model=24"):
        model(inputs_embeds=embeds[..., :5])


def bert_loss(logits: torch.Tensor, labels: torch.Tensor, num_labels: int, problem_type):
    """BertForSequenceClassification's own loss on these logits (its classifier replaced by
    one that returns them)."""
    config = BertConfig(
        vocab_size=40,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        num_labels=num_labels,
        problem_type=problem_type,
    )
    bert = BertForSequenceClassification(config).eval()

    class Fixed(nn.Module):
        def forward(self, pooled):
            return logits

    bert.classifier = Fixed()
    return bert(torch.zeros(logits.shape[0], 3, dtype=torch.long), labels=labels).loss


CASES = [
    # (num_labels, problem_type, labels)
    (1, None, torch.tensor([0.5, -1.25])),
    (1, "regression", torch.tensor([[0.5], [-1.25]])),
    (3, "regression", torch.tensor([[0.5, 1.0, -2.0], [0.0, 0.25, 1.5]])),
    (3, None, torch.tensor([2, 0])),
    (3, "single_label_classification", torch.tensor([1, 2])),
    (3, None, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])),  # float labels: multi-label
    (3, "multi_label_classification", torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])),
]


@pytest.mark.parametrize(("num_labels", "problem_type", "labels"), CASES)
def test_classification_loss_is_berts_for_every_problem_type(num_labels, problem_type, labels):
    config = tiny_config("diet-rel", num_labels=num_labels, problem_type=problem_type)
    model = randomised(PosAttnForSequenceClassification(config))
    ids, mask = ids_and_mask()
    with torch.no_grad():
        out = model(ids, mask, labels=labels)
        expected = bert_loss(out.logits, labels, num_labels, problem_type)
    torch.testing.assert_close(out.loss, expected, rtol=1e-12, atol=1e-12)
    # the Trainer's item count: a sum over the items divided by it
    count = labels.numel() if labels.is_floating_point() else labels.shape[0]
    with torch.no_grad():
        summed = model(ids, mask, labels=labels, num_items_in_batch=2 * count)
    torch.testing.assert_close(summed.loss, expected / 2, rtol=1e-12, atol=1e-12)
    assert config.problem_type == problem_type  # inferred per call, not written to the config


def test_shift_labels_follow_transformers_causal_lm_loss():
    model = randomised(PosAttnForCausalLM(tiny_config("alibi", causal=True)))
    ids, mask = ids_and_mask()
    labels = ids.masked_fill(mask == 0, -100)
    with torch.no_grad():
        logits = model(ids, mask).logits
        by_labels = model(ids, mask, labels=labels).loss
    torch.testing.assert_close(
        by_labels.float(), ForCausalLMLoss(logits, labels, 40), rtol=1e-6, atol=1e-6
    )
    # packed or split batches shift before splitting: label t is the target at t
    shift = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].contiguous()
    shift[0, 2] = -100
    with torch.no_grad():
        by_shift = model(ids, mask, labels=None, shift_labels=shift).loss
        with_count = model(ids, mask, shift_labels=shift, num_items_in_batch=20).loss
    torch.testing.assert_close(
        by_shift.float(),
        ForCausalLMLoss(logits, None, 40, shift_labels=shift),
        rtol=1e-6,
        atol=1e-6,
    )
    torch.testing.assert_close(
        with_count.float(),
        ForCausalLMLoss(logits, None, 40, num_items_in_batch=20, shift_labels=shift),
        rtol=1e-6,
        atol=1e-6,
    )
    with pytest.raises(PosAttnConfigError, match=r"shift_labels\.shape"):
        model(ids, shift_labels=shift[:, :-1])


def test_token_ids_and_use_cache_have_defaults_and_round_trip(tmp_path):
    config = PosAttnConfig()
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 2, 3)
    assert config.use_cache is True
    PosAttnConfig(bos_token_id=7, eos_token_id=8, use_cache=False).save_pretrained(tmp_path)
    loaded = PosAttnConfig.from_pretrained(tmp_path)
    assert (loaded.bos_token_id, loaded.eos_token_id, loaded.use_cache) == (7, 8, False)


def test_inputs_embeds_take_position_ids_like_input_ids():
    model = randomised(PosAttnForMaskedLM(tiny_config("learned")))
    ids, _ = ids_and_mask()
    positions = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10], [0, 1, 2, 0, 1, 2, 3, 4]])
    with torch.no_grad():
        from_ids = model(ids, position_ids=positions).logits
        from_embeds = model(
            inputs_embeds=model.get_input_embeddings()(ids), position_ids=positions
        ).logits
        default = model(ids).logits
    torch.testing.assert_close(from_embeds, from_ids, rtol=0, atol=0)
    assert not torch.allclose(from_ids, default)


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "t5"])
def test_word_scale_is_the_same_model_with_its_word_matrix_multiplied(encoding, tmp_path):
    """word_scale=s multiplies the word vectors before positions, segments and LayerNorm: the
    model equals one at the default whose word matrix is s times as large (x = s w + p; its
    sinusoids, table or bias unchanged), and keeps s through save / load."""
    scaled = randomised(PosAttnModel(tiny_config(encoding, word_scale=50.0)))
    unscaled = PosAttnModel(tiny_config(encoding)).eval()
    unscaled.load_state_dict(scaled.state_dict())
    plain = PosAttnModel(tiny_config(encoding)).eval()
    plain.load_state_dict(scaled.state_dict())
    with torch.no_grad():
        plain.get_input_embeddings().weight.mul_(50.0)
    ids, mask = ids_and_mask()
    segments = (torch.arange(8) >= 4).long().expand(2, 8)
    with torch.no_grad():
        expected = plain(ids, mask, segments)[0]
        torch.testing.assert_close(scaled(ids, mask, segments)[0], expected, rtol=0, atol=1e-12)
        # not a no-op: the default scale on the same weights gives another model
        assert not torch.allclose(unscaled(ids, mask, segments)[0], expected, atol=1e-3)
    scaled.save_pretrained(tmp_path)
    loaded = PosAttnModel.from_pretrained(tmp_path).eval()
    assert loaded.config.word_scale == 50.0 and loaded.config.input_word_scale() == 50.0
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask, segments)[0], expected, rtol=0, atol=1e-12)


def test_the_words_input_sinusoids_are_added_to_are_scaled_by_word_scale():
    """The embedding layer's output from the equation: LayerNorm(s W[ids] + PE(i))."""
    model = randomised(PosAttnModel(tiny_config("sinusoidal", word_scale=3.0, segments="none")))
    ids, _ = ids_and_mask()
    embeddings = model.encoder.embeddings
    n, d = ids.shape[1], model.config.d_model
    k = torch.arange(0, d, 2, dtype=torch.float64)
    angles = torch.arange(n, dtype=torch.float64)[:, None] / 10000 ** (k / d)
    sinusoids = torch.stack([angles.sin(), angles.cos()], -1).reshape(n, d)
    expected = embeddings.norm(3.0 * embeddings.word.weight[ids] + sinusoids)
    with torch.no_grad():
        got = embeddings(ids, None, model.encoder.encoding.input_embedding(n, None, torch.float64))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_word_scale_sets_the_encoder_decoders_scale_and_a_set_embedding_takes_it():
    """None keeps sqrt(d_model) in the encoder-decoder (Vaswani Sec. 3.4) and 1 in the
    encoders; a number replaces either, in both stacks and in an embedding set later."""
    sizes = dict(vocab_size=40, d_model=16, num_heads=2, num_layers=1, ffn_dim=20, max_len=16)
    seq2seq = PosAttnForSeq2SeqLM(PosAttnSeq2SeqConfig(**sizes, word_scale=1.0))
    for stack in (seq2seq.model.encoder, seq2seq.model.decoder):
        assert stack.embeddings.word.scale == 1.0
    assert PosAttnSeq2SeqConfig(**sizes).input_word_scale() == 4.0
    assert PosAttnConfig(**sizes).input_word_scale() == 1.0
    model = PosAttnForMaskedLM(tiny_config("learned", word_scale=2.5))
    plain = torch.nn.Embedding(40, 24)
    model.set_input_embeddings(plain)
    assert model.get_input_embeddings() is plain  # transformers' contract
    ids, _ = ids_and_mask()
    torch.testing.assert_close(plain(ids), plain.weight[ids] * 2.5, rtol=0, atol=0)
