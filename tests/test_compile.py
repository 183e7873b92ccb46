"""torch.compile and torch.export on posattn's models: one graph (fullgraph=True, no graph
break) in training and inference for an encoding acting at each place a method acts (input
table, RoPE, T5 bias, TUPE, DIET-ABS, Shaw, DeBERTa, Linformer), with the eager model's values
and gradients; the causal LM and the encoder-decoder too; the segment check still runs inside
the graph; an export equals the eager model and leaves it working (no traced tensor survives in
the inference caches).

dynamo's "eager" backend runs the captured graph as is: the graph capture is what is tested
here, in a few seconds per model (inductor's code generation adds nothing to that)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config

from posattn import (
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnSeq2SeqConfig,
)

PLACES = ["learned", "rope", "t5", "tupe-r", "diet-abs", "shaw", "deberta", "linformer"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def one_graph(fn):
    return torch.compile(fn, fullgraph=True, backend="eager")


def mlm_batch():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (2, 8), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    segments = torch.zeros_like(ids)
    segments[:, 4:] = 1
    labels = ids.masked_fill(torch.rand(ids.shape, generator=generator) < 0.5, -100)
    return ids, mask, segments, labels


def masked_lm(encoding: str) -> PosAttnForMaskedLM:
    torch.manual_seed(0)
    config = tiny_config(encoding, num_layers=1, dropout=0.0, attention_dropout=0.0)
    return PosAttnForMaskedLM(config)


@pytest.mark.parametrize("encoding", PLACES)
def test_masked_lm_compiles_to_one_graph_with_eager_values(encoding):
    model = masked_lm(encoding)
    ids, mask, segments, labels = mlm_batch()

    def loss(ids, mask, segments, labels):
        return model(ids, attention_mask=mask, token_type_ids=segments, labels=labels).loss

    def logits(ids, mask, segments):
        return model(ids, attention_mask=mask, token_type_ids=segments).logits

    model.train()
    eager_loss = loss(ids, mask, segments, labels)
    eager_grads = torch.autograd.grad(eager_loss, list(model.parameters()), allow_unused=True)
    compiled_loss = one_graph(loss)(ids, mask, segments, labels)
    grads = torch.autograd.grad(compiled_loss, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(compiled_loss, eager_loss)
    for got, expected in zip(grads, eager_grads, strict=True):
        assert (got is None) == (expected is None)
        if got is not None:
            torch.testing.assert_close(got, expected)
    model.eval()
    with torch.no_grad():
        eager = logits(ids, mask, segments)
        compiled = one_graph(logits)(ids, mask, segments)
        again = logits(ids, mask, segments)  # the eager term cache is intact after tracing
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(again, eager)


def test_the_segment_check_runs_inside_the_graph():
    model = masked_lm("t5").eval()
    ids, _, segments, _ = mlm_batch()
    run = one_graph(lambda ids, segments: model(ids, token_type_ids=segments).logits)
    with torch.no_grad():
        run(ids, segments)
        with pytest.raises(RuntimeError, match="segment_ids must be in"):
            run(ids, segments + 1)


def test_the_float_mask_check_runs_inside_the_graph():
    model = masked_lm("t5").eval()
    ids, mask, _, _ = mlm_batch()
    run = one_graph(lambda ids, mask: model(ids, attention_mask=mask).logits)
    real = mask.to(torch.get_default_dtype())
    with torch.no_grad():
        torch.testing.assert_close(run(ids, real), model(ids, attention_mask=mask).logits)
        with pytest.raises(RuntimeError, match="attention_mask must hold 1 for a real token"):
            run(ids, (1 - real) * -1e9)  # additive


def test_causal_lm_and_seq2seq_compile_to_one_graph(encoding="diet-rel"):
    torch.manual_seed(0)
    causal = PosAttnForCausalLM(tiny_config(encoding, causal=True, segments="none")).eval()
    ids, mask, _, _ = mlm_batch()
    with torch.no_grad():
        expected = causal(ids, attention_mask=mask).logits
        got = one_graph(lambda i, m: causal(i, attention_mask=m).logits)(ids, mask)
    torch.testing.assert_close(got, expected)
    config = PosAttnSeq2SeqConfig(
        vocab_size=40, d_model=24, num_layers=1, num_heads=3, ffn_dim=32, encoding=encoding
    )
    seq2seq = PosAttnForSeq2SeqLM(config).train()
    labels = ids[:, :5]

    def loss(ids, mask, labels):
        return seq2seq(ids, mask, labels=labels).loss

    torch.manual_seed(1)
    expected = loss(ids, mask, labels)
    torch.manual_seed(1)
    torch.testing.assert_close(one_graph(loss)(ids, mask, labels), expected)


@pytest.mark.parametrize("encoding", ["t5", "diet-abs"])
def test_export_equals_eager_and_leaves_the_eager_model_working(encoding):
    model = masked_lm(encoding).eval()
    ids, mask, _, _ = mlm_batch()
    fresh = masked_lm(encoding).eval()
    with torch.no_grad():
        expected = fresh(ids, attention_mask=mask).logits
        exported = torch.export.export(model, (ids,), {"attention_mask": mask})
        after = model(ids, attention_mask=mask).logits
        program = exported.module()(ids, attention_mask=mask).logits
    torch.testing.assert_close(after, expected)
    torch.testing.assert_close(program, expected)
