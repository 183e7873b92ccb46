"""Dynamic shapes: one graph for every batch size and length, where torch.compile traces the
length as symbolic (dynamic=True, or dynamo's automatic dynamic shapes at a second length)
and in torch.export with `Dim`s, for every encoding, with the eager model's values."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config, tiny_seq2seq_config
from test_compile import fresh_dynamo, masked_lm  # noqa: F401 - fresh_dynamo is a fixture
from torch._dynamo.utils import counters

from posattn import PosAttnForCausalLM, PosAttnForSeq2SeqLM, PosAttnForSequenceClassification
from posattn.encodings import ENCODINGS


def batch_of_length(n: int):
    """Ids, a mask (the second example's last two tokens padded) and labels of length n."""
    generator = torch.Generator().manual_seed(n)
    ids = torch.randint(0, 40, (2, n), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    labels = ids.clone()
    labels[:, ::2] = -100
    return ids, mask, labels


def batch_and_length_dims(*names: str) -> dict:
    """`dynamic_shapes` for [batch, length] inputs of those names: one batch `Dim` and one
    length `Dim` (2 to the position tables' 16) that they all share."""
    batch, length = torch.export.Dim("batch", max=64), torch.export.Dim("length", min=2, max=16)
    return {name: {0: batch, 1: length} for name in names}


def other_sizes():
    """(ids, mask) of a batch of 4 at lengths 2, 5, 13 and 16: none the traced 2 x 8."""
    for n in (2, 5, 13, 16):
        ids, mask, _ = batch_of_length(n)
        yield ids.repeat(2, 1), mask.repeat(2, 1)


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_dynamic_length_trains_through_one_graph_with_eager_values(encoding):
    """torch.compile(dynamic=True): one graph serves lengths 8, 5 and 13 with eager's loss and
    gradients. A length the trace fixed (unfold's int size for a Toeplitz bias, whether a
    slice of a position table is contiguous, an error message formatted from the length)
    compiled a graph per length."""
    model = masked_lm(encoding).train()
    parameters = list(model.parameters())

    def loss(ids, mask, labels):
        return model(ids, attention_mask=mask, labels=labels).loss

    compiled = torch.compile(loss, dynamic=True, fullgraph=True, backend="eager")
    counters.clear()
    for n in (8, 5, 13):
        ids, mask, labels = batch_of_length(n)
        expected = loss(ids, mask, labels)
        want_grads = torch.autograd.grad(expected, parameters, allow_unused=True)
        got = compiled(ids, mask, labels)
        torch.testing.assert_close(got, expected)
        got_grads = torch.autograd.grad(got, parameters, allow_unused=True)
        for g, e in zip(got_grads, want_grads, strict=True):
            assert (g is None) == (e is None)
            if g is not None:
                torch.testing.assert_close(g, e)
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_an_export_with_a_dynamic_batch_and_length_equals_eager_at_other_sizes(encoding):
    """torch.export with `Dim`s for the batch and the length (what an ONNX or AOTInductor
    deployment takes): traced at 2 x 8, the program equals the eager model from length 2 to
    the position table's size (16)."""
    model = masked_lm(encoding).eval()
    ids, mask, _ = batch_of_length(8)
    dims = batch_and_length_dims("input_ids", "attention_mask")
    with torch.no_grad():
        program = torch.export.export(
            model, (ids,), {"attention_mask": mask}, dynamic_shapes=dims
        ).module()
        for ids, mask in other_sizes():
            expected = model(ids, attention_mask=mask).logits
            torch.testing.assert_close(program(ids, attention_mask=mask).logits, expected)


def test_the_other_heads_export_with_dynamic_sizes():
    """The classifier, the causal LM and the encoder-decoder (its source and target lengths
    each their own `Dim`) with T5's bias: exported at one size, equal to eager at others."""
    batch = torch.export.Dim("batch", max=64)
    source, target = (torch.export.Dim(name, min=2, max=16) for name in ("source", "target"))
    torch.manual_seed(0)
    single = {
        "classifier": PosAttnForSequenceClassification(tiny_config("t5", num_labels=3)),
        "causal LM": PosAttnForCausalLM(tiny_config("t5", causal=True)),
    }
    for name, model in single.items():
        ids, mask, _ = batch_of_length(8)
        dims = {"input_ids": {0: batch, 1: source}, "attention_mask": {0: batch, 1: source}}
        with torch.no_grad():
            program = torch.export.export(model.eval(), (ids, mask), dynamic_shapes=dims).module()
            for n in (3, 13):
                ids, mask, _ = batch_of_length(n)
                expected = model(ids, mask).logits
                torch.testing.assert_close(program(ids, mask).logits, expected, msg=name)
    model = PosAttnForSeq2SeqLM(tiny_seq2seq_config("t5")).eval()
    generator = torch.Generator().manual_seed(3)

    def pair(s: int, t: int):
        src = torch.randint(3, 30, (3, s), generator=generator)
        mask = torch.ones_like(src)
        mask[-1, -1] = 0
        return src, mask, torch.randint(3, 30, (3, t), generator=generator)

    src, mask, tgt = pair(9, 7)
    dims = {
        "input_ids": {0: batch, 1: source},
        "attention_mask": {0: batch, 1: source},
        "decoder_input_ids": {0: batch, 1: target},
        "use_cache": None,
    }
    with torch.no_grad():
        inputs = {"decoder_input_ids": tgt, "use_cache": False}
        program = torch.export.export(model, (src, mask), inputs, dynamic_shapes=dims).module()
        for s, t in ((5, 11), (14, 3)):
            src, mask, tgt = pair(s, t)
            inputs = {"decoder_input_ids": tgt, "use_cache": False}
            expected = model(src, mask, **inputs).logits
            torch.testing.assert_close(program(src, mask, **inputs).logits, expected)


class Logits(torch.nn.Module):
    """A masked LM's logits from positional inputs, as torch.jit.trace takes a module."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(ids, attention_mask=mask).logits


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::FutureWarning")
def test_torch_jit_trace_runs_at_other_lengths(encoding):
    """torch.jit.trace records sizes as tensors, which are not symbolic lengths, and a host
    read or a custom autograd Function as a constant or an op it cannot replay: traced at
    length 8, every masked LM runs at a shorter and a longer length with the eager model's
    values (Shaw's trace failed, TUPE's [CLS] writes and DeBERTa's rows kept length 8)."""
    model = Logits(masked_lm(encoding).eval())
    ids, mask, _ = batch_of_length(8)
    with torch.no_grad():
        traced = torch.jit.trace(model, (ids, mask), check_trace=False)
        for n in (5, 11):
            ids, mask, _ = batch_of_length(n)
            torch.testing.assert_close(traced(ids, mask), model(ids, mask))
