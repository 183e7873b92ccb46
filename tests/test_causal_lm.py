"""The causal LM: incremental decoding with a key/value cache equals the full forward for every
causal encoding, greedy `generate` equals an argmax loop, the Auto classes, clear errors."""

from __future__ import annotations

import pytest
import torch
from conftest import PROJECTED, tiny_config
from transformers import AutoModelForCausalLM, DynamicCache

from posattn import ENCODINGS, PosAttnConfigError, PosAttnForCausalLM, build_encoding
from posattn.kernels import build_attention_mask

CAUSAL_ENCODINGS = [name for name in ENCODINGS if name not in PROJECTED]
# Variants whose incremental path differs: Shaw's value term, DeBERTa's own projections,
# T5 in its causal bucket form.
VARIANTS = [
    ("shaw", {"values": True, "max_distance": 3}),
    ("deberta", {"share_att_key": False, "position_buckets": 4, "max_relative_positions": 16}),
    ("t5", {"bidirectional": False, "num_buckets": 4, "max_distance": 6}),
]


def random_lm(encoding: str, seed: int = 0, **overrides) -> PosAttnForCausalLM:
    """A float64 causal LM in eval mode with every parameter random (no zero biases, no unit
    LayerNorms, so no positional term can hide)."""
    torch.manual_seed(seed)
    overrides.setdefault("segments", "input")
    model = PosAttnForCausalLM(tiny_config(encoding, causal=True, **overrides)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model


def decode_in_chunks(model, ids, chunks, attention_mask=None, segments=None) -> torch.Tensor:
    """Logits of `ids` fed through a cache chunk by chunk (sizes in `chunks`)."""
    cache = DynamicCache(config=model.config)
    logits, start = [], 0
    for size in chunks:
        end = start + size
        output = model(
            ids[:, start:end],
            attention_mask=None if attention_mask is None else attention_mask[:, :end],
            token_type_ids=None if segments is None else segments[:, start:end],
            past_key_values=cache,
            use_cache=True,
        )
        assert output.past_key_values is cache and cache.get_seq_length() == end
        logits.append(output.logits)
        start = end
    assert start == ids.shape[1]
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize(
    ("encoding", "options"),
    [(name, {}) for name in CAUSAL_ENCODINGS] + VARIANTS,
    ids=lambda value: value if isinstance(value, str) else "-".join(map(str, value.values())),
)
def test_incremental_decoding_equals_the_full_forward(encoding, options):
    model = random_lm(encoding, encoding_options=options)
    torch.manual_seed(1)
    ids = torch.randint(0, 40, (2, 14))
    segments = (torch.arange(14) >= 6).long().expand(2, 14)
    mask = torch.ones(2, 14, dtype=torch.long)
    mask[1, :2] = 0  # a left-padded row: its real tokens never see the padded keys
    with torch.no_grad():
        full = model(ids, attention_mask=mask, token_type_ids=segments).logits
        # a prompt, a two-token chunk (rows [5, 7) at once), then one token at a time
        incremental = decode_in_chunks(model, ids, [5, 2] + [1] * 7, mask, segments)
    real = mask.bool()  # a padded query's output is a finite placeholder: not compared
    torch.testing.assert_close(incremental[real], full[real], atol=1e-5, rtol=0)
    # the positional terms matter: shuffling the cached order changes the last logits
    # (except without positions, where attention is permutation-invariant over keys)
    if encoding != "none":
        shuffled = torch.cat([ids[:, :12].flip(1), ids[:, 12:]], dim=1)
        with torch.no_grad():
            other = model(shuffled, attention_mask=mask, token_type_ids=segments).logits
        assert (other[:, -1] - full[:, -1]).abs().max() > 1e-3


def test_window_terms_are_the_rows_of_the_full_terms():
    """The core API any causal decoder reuses: rows [start, end) of the bias and of the q/k
    transform equal the full terms' rows."""
    config = tiny_config("tupe-r", causal=True)
    torch.manual_seed(0)
    encoding = build_encoding("tupe-r", config.dims, config.encoding_options)
    full = encoding.layer_terms(9, torch.device("cpu"), torch.float64)
    window = encoding.window_terms(6, 9, torch.device("cpu"), torch.float64)
    assert window[0] is window[1]  # shared across layers, as the full terms are
    torch.testing.assert_close(window[0].bias, full[0].bias[..., 6:, :])
    rope = build_encoding("rope", config.dims, {"layout": "half"})
    q, k = torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8)
    full_q, full_k = rope.layer_terms(9, q.device, q.dtype)[0].transform_qk(q, k)
    window_q, window_k = rope.window_terms(6, 9, q.device, q.dtype)[0].transform_qk(q[:, :, 6:], k)
    torch.testing.assert_close(window_q, full_q[:, :, 6:])
    torch.testing.assert_close(window_k, full_k)


def test_window_mask_is_the_rows_of_the_full_mask():
    padding = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 1]])
    full = build_attention_mask(padding, 6, True, torch.device("cpu"))
    window = build_attention_mask(padding, 6, True, torch.device("cpu"), query_start=4)
    assert window.shape == (2, 1, 2, 6)
    assert torch.equal(window, full[:, :, 4:])


def test_greedy_generate_equals_an_argmax_loop_and_uses_the_cache():
    model = random_lm("alibi", segments="none", max_len=32)
    prompt = torch.randint(1, 40, (2, 4))
    calls = []
    forward = model.forward

    def recording_forward(input_ids, **kwargs):
        calls.append(input_ids.shape[1])
        return forward(input_ids, **kwargs)

    model.forward = recording_forward
    generated = model.generate(
        prompt,
        max_new_tokens=10,
        do_sample=False,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    model.forward = forward
    assert calls == [4] + [1] * 9  # the prompt once, then one new token per step
    sequence = prompt
    with torch.no_grad():
        for step in range(10):
            logits = model(sequence).logits[:, -1]
            # generate returns float32 logits: equal up to that rounding
            torch.testing.assert_close(generated.logits[step].double(), logits, atol=1e-4, rtol=0)
            sequence = torch.cat([sequence, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated.sequences, sequence)


def test_loss_is_next_token_cross_entropy():
    model = random_lm("rope")
    ids = torch.randint(0, 40, (2, 7))
    labels = ids.clone()
    labels[0, 3] = -100
    output = model(ids, labels=labels)
    log_probs = torch.log_softmax(output.logits, dim=-1)
    terms = [
        -log_probs[b, t, labels[b, t + 1]]
        for b in range(2)
        for t in range(6)
        if labels[b, t + 1] != -100
    ]
    torch.testing.assert_close(output.loss, torch.stack(terms).mean())


def test_shift_labels_are_the_targets_of_the_logits_at_their_own_positions():
    model = random_lm("rope")
    ids = torch.randint(0, 40, (2, 7))
    shift_labels = torch.randint(0, 40, (2, 7))
    shift_labels[1, 2] = -100
    output = model(ids, labels=torch.randint(0, 40, (2, 7)), shift_labels=shift_labels)
    log_probs = torch.log_softmax(output.logits, dim=-1)
    terms = [
        -log_probs[b, t, shift_labels[b, t]]
        for b in range(2)
        for t in range(7)
        if shift_labels[b, t] != -100
    ]
    torch.testing.assert_close(output.loss, torch.stack(terms).mean())
    # labels shifted by hand (the last position without a target) give the labels' loss
    labels = ids.clone()
    shifted = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)
    torch.testing.assert_close(
        model(ids, shift_labels=shifted).loss, model(ids, labels=labels).loss
    )


def test_save_and_load_through_the_auto_class(tmp_path):
    model = random_lm("fire")
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is PosAttnForCausalLM
    assert loaded.lm_head.weight is loaded.posattn.encoder.embeddings.word.weight  # tied
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


def test_errors_name_the_parameter():
    with pytest.raises(PosAttnConfigError, match="causal"):
        PosAttnForCausalLM(tiny_config("rope", causal=False))
    model = random_lm("learned", max_len=8)
    cache = DynamicCache(config=model.config)
    model(torch.randint(0, 40, (1, 8)), past_key_values=cache, use_cache=True)
    with pytest.raises(PosAttnConfigError, match=r"seq_len.*max_len=8"):
        model(torch.randint(0, 40, (1, 1)), past_key_values=cache, use_cache=True)
    model = random_lm("alibi", segments="attention")
    cache = DynamicCache(config=model.config)
    model(torch.randint(0, 40, (1, 3)), past_key_values=cache, use_cache=True)
    with pytest.raises(PosAttnConfigError, match="segments"):
        model(torch.randint(0, 40, (1, 1)), past_key_values=cache, use_cache=True)
    with pytest.raises(PosAttnConfigError, match=r"attention_mask\.shape"):
        model(torch.randint(0, 40, (1, 2)), attention_mask=torch.ones(1, 3, dtype=torch.long))
    # Linformer projects keys along the sequence: no cache can hold them
    bidirectional = tiny_config("linformer")
    linformer = build_encoding("linformer", bidirectional.dims, {"k": 4})
    with pytest.raises(PosAttnConfigError, match=r"past_length.*Linformer"):
        linformer.window_terms(3, 6, torch.device("cpu"), torch.float64)
