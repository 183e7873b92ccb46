"""Positions as an input: `position_ids` on every model and on the encoder stack.

Relative encodings are unchanged by a shift of every position; absolute ones change exactly as
a shifted table lookup; a packed row of documents (transformers' DataCollatorWithFlattening)
equals the documents run one by one; a left-padded causal LM equals the unpadded one at its
real tokens, in `generate` too; bad positions and unknown keywords raise.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import CAUSAL_ONLY, PROJECTED, settings_of, tiny_config, tiny_encoder
from transformers import DataCollatorWithFlattening, Trainer, TrainingArguments

from posattn import (
    ENCODINGS,
    PosAttnConfigError,
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSequenceClassification,
    PosAttnModel,
)
from posattn.encodings.absolute import sinusoidal_table
from posattn.models import positions as positions_module
from posattn.models.seq2seq import PosAttnForSeq2SeqLM, PosAttnSeq2SeqConfig

WITH_POSITIONS = [name for name in ENCODINGS if name not in PROJECTED]
# Shift-invariant: every logit depends on position differences only.
RELATIVE = ["none", "shaw", "t5", "diet-rel", "kerple", "alibi", "rope", "xpos", "deberta"]
# Where each absolute encoding keeps its rows, and along which dimension they are indexed.
TABLES = {
    "learned": lambda e: [(e.table.weight, 0)],
    "bert-r": lambda e: [(e.absolute.table.weight, 0)],
    "tupe-a": lambda e: [(e.positions.table, 0)],
    "tupe-r": lambda e: [(e.positions.table, 0)],
    "bert-ad": lambda e: [(e.positions.table, 0)],
    "diet-abs": lambda e: [(e.query, 2), (e.key, 2)],
}
# Variants whose per-position terms take their own path.
VARIANTS = [
    ("shaw", {"values": True, "max_distance": 3}),
    ("deberta", {"share_att_key": False, "position_buckets": 4, "max_relative_positions": 16}),
    ("t5", {"bidirectional": False, "num_buckets": 4, "max_distance": 6}),
    ("diet-abs", {"sharing": "none", "rank": 2}),
    ("tupe-a", {"untie_cls": False}),
    (
        "rope",
        {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}},
    ),
    ("xpos", {"scaling": {"rope_type": "dynamic", "factor": 2.0}}),
]


def directions(encoding: str) -> list[bool]:
    return sorted({causal for causal, _ in settings_of(encoding)})


def cases(names) -> list:
    return [
        pytest.param(name, options, causal, id=f"{name}-{'causal' if causal else 'bidir'}{tag}")
        for name, options, tag in names
        for causal in directions(name)
    ]


ALL_CASES = cases([(name, {}, "") for name in WITH_POSITIONS] + [(n, o, "-v") for n, o in VARIANTS])


def arange_rows(batch: int, n: int, start: int = 0) -> torch.Tensor:
    return torch.arange(start, start + n).expand(batch, n)


@pytest.mark.parametrize(("encoding", "options", "causal"), ALL_CASES)
def test_default_positions_keep_the_fast_path_and_the_general_path_agrees(
    encoding, options, causal, monkeypatch
):
    model = tiny_encoder(encoding, causal=causal, segments="input", encoding_options=options)
    torch.manual_seed(1)
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        default = model(ids)
        # position_ids equal to 0..n-1: the very same computation, bit for bit
        assert torch.equal(model(ids, position_ids=arange_rows(2, 9)), default)
        # the per-row path (`layer_terms_at`) at 0..n-1 computes the same values
        monkeypatch.setattr(positions_module, "are_default", lambda *args: False)
        general = model(ids, position_ids=arange_rows(1, 9))
    torch.testing.assert_close(general, default, atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    ("encoding", "options", "causal"), cases([(name, {}, "") for name in RELATIVE])
)
def test_a_shift_of_every_position_leaves_relative_encodings_unchanged(encoding, options, causal):
    model = tiny_encoder(encoding, causal=causal, segments="input", encoding_options=options)
    torch.manual_seed(1)
    ids = torch.randint(0, 40, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 7:] = 0
    with torch.no_grad():
        default = model(ids, mask)
        shifted = model(ids, mask, position_ids=arange_rows(2, 9, start=5))
        # one row shifted further than the other: each row has its own positions
        rows = torch.stack([torch.arange(9) + 2, torch.arange(9) + 40])
        per_row = model(ids, mask, position_ids=rows)
    torch.testing.assert_close(shifted, default, atol=1e-9, rtol=0)
    torch.testing.assert_close(per_row, default, atol=1e-9, rtol=0)


def shifted_copy(model, shift: int):
    """The model with every position table read `shift` rows later: row i holds row i + shift."""
    shifted = copy.deepcopy(model)
    if shifted.config.encoding == "sinusoidal":
        d = shifted.config.d_model
        shifted.encoding.input_embedding = lambda n, device, dtype: sinusoidal_table(
            n + shift, d, device, dtype
        )[shift:]
        return shifted
    with torch.no_grad():
        for table, dim in TABLES[shifted.config.encoding](shifted.encoding):
            table.copy_(table.roll(-shift, dim))
    return shifted


@pytest.mark.parametrize(
    ("encoding", "options", "causal"),
    cases(
        [(name, {}, "") for name in ("learned", "sinusoidal", "bert-r", "bert-ad", "diet-abs")]
        + [(name, {"untie_cls": False}, "") for name in ("tupe-a", "tupe-r")]
        + [("diet-abs", {"sharing": "none", "rank": 2}, "-v")]
    ),
)
def test_a_shift_changes_absolute_encodings_as_a_shifted_table_lookup(encoding, options, causal):
    model = tiny_encoder(encoding, causal=causal, segments="input", encoding_options=options)
    torch.manual_seed(1)
    ids = torch.randint(0, 40, (2, 9))
    shift = 6  # 6 + 9 <= max_len = 16
    with torch.no_grad():
        shifted = model(ids, position_ids=arange_rows(2, 9, start=shift))
        reference = shifted_copy(model, shift)(ids)
        unshifted = model(ids)
    torch.testing.assert_close(shifted, reference, atol=1e-10, rtol=0)
    assert (shifted - unshifted).abs().max() > 1e-3  # the positions did change the output


def test_fire_at_given_positions_follows_its_equation():
    """FIRE normalises by the query's position, so it is not shift-invariant: its bias at
    given positions against f(psi(p_i - p_j) / psi(max(L, p_i))) written out per entry."""
    model = tiny_encoder("fire", causal=True)
    layer = model.encoding.layers[1]
    positions = torch.tensor([[3, 4, 5, 6], [0, 1, 0, 1]])
    bias = model.encoding.layer_terms_at(positions, torch.float64)[1].bias
    psi = lambda x: math.log1p(abs(layer.c.item() * x))  # noqa: E731
    threshold = abs(layer.threshold.item())
    for b in range(2):
        for i in range(4):
            for j in range(4):
                p_i, p_j = positions[b, i].item(), positions[b, j].item()
                x = psi(p_i - p_j) / (psi(max(threshold, p_i)) + layer.eps)
                expected = layer.mlp(torch.tensor([x]))
                torch.testing.assert_close(bias[b, :, i, j], expected)


def documents(lengths: list[list[int]], seed: int = 2):
    """Rows of packed documents: (ids [B, n], positions [B, n], per-row list of slices)."""
    torch.manual_seed(seed)
    rows, positions, spans = [], [], []
    for row in lengths:
        rows.append(torch.randint(0, 40, (sum(row),)))
        positions.append(torch.cat([torch.arange(n) for n in row]))
        starts = [sum(row[:k]) for k in range(len(row))]
        spans.append([slice(s, s + n) for s, n in zip(starts, row, strict=True)])
    return torch.stack(rows), torch.stack(positions), spans


@pytest.mark.parametrize(
    ("encoding", "causal", "segments"),
    [
        pytest.param(name, causal, segments, id=f"{name}-{causal}-{segments}")
        for name in WITH_POSITIONS
        for causal, segments in settings_of(name)
    ],
)
def test_a_packed_batch_equals_its_documents_run_separately(encoding, causal, segments):
    model = tiny_encoder(encoding, causal=causal, segments=segments)
    ids, positions, spans = documents([[5, 6], [7, 4]])
    segment_ids = torch.randint(0, 2, ids.shape)
    with torch.no_grad():
        packed = model(ids, segment_ids=segment_ids, position_ids=positions)
        for row, row_spans in enumerate(spans):
            for span in row_spans:
                alone = model(
                    ids[row : row + 1, span], segment_ids=segment_ids[row : row + 1, span]
                )
                torch.testing.assert_close(packed[row, span], alone[0], atol=1e-10, rtol=0)


def test_flattening_collator_batch_gives_the_separate_losses_of_its_documents():
    """transformers' DataCollatorWithFlattening output goes straight into the causal LM: the
    packed loss is the token-weighted mean of the documents' own losses."""
    torch.manual_seed(0)
    model = PosAttnForCausalLM(tiny_config("rope", causal=True)).eval()
    docs = [torch.randint(1, 40, (n,)).tolist() for n in (5, 7, 3)]
    batch = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": d} for d in docs])
    assert set(batch) == {"input_ids", "labels", "position_ids"}
    with torch.no_grad():
        packed = model(**batch).loss
        losses = [model(torch.tensor([d]), labels=torch.tensor([d])).loss for d in docs]
    counts = torch.tensor([len(d) - 1 for d in docs], dtype=torch.float64)
    torch.testing.assert_close(packed, (torch.stack(losses) * counts).sum() / counts.sum())


def random_lm(encoding: str, **overrides) -> PosAttnForCausalLM:
    torch.manual_seed(0)
    model = PosAttnForCausalLM(tiny_config(encoding, causal=True, **overrides)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model


CAUSAL = [name for name in WITH_POSITIONS]


@pytest.mark.parametrize("encoding", CAUSAL)
def test_left_padded_causal_lm_equals_the_unpadded_rows(encoding):
    model = random_lm(encoding, segments="none", max_len=24)
    torch.manual_seed(3)
    long, short = torch.randint(1, 40, (1, 7)), torch.randint(1, 40, (1, 4))
    padded = torch.cat([long, torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1)])
    mask = (torch.arange(7) >= torch.tensor([[0], [3]])).long()
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # as transformers' generate builds them
    with torch.no_grad():
        logits = model(padded, attention_mask=mask, position_ids=position_ids).logits
        torch.testing.assert_close(logits[0], model(long).logits[0], atol=1e-9, rtol=0)
        torch.testing.assert_close(logits[1, 3:], model(short).logits[0], atol=1e-9, rtol=0)
    # generate derives the positions itself and decodes with the cache
    # every step compared: no row stops early at [SEP] (the config's eos_token_id)
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
    together = model.generate(padded, attention_mask=mask, **kwargs)
    assert torch.equal(together[0], model.generate(long, **kwargs)[0])
    assert torch.equal(together[1, 3:], model.generate(short, **kwargs)[0])


@pytest.mark.parametrize("encoding", ["learned", "t5", "rope", "shaw"])
def test_incremental_decoding_at_given_positions_equals_the_full_forward(encoding):
    from transformers import DynamicCache

    model = random_lm(encoding, segments="none", max_len=24)
    torch.manual_seed(4)
    ids = torch.randint(1, 40, (2, 9))
    position_ids = torch.stack([torch.arange(9) + 2, torch.arange(9) * 2])
    # With an attention mask: without one, positions that skip would mark packed documents.
    mask = torch.ones_like(ids)
    with torch.no_grad():
        full = model(ids, attention_mask=mask, position_ids=position_ids).logits
        cache, steps, start = DynamicCache(config=model.config), [], 0
        for size in (4, 2, 1, 1, 1):
            end = start + size
            out = model(
                ids[:, start:end],
                attention_mask=mask[:, :end],
                position_ids=position_ids[:, start:end],
                past_key_values=cache,
                use_cache=True,
            )
            steps.append(out.logits)
            start = end
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-9, rtol=0)


def test_seq2seq_takes_source_and_target_positions():
    config = PosAttnSeq2SeqConfig(
        encoding="t5", vocab_size=40, d_model=24, num_layers=2, num_heads=3, ffn_dim=32,
        max_len=16, dropout=0.0, attention_dropout=0.0, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = PosAttnForSeq2SeqLM(config).eval()
    source, target = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 5))
    with torch.no_grad():
        default = model(source, decoder_input_ids=target).logits
        shifted = model(
            source,
            decoder_input_ids=target,
            position_ids=arange_rows(2, 6, start=4),
            decoder_position_ids=arange_rows(2, 5, start=7),
        ).logits
        learned = PosAttnForSeq2SeqLM(
            PosAttnSeq2SeqConfig(**{**config.to_dict(), "encoding": "learned"})
        )
        learned.eval()
        learned_default = learned(source, decoder_input_ids=target).logits
        learned_shifted = learned(
            source, decoder_input_ids=target, decoder_position_ids=arange_rows(2, 5, start=3)
        ).logits
    torch.testing.assert_close(shifted, default, atol=1e-9, rtol=0)
    assert (learned_shifted - learned_default).abs().max() > 1e-3


def model_of_each_class():
    config = tiny_config("learned")
    return [
        (PosAttnModel(config), {}),
        (PosAttnForMaskedLM(config), {}),
        (PosAttnForSequenceClassification(tiny_config("learned", num_labels=2)), {}),
        (PosAttnForCausalLM(tiny_config("learned", causal=True)), {}),
        (
            PosAttnForSeq2SeqLM(
                PosAttnSeq2SeqConfig(
                    vocab_size=40, d_model=24, num_layers=1, num_heads=3, ffn_dim=32, max_len=16
                )
            ),
            {"decoder_input_ids": torch.ones(1, 3, dtype=torch.long)},
        ),
    ]


@pytest.mark.parametrize("index", range(5))
def test_an_unknown_keyword_is_an_error(index):
    model, extra = model_of_each_class()[index]
    ids = torch.ones(1, 5, dtype=torch.long)
    model(ids, **extra)  # the same call without the misspelt keyword runs
    for bad in ({"position_id": torch.zeros(1, 5, dtype=torch.long)}, {"bogus": 1}):
        with pytest.raises(TypeError, match=next(iter(bad))):
            model(ids, **extra, **bad)


def test_the_trainer_still_passes_the_item_count(tmp_path):
    """Without **kwargs the Trainer would stop passing num_items_in_batch (it looks for them
    unless the model says it takes loss keywords)."""
    arguments = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    for model, _ in model_of_each_class()[1:]:
        assert Trainer(model=model, args=arguments).model_accepts_loss_kwargs


@pytest.mark.parametrize("encoding", [name for name in ENCODINGS if name in TABLES])
def test_a_position_past_the_table_raises_naming_position_ids(encoding):
    model = tiny_encoder(encoding, causal=encoding in CAUSAL_ONLY)
    ids = torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(PosAttnConfigError, match=r"position_ids=.*\[0, 16\].*max_len=16"):
        model(ids, position_ids=torch.tensor([[0, 1, 2, 16]]))
    # a packed row longer than the table is fine while its positions stay inside it
    long = torch.ones(1, 20, dtype=torch.long)
    model(long, position_ids=torch.cat([torch.arange(10), torch.arange(10)])[None])


@pytest.mark.parametrize(
    ("position_ids", "message"),
    [
        (torch.tensor([[0, -1, 2, 3]]), r"position_ids=.*\[-1, 3\].*>= 0"),
        (torch.tensor([[0.0, 1.0, 2.0, 3.0]]), r"position_ids=.*integer positions"),
        (torch.tensor([0, 1, 2, 3]), r"position_ids=.*\[batch, seq_len\]"),
        (torch.tensor([[0, 1, 2]]), r"position_ids.shape=\(1, 3\).*\(2, 4\) or \(1, 4\)"),
    ],
)
def test_bad_position_ids_raise_naming_the_parameter(position_ids, message):
    model = tiny_encoder("rope")
    with pytest.raises(PosAttnConfigError, match=message):
        model(torch.ones(2, 4, dtype=torch.long), position_ids=position_ids)


@pytest.mark.parametrize("encoding", sorted(PROJECTED))
def test_sequence_projections_refuse_positions_and_say_why(encoding):
    model = tiny_encoder(encoding)
    ids = torch.ones(2, 6, dtype=torch.long)
    with torch.no_grad():
        # the default positions are the ones it has: accepted, the same computation
        assert torch.equal(model(ids, position_ids=arange_rows(2, 6)), model(ids))
    with pytest.raises(PosAttnConfigError, match=r"position_ids=.*projects keys and values"):
        model(ids, position_ids=arange_rows(2, 6, start=1))


@pytest.mark.parametrize("kernel", ["sdpa", "sdpa-lowmem", "flex"])
@pytest.mark.parametrize("encoding", ["t5", "diet-abs", "tupe-r", "alibi"])
def test_per_row_terms_run_in_every_kernel_with_equal_gradients(encoding, kernel, choose):
    """Per-row biases [B, H, n, n] (and DIET-ABS' per-row factors, folded) through the fused
    kernels: outputs and parameter gradients equal the eager kernel's."""
    ids, positions, _ = documents([[5, 6], [7, 4]])
    if kernel == "flex":  # no backward on CPU: the forward alone
        choose(fold=False)
    else:
        choose(fold=True)
    results = []
    for name in ("eager", kernel):
        model = tiny_encoder(encoding, kernel=name)
        if kernel == "flex":
            with torch.no_grad():
                results.append((model(ids, position_ids=positions), []))
            continue
        out = model(ids, position_ids=positions)
        out.square().sum().backward()
        results.append((out, [p.grad for p in model.encoding.parameters()]))
    (eager, eager_grads), (fused, fused_grads) = results
    torch.testing.assert_close(fused, eager, atol=1e-9, rtol=0)
    for fused_grad, eager_grad in zip(fused_grads, eager_grads, strict=True):
        torch.testing.assert_close(fused_grad, eager_grad, atol=1e-8, rtol=0)


def test_a_cache_remembers_its_positions_and_later_tokens_take_the_defaults():
    """After a forward at given positions, a call without position_ids puts its tokens at
    transformers' default positions past, past + 1, ... while the cached keys keep theirs;
    past the table it raises naming position_ids."""
    from transformers import DynamicCache

    model = random_lm("learned", segments="none", max_len=8)
    ids = torch.randint(1, 40, (1, 8))
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids[:, :4], position_ids=torch.tensor([[3, 4, 5, 6]]), past_key_values=cache)
        later = model(ids[:, 4:6], past_key_values=cache).logits
        full = model(
            ids[:, :6],
            attention_mask=torch.ones(1, 6, dtype=torch.long),
            position_ids=torch.tensor([[3, 4, 5, 6, 4, 5]]),
        ).logits
        torch.testing.assert_close(later, full[:, 4:6], atol=1e-9, rtol=0)
        model(ids[:, 6:8], past_key_values=cache)  # at 6, 7
        with pytest.raises(PosAttnConfigError, match=r"position_ids=.*\[8, 8\].*max_len=8"):
            model(ids[:, :1], past_key_values=cache)


ROWS_ALONE = ["alibi", "t5", "diet-rel", "kerple", "fire", "tupe-a", "tupe-r", "diet-abs"]


@pytest.mark.parametrize("encoding", ROWS_ALONE)
def test_decoding_rows_at_given_positions_are_built_alone(encoding):
    """A decoding step at given positions (what `generate` passes) reads the bias rows of its
    new tokens only: equal to the whole bias's rows, the whole [B, H, n, n] never built (it
    was, at every new token: ALiBi at 2000 cached tokens 576 ms a token, 3 ms from its rows).
    Restricted twice, the rows still line up."""
    from posattn.encodings.base import DeferredBias, restrict_rows

    model = tiny_encoder(encoding, causal=True)
    positions = torch.tensor([[0, 0, 0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6, 7, 8]])
    whole = model.encoding.layer_terms_at(positions, torch.float64)
    expected = [terms.bias for terms in model.encoding.layer_terms_at(positions, torch.float64)]
    for start in (4, 8):
        rows = restrict_rows(whole, start)
        for layer, terms in enumerate(rows):  # a product of fewer rows rounds its own way
            want = expected[layer][..., start:, :]
            torch.testing.assert_close(terms.bias, want, rtol=1e-12, atol=1e-12)
            later = terms.query_rows(2).bias if start == 4 else None
            if later is not None:
                want = expected[layer][..., 6:, :]
                torch.testing.assert_close(later, want, rtol=1e-12, atol=1e-12)
    assert not any(DeferredBias.is_built(terms) for terms in whole)


@pytest.mark.parametrize("encoding", ROWS_ALONE)
def test_decoding_rows_are_built_alone(encoding):
    """The same at positions 0..n-1 (`window_terms`' restriction, what a cached step without
    position_ids reads): each layer's rows equal the whole bias's, which is never built. TUPE
    with its [CLS] inside the rows (start 2 <= cls_index 3) and before them (start 5)."""
    from posattn.encodings.base import DeferredBias, restrict_rows

    options = {"cls_index": 3} if encoding.startswith("tupe") else {}
    model = tiny_encoder(encoding, causal=True, encoding_options=options)
    cpu = torch.device("cpu")
    expected = [terms.bias for terms in model.encoding.layer_terms(9, cpu, torch.float64)]
    for start in (2, 5, 8):
        whole = model.encoding.layer_terms(9, cpu, torch.float64)
        rows = restrict_rows(whole, start)
        for layer, terms in enumerate(rows):  # a product of fewer rows rounds its own way
            want = expected[layer][..., start:, :]
            torch.testing.assert_close(terms.bias, want, rtol=1e-12, atol=1e-12)
        assert not any(DeferredBias.is_built(terms) for terms in whole)


CONTENT_POSITION = {
    "shaw": ({"values": True, "max_distance": 3}, ("_key_logits", "_key_logits_at")),
    "deberta": ({"position_buckets": 4}, ("_gathered_logits", "_logits_by_offset")),
}


@pytest.mark.parametrize("skewed", [False, True])
@pytest.mark.parametrize("encoding", list(CONTENT_POSITION))
def test_content_position_decoding_rows_are_made_alone(encoding, skewed):
    """Shaw's and DeBERTa's terms for a decoding step's rows, made directly
    (`LayerTerms.rows`): their content x position logits (and Shaw's value term) equal the
    whole terms' rows, at positions 0..n-1 and at given positions, restricted once and twice,
    by the gathers and by the skewed windows; each call computes the new rows alone."""
    from posattn import execution
    from posattn.encodings.base import restrict_rows

    options, methods = CONTENT_POSITION[encoding]
    model = tiny_encoder(encoding, causal=True, encoding_options=options)
    encoding_module, attention = model.encoding, model.layers[0].attention
    torch.manual_seed(3)
    n = 9
    q, k = (torch.randn(2, 3, n, 8, dtype=torch.float64) for _ in "qk")
    probs = torch.softmax(torch.randn(2, 3, n, n, dtype=torch.float64), -1)
    positions = torch.tensor([[0, 0, 0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6, 7, 8]])
    seen = []  # the query rows each logits call computes
    for name in methods:
        method = getattr(encoding_module, name)

        def recorded(*arguments, method=method):
            seen.append(arguments[-3].shape[-2])  # q, k, attention come last
            return method(*arguments)

        setattr(encoding_module, name, recorded)
    with execution.choose(skew=skewed):
        for whole in (
            encoding_module.layer_terms(n, q.device, q.dtype),
            encoding_module.layer_terms_at(positions, q.dtype),
        ):
            logits = whole[1].qk_logits(q, k, attention)
            values = whole[1].value_term(probs) if whole[1].value_term else None
            for start, later in ((4, 0), (4, 2), (8, 0)):
                rows = restrict_rows(whole, start)[1].query_rows(later)
                first = start + later
                seen.clear()
                torch.testing.assert_close(
                    rows.qk_logits(q[..., first:, :], k, attention), logits[..., first:, :]
                )
                assert seen == [n - first]  # the new rows alone, not all n
                if values is not None:
                    torch.testing.assert_close(
                        rows.value_term(probs[..., first:, :]), values[..., first:, :]
                    )
