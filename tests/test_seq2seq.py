"""PosAttnForSeq2SeqLM against a slow reference written from its definition, and the
invariants that pin down where positions act: causal decoding, no positional term in
cross-attention, source padding, tied embeddings, the label-smoothed loss."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_seq2seq_config
from reference import layer_norm
from safetensors.torch import save_file
from transformers import AutoModel, AutoModelForSeq2SeqLM

from posattn import (
    MultiHeadAttention,
    PosAttnForSeq2SeqLM,
    PosAttnSeq2SeqConfig,
    PosAttnSeq2SeqModel,
)
from posattn.errors import PosAttnConfigError

TABLE4 = ["sinusoidal", "shaw", "diet-rel", "t5", "tupe-r", "diet-abs", "rope"]
# Encodings acting only at the input or as a logit bias: the reference adds their terms.
BIAS_OR_INPUT = ["sinusoidal", "t5", "diet-rel", "diet-abs", "tupe-r"]


def seq2seq(encoding: str, seed: int = 0, **overrides) -> PosAttnForSeq2SeqLM:
    """A float64 model in eval mode whose every parameter is random."""
    config = tiny_seq2seq_config(encoding, **overrides)
    torch.manual_seed(seed)
    model = PosAttnForSeq2SeqLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model


def inputs(seed: int = 1, batch: int = 2, n_src: int = 7, n_tgt: int = 6):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 30, (batch, n_src), generator=generator)
    tgt = torch.randint(4, 30, (batch, n_tgt), generator=generator)
    mask = torch.ones_like(src)
    mask[1, -2:] = 0  # the second source is padded
    return src, mask, tgt


def linear(x, layer):
    return x @ layer.weight.T + layer.bias


def reference_attention(x, keys_from, attention, bias, mask, causal, scale=None):
    """softmax(q k^T * scale + bias) v per head (scale 1/sqrt(d_h) unless the encoding sets
    its own, as TUPE does), with explicit loops over heads."""
    heads = attention.num_heads
    d_h = x.shape[-1] // heads
    q, k = linear(x, attention.q_proj), linear(keys_from, attention.k_proj)
    v = linear(keys_from, attention.v_proj)
    outputs = []
    for h in range(heads):
        cols = slice(h * d_h, (h + 1) * d_h)
        logits = q[..., cols] @ k[..., cols].transpose(-1, -2) * (scale or 1 / math.sqrt(d_h))
        if bias is not None:
            logits = logits + bias[0, h]
        n_q, n_k = logits.shape[-2:]
        allowed = mask[:, None, :].bool().expand(-1, n_q, -1)
        if causal:
            allowed = allowed & torch.ones(n_q, n_k, dtype=torch.bool).tril()
        logits = logits.masked_fill(~allowed, float("-inf"))
        outputs.append(torch.softmax(logits, -1) @ v[..., cols])
    return linear(torch.cat(outputs, -1), attention.out_proj)


def test_multi_head_attention_does_cross_attention_itself():
    """cross_attend(x, memory_keys_values(memory), mask) is content attention from the
    decoder's queries to the memory's keys and values; queries_keys_values and split_heads are
    the projections split into heads."""
    torch.manual_seed(0)
    attention = seq2seq("t5").decoder.layers[0].cross_attention
    x, memory = torch.randn(2, 5, 24), torch.randn(2, 7, 24)
    memory_mask = torch.ones(2, 7, dtype=torch.bool)
    memory_mask[1, -3:] = False
    ours = attention.cross_attend(
        x, attention.memory_keys_values(memory), memory_mask[:, None, None, :]
    )
    expected = reference_attention(x, memory, attention, None, memory_mask, False)
    torch.testing.assert_close(ours, expected)
    projections = (attention.q_proj, attention.k_proj, attention.v_proj)
    for heads, projection in zip(attention.queries_keys_values(x), projections, strict=True):
        split = linear(x, projection).unflatten(-1, (3, 8)).transpose(1, 2)
        torch.testing.assert_close(heads, split)
    torch.testing.assert_close(attention.merge_heads(attention.split_heads(x)), x)


def reference_stack(stack, ids, mask, memory=None, memory_mask=None):
    """One stack (encoder, or decoder when memory is given), pre-norm, from the definition."""
    n = ids.shape[1]
    x = stack.embeddings.word.weight[ids] * math.sqrt(stack.config.d_model)  # Vaswani Sec. 3.4
    positions = stack.encoding.input_embedding(n, ids.device, x.dtype)
    if positions is not None:
        x = x + positions
    norm = stack.embeddings.norm
    x = layer_norm(x, norm.weight, norm.bias, norm.eps)
    terms = stack.encoding.layer_terms(n, ids.device, x.dtype)
    causal = memory is not None
    for layer, layer_terms in zip(stack.layers, terms, strict=True):
        bias = layer_terms.bias
        bias = None if bias is None else bias.reshape(1, -1, n, n)
        if causal:
            self_attn, self_norm = layer.self_attention, layer.self_norm
        else:
            self_attn, self_norm = layer.attention, layer.attention_norm
        h = layer_norm(x, self_norm.weight, self_norm.bias, self_norm.eps)
        x = x + reference_attention(h, h, self_attn, bias, mask, causal, layer_terms.scale)
        if causal:
            h = layer_norm(x, layer.cross_norm.weight, layer.cross_norm.bias, layer.cross_norm.eps)
            x = x + reference_attention(h, memory, layer.cross_attention, None, memory_mask, False)
        h = layer_norm(x, layer.ffn_norm.weight, layer.ffn_norm.bias, layer.ffn_norm.eps)
        x = x + linear(torch.nn.functional.gelu(linear(h, layer.ffn.up)), layer.ffn.down)
    final = stack.final_norm
    return layer_norm(x, final.weight, final.bias, final.eps)


@pytest.mark.parametrize("encoding", BIAS_OR_INPUT)
def test_forward_matches_the_reference(encoding):
    model = seq2seq(encoding)
    src, mask, tgt = inputs()
    memory = reference_stack(model.encoder, src, mask)
    hidden = reference_stack(model.decoder, tgt, torch.ones_like(tgt), memory, mask)
    expected = hidden @ model.encoder.embeddings.word.weight.T  # the tied output projection
    logits = model(src, mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("encoding", TABLE4)
def test_decoder_is_causal(encoding):
    model = seq2seq(encoding)
    src, mask, tgt = inputs()
    base = model(src, mask, decoder_input_ids=tgt).logits
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 30
    after = model(src, mask, decoder_input_ids=changed).logits
    torch.testing.assert_close(after[:, :3], base[:, :3], rtol=0, atol=1e-12)
    assert not torch.allclose(after[:, 3:], base[:, 3:])


@pytest.mark.parametrize("encoding", TABLE4)
def test_cross_attention_carries_no_positions(encoding):
    """Permuting the encoder output (with its mask) leaves the decoder unchanged."""
    model = seq2seq(encoding)
    src, mask, tgt = inputs()
    memory = model.encode(src, mask)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    plain = model.decode(tgt, model.decoder.memory_keys_values(memory), mask)
    permuted = model.decode(tgt, model.decoder.memory_keys_values(memory[:, perm]), mask[:, perm])
    torch.testing.assert_close(permuted, plain, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("encoding", TABLE4)
def test_source_padding_changes_nothing(encoding):
    model = seq2seq(encoding)
    src, mask, tgt = inputs()
    padded = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], 1)
    padded_mask = torch.cat([mask, torch.zeros(2, 3, dtype=torch.long)], 1)
    base = model(src, mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(
        model(padded, padded_mask, decoder_input_ids=tgt).logits, base, rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("encoding", TABLE4)
def test_save_load_through_auto_class_keeps_tied_embeddings(tmp_path, encoding):
    model = seq2seq(encoding)
    src, mask, tgt = inputs()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is PosAttnForSeq2SeqLM
    word = loaded.encoder.embeddings.word.weight
    assert loaded.decoder.embeddings.word.weight is word and loaded.lm_head.weight is word
    torch.testing.assert_close(
        loaded(src, mask, decoder_input_ids=tgt).logits.double(),
        model(src, mask, decoder_input_ids=tgt).logits,
    )


def test_untied_embeddings_are_three_matrices_that_survive_save_and_load(tmp_path):
    model = seq2seq("t5", tie_word_embeddings=False)
    matrices = [
        model.encoder.embeddings.word.weight,
        model.decoder.embeddings.word.weight,
        model.lm_head.weight,
    ]
    assert len({id(matrix) for matrix in matrices}) == 3
    assert not torch.equal(matrices[0], matrices[1]) and not torch.equal(matrices[0], matrices[2])
    src, mask, tgt = inputs()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name].double(), value, msg=name)
    torch.testing.assert_close(
        loaded(src, mask, decoder_input_ids=tgt).logits.double(),
        model(src, mask, decoder_input_ids=tgt).logits,
    )


@pytest.mark.parametrize("tied", [True, False])
def test_the_base_model_and_checkpoints_of_the_former_layout(tmp_path, tied):
    """`.model` is the encoder-decoder without the output projection (AutoModel loads it);
    a checkpoint saved with the stacks at the top level (`encoder.*`, `decoder.*`, before the
    base model existed) loads into today's layout with every weight and output unchanged."""
    model = seq2seq("diet-rel", tie_word_embeddings=tied)
    src, mask, tgt = inputs()
    assert model.base_model is model.model and model.encoder is model.model.encoder
    hidden = model.model(src, mask, decoder_input_ids=tgt).last_hidden_state
    torch.testing.assert_close(
        model.lm_head(hidden), model(src, mask, decoder_input_ids=tgt).logits, rtol=0, atol=0
    )
    model.save_pretrained(tmp_path / "now")
    base = AutoModel.from_pretrained(tmp_path / "now").eval()
    assert type(base) is PosAttnSeq2SeqModel
    torch.testing.assert_close(
        base(src, mask, decoder_input_ids=tgt).last_hidden_state.double(),
        hidden,
        rtol=1e-5,
        atol=1e-5,  # saved in float32
    )
    former = {name.removeprefix("model."): value for name, value in model.state_dict().items()}
    if tied:  # saved once, as the tied matrix was
        for name in ("decoder.embeddings.word.weight", "lm_head.weight"):
            del former[name]
    assert any(name.startswith("encoder.") for name in former)
    model.config.save_pretrained(tmp_path / "former")
    save_file(
        {name: value.float().contiguous() for name, value in former.items()},
        tmp_path / "former" / "model.safetensors",
        metadata={"format": "pt"},
    )
    loaded = PosAttnForSeq2SeqLM.from_pretrained(tmp_path / "former").eval()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name].double(), value, msg=name)
    torch.testing.assert_close(
        loaded(src, mask, decoder_input_ids=tgt).logits.double(),
        model(src, mask, decoder_input_ids=tgt).logits,
        rtol=1e-5,
        atol=1e-5,
    )


def test_set_kernel_on_each_stack_reaches_every_attention_and_keeps_the_outputs():
    model = seq2seq("t5")
    src, mask, tgt = inputs()
    reference = model(src, mask, decoder_input_ids=tgt).logits
    for kernel in ("eager", "sdpa"):
        for stack in (model.encoder, model.decoder):
            stack.set_kernel(kernel)
            assert stack.config.kernel == kernel
        kernels = {
            module.kernel_name
            for module in model.modules()
            if isinstance(module, MultiHeadAttention)
        }
        assert kernels == {kernel}
        torch.testing.assert_close(
            model(src, mask, decoder_input_ids=tgt).logits, reference, rtol=1e-10, atol=1e-10
        )


def test_label_smoothed_loss_in_training_and_nll_in_evaluation():
    model = seq2seq("diet-rel", label_smoothing=0.1)
    src, mask, tgt = inputs()
    labels = tgt.clone()
    labels[1, -2:] = -100
    decoder_ids = model.prepare_decoder_input_ids_from_labels(labels)
    assert decoder_ids[0, 0] == model.config.decoder_start_token_id
    assert torch.equal(decoder_ids[0, 1:], labels[0, :-1]) and decoder_ids[1, -1] == 0
    log_probs = torch.log_softmax(model(src, mask, labels=labels).logits, -1)
    kept = labels != -100
    nll = -log_probs[kept].gather(-1, labels[kept][:, None]).mean()
    uniform = -log_probs[kept].mean()
    assert torch.allclose(model(src, mask, labels=labels).loss, nll)
    model.train()
    assert torch.allclose(model(src, mask, labels=labels).loss, 0.9 * nll + 0.1 * uniform)


def test_bad_seq2seq_configs():
    with pytest.raises(PosAttnConfigError, match=r"label_smoothing=1\.0"):
        PosAttnSeq2SeqConfig(label_smoothing=1.0, d_model=8, num_heads=2)
    with pytest.raises(PosAttnConfigError, match="segments='attention'"):
        PosAttnSeq2SeqConfig(segments="attention", d_model=8, num_heads=2)
    with pytest.raises(PosAttnConfigError, match="causal=True"):
        PosAttnSeq2SeqConfig(causal=True, d_model=8, num_heads=2)
    with pytest.raises(PosAttnConfigError, match="seq_len=20"):
        seq2seq("learned")(
            torch.ones(1, 20, dtype=torch.long), decoder_input_ids=torch.ones(1, 3).long()
        )


# A value other than the default for every field PosAttnConfig declares; a new field must be
# added here, and the test below then checks that it reaches both stacks.
NON_DEFAULT = dict(
    vocab_size=41,
    d_model=32,
    num_heads=2,
    ffn_dim=40,
    max_len=24,
    dropout=0.15,
    attention_dropout=0.05,
    norm="post",
    layer_norm_eps=1e-5,
    encoding="t5",
    encoding_options={"num_buckets": 8, "max_distance": 20},
    segments="input",
    num_segments=3,
    kernel="eager",
    init_std=0.03,
    pad_token_id=1,
    bos_token_id=5,
    eos_token_id=6,
    use_cache=False,
    tie_word_embeddings=False,
    word_scale=2.0,
)


def test_every_config_field_reaches_both_stacks():
    from dataclasses import fields

    from transformers import PreTrainedConfig

    from posattn.models.config import PosAttnConfig
    from posattn.models.decoder import PER_STACK_FIELDS, STACK_FIELDS

    inherited = {f.name for f in fields(PreTrainedConfig)}
    declared = {f.name for f in fields(PosAttnConfig)} - inherited
    assert set(STACK_FIELDS) == declared - set(PER_STACK_FIELDS) == set(NON_DEFAULT)
    defaults = PosAttnSeq2SeqConfig()
    for name, value in NON_DEFAULT.items():
        assert getattr(defaults, name) != value, name
    config = PosAttnSeq2SeqConfig(**NON_DEFAULT, num_layers=1, num_decoder_layers=2)
    model = PosAttnForSeq2SeqLM(config)
    for stack, causal, depth in ((model.encoder, False, 1), (model.decoder, True, 2)):
        for name, value in NON_DEFAULT.items():
            assert getattr(stack.config, name) == value, name
        assert (stack.config.causal, stack.config.num_layers) == (causal, depth)
