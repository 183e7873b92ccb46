"""Properties the papers prove or state: shift invariance, permutation equivariance, the TUPE
[CLS] row and column, DIET Theorem 1, and how terms are shared."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import layer_logits, settings_of, tiny_encoder

from posattn.encodings import ENCODINGS


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_appending_padding_leaves_real_positions_unchanged(encoding):
    """Right-padding a batch to a longer length never changes the outputs at real tokens:
    the padded keys are invisible to every encoding (Linformer's projections included)."""
    causal, _ = settings_of(encoding)[0]
    model = tiny_encoder(encoding, causal=causal, segments="input")
    ids = torch.randint(1, 40, (2, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    padded_ids = torch.cat([ids, torch.zeros(2, 5, dtype=torch.long)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(2, 5, dtype=torch.bool)], dim=1)
    out, padded = model(ids, mask), model(padded_ids, padded_mask)
    torch.testing.assert_close(padded[:, :9][mask], out[mask], atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize(
    ("encoding", "options"),
    [
        ("t5", {"num_buckets": 8, "max_distance": 6}),
        ("t5", {"num_buckets": 8, "max_distance": 6, "bidirectional": False}),
        ("shaw", {"max_distance": 3}),
        ("diet-rel", {"max_distance": 4}),
        ("diet-rel", {}),
    ],
)
def test_relative_methods_are_shift_invariant(encoding, options):
    """Shifting every position by s leaves the logits of the same content unchanged: the
    logits of tokens s..s+n-1 in a longer sequence equal those of the same tokens at 0..n-1."""
    model = tiny_encoder(encoding, encoding_options=options)
    torch.manual_seed(2)
    x = torch.randn(2, 14, 24)
    for shift in (1, 5):
        shifted = layer_logits(model, x, 1)[:, :, shift : shift + 9, shift : shift + 9]
        torch.testing.assert_close(layer_logits(model, x[:, shift : shift + 9], 1), shifted)


def test_absolute_methods_are_not_shift_invariant():
    """The check above can fail: DIET-ABS logits do change under a shift."""
    model = tiny_encoder("diet-abs")
    x = torch.randn(1, 12, 24)
    shifted = layer_logits(model, x, 0)[:, :, 3:12, 3:12]
    assert (layer_logits(model, x[:, 3:12], 0) - shifted).abs().max() > 1e-3


def test_no_position_encoder_is_permutation_equivariant():
    model = tiny_encoder("none", segments="none")
    ids = torch.randint(0, 40, (2, 11))
    permutation = torch.randperm(11)
    out = model(ids)
    torch.testing.assert_close(model(ids[:, permutation]), out[:, permutation])
    # and a positional encoding breaks it
    learned = tiny_encoder("learned", segments="none")
    assert (learned(ids[:, permutation]) - learned(ids)[:, permutation]).abs().max() > 1e-3


@pytest.mark.parametrize("encoding", ["tupe-a", "tupe-r"])
@pytest.mark.parametrize("cls_index", [0, 3])
def test_tupe_cls_row_and_column_are_theta(encoding, cls_index):
    """TUPE Eq. 9 / Fig. 4: row cls is theta_1 per head, column cls (other rows) theta_2."""
    model = tiny_encoder(encoding, encoding_options={"cls_index": cls_index})
    bias = model.encoding.layer_terms(10, torch.device("cpu"), torch.float64)[0].bias[0]
    row = bias[:, cls_index, :]
    others = [i for i in range(10) if i != cls_index]
    column = bias[:, others, cls_index]
    # constant per head ...
    torch.testing.assert_close(row, row[:, :1].expand_as(row))
    torch.testing.assert_close(column, column[:, :1].expand_as(column))
    # ... equal to theta_1 / theta_2 of App. B (plus the special relative buckets for TUPE-R)
    encoding_module = model.encoding
    positions = encoding_module.positions
    pq, pk = positions.project(positions.special)
    theta = (pq * pk).sum(-1) / 4.0  # 1 / sqrt(2 d_h), d_h = 8
    if encoding == "tupe-r":
        nb = encoding_module.options.num_buckets
        theta = theta + encoding_module.relative.weight[nb : nb + 2].T
    torch.testing.assert_close(row[:, 0], theta[:, 0])
    torch.testing.assert_close(column[:, 0], theta[:, 1])
    # the other rows are not constant: the reset touches only the [CLS] row and column
    rest = bias[:, others][:, :, others]
    assert (rest - rest[:, :, :1]).abs().max() > 1e-3


def test_tupe_tie_cls_has_no_reset():
    model = tiny_encoder("tupe-a", encoding_options={"untie_cls": False})
    bias = model.encoding.layer_terms(10, torch.device("cpu"), torch.float64)[0].bias[0]
    assert (bias[:, 0, :] - bias[:, 0, :1]).abs().max() > 1e-3
    assert model.encoding.positions.special is None


def one_head_logits(model, x):
    logits = layer_logits(model, x, 0)
    return logits[0, 0]


def test_diet_theorem1_input_additive_rank_is_at_most_dh():
    """DIET Theorem 1: (X + P) W_Q W_K^T (X + P)^T has rank <= d_h, whatever X and P."""
    n, d_h = 16, 8
    for seed in range(3):
        model = tiny_encoder("learned", seed=seed, segments="none")
        attention = model.layers[0].attention
        attention.q_proj.bias.zero_()  # the theorem's W_Q, W_K are linear maps
        attention.k_proj.bias.zero_()
        x, *_ = model.layer_inputs(torch.randint(0, 40, (1, n)))
        rank = torch.linalg.matrix_rank(one_head_logits(model, x))
        assert rank <= d_h
        assert rank == d_h  # generic weights reach the bound


def test_diet_theorem1_diet_abs_reaches_dh_plus_dp():
    """DIET Theorem 1: with per-head positions the rank reaches d_h + d_p (> d_h), shown with
    the paper's block construction and with random weights."""
    n, d_h, d_p = 16, 8, 6
    model = tiny_encoder("diet-abs", segments="none", encoding_options={"rank": d_p})
    attention = model.layers[0].attention
    # Construction of App. B: content on the first d_h rows, positions on the next d_p rows.
    x = torch.zeros(1, n, 24)
    x[0, :d_h, :d_h] = torch.eye(d_h)
    for proj in (attention.q_proj, attention.k_proj):
        proj.weight.zero_()
        proj.bias.zero_()
        proj.weight[:d_h, :d_h] = torch.eye(d_h)
    for table in (model.encoding.query, model.encoding.key):
        table.zero_()
        table[0, 0, d_h : d_h + d_p] = torch.eye(d_p)
    assert torch.linalg.matrix_rank(one_head_logits(model, x)) == d_h + d_p
    random_model = tiny_encoder("diet-abs", segments="none", encoding_options={"rank": d_p})
    x = torch.randn(1, n, 24)
    assert torch.linalg.matrix_rank(one_head_logits(random_model, x)) == d_h + d_p


@pytest.mark.parametrize(
    ("encoding", "options", "shared"),
    [
        ("t5", {}, True),
        ("bert-r", {}, True),
        ("tupe-a", {}, True),
        ("tupe-r", {}, True),
        ("diet-abs", {"sharing": "layer"}, True),
        ("diet-abs", {"sharing": "none"}, False),
        ("diet-rel", {"sharing": "layer"}, True),
        ("diet-rel", {"sharing": "none"}, False),
    ],
)
def test_input_independent_bias_is_built_once_and_broadcast_over_the_batch(
    encoding, options, shared
):
    model = tiny_encoder(encoding, num_layers=3, encoding_options=options)
    terms = model.encoding.layer_terms(7, torch.device("cpu"), torch.float64)
    biases = [t.bias for t in terms]
    assert all(b.shape == (1, 3, 7, 7) for b in biases)  # never [B, H, n, n]
    same = [b is biases[0] for b in biases]
    assert all(same) == shared
    if not shared:
        assert not any(same[1:])


def test_every_registered_encoding_has_its_equation_in_the_docstring():
    for name, cls in ENCODINGS.items():
        doc = cls.__doc__ or ""
        assert f"[{name}]" in doc
        assert cls.equation in " ".join(doc.split())  # the equation `posattn list` shows


def test_inference_reuses_positional_terms_until_a_weight_changes():
    model = tiny_encoder("tupe-r")
    encoding = model.encoding
    with torch.no_grad():
        first = encoding.terms_for(7, torch.device("cpu"), torch.float64)
        assert encoding.terms_for(7, torch.device("cpu"), torch.float64) is first
        assert encoding.terms_for(8, torch.device("cpu"), torch.float64) is not first
        again = encoding.terms_for(7, torch.device("cpu"), torch.float64)
        encoding.relative.weight.add_(1.0)  # an optimizer step does the same in place
        updated = encoding.terms_for(7, torch.device("cpu"), torch.float64)
    assert updated is not again
    torch.testing.assert_close(updated[0].bias, again[0].bias + 1.0)
    # with gradients the terms are rebuilt every forward, so that they take part in backward
    with torch.enable_grad():
        fresh = encoding.terms_for(7, torch.device("cpu"), torch.float64)
    assert fresh[0].bias.requires_grad and fresh is not updated


@pytest.mark.parametrize("encoding", ["diet-abs", "t5", "tupe-r"])
@pytest.mark.parametrize("optimizer", ["fused", "for-loop"])
def test_evaluation_after_an_optimizer_step_reads_the_new_weights(encoding, optimizer):
    """The Trainer evaluates between steps under no_grad; torch's fused AdamW (transformers'
    default) updates parameters without bumping their version counters, so the cached terms
    must not survive a step (they did: evaluations read the terms of the first one)."""
    torch.manual_seed(0)
    model = tiny_encoder(encoding)
    x = torch.randn(2, 7, model.config.d_model, dtype=torch.float64)
    adam = torch.optim.AdamW(model.parameters(), lr=0.1, fused=optimizer == "fused")
    model.eval()
    with torch.no_grad():
        model(None, inputs_embeds=x)  # fills the cache
    model.train()
    with torch.enable_grad():  # this module's tests run without gradients otherwise
        model(None, inputs_embeds=x).square().sum().backward()
    adam.step()
    model.eval()
    with torch.no_grad():
        after_step = model(None, inputs_embeds=x)
        model.encoding.__dict__.pop("_terms_cache", None)
        rebuilt = model(None, inputs_embeds=x)
    torch.testing.assert_close(after_step, rebuilt, rtol=0, atol=0)


def test_evaluation_called_again_keeps_the_terms_and_a_switch_drops_them():
    """An evaluation loop that calls eval() per batch reuses the terms (it rebuilt them every
    batch); a switch to training and back rebuilds them."""
    model = tiny_encoder("t5")
    encoding = model.encoding
    model.eval()
    with torch.no_grad():
        first = encoding.terms_for(7, torch.device("cpu"), torch.float64)
        model.eval()
        assert encoding.terms_for(7, torch.device("cpu"), torch.float64) is first
        model.train()
        model.eval()
        assert encoding.terms_for(7, torch.device("cpu"), torch.float64) is not first


def test_switching_to_evaluation_rebuilds_terms_changed_behind_the_version_counter():
    model = tiny_encoder("diet-abs")
    encoding = model.encoding
    model.eval()
    with torch.no_grad():
        before = encoding.terms_for(7, torch.device("cpu"), torch.float64)
        before_bias = before[0].bias  # deferred: built now, from the weights before the change
        encoding.query.data.add_(1.0)  # `.data` does not share the version counter
        assert encoding.terms_for(7, torch.device("cpu"), torch.float64) is before
        model.train()
        model.eval()
        after = encoding.terms_for(7, torch.device("cpu"), torch.float64)
    assert after is not before
    assert not torch.equal(after[0].bias, before_bias)


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_two_training_forwards_before_one_backward_give_the_summed_gradients(encoding):
    """A loss summed over two forwards (R-drop, a pair of views) has each forward's gradient:
    nothing a training forward writes in place invalidates what an earlier one saved
    (KERPLE's projection of its parameters did; its random start here is out of range)."""
    causal, _ = settings_of(encoding)[0]
    model = tiny_encoder(encoding, causal=causal).train()
    generator = torch.Generator().manual_seed(5)
    batches = [torch.randint(1, 40, (2, 7), generator=generator) for _ in range(2)]
    weights = torch.randn(2, 7, model.config.d_model, dtype=torch.float64, generator=generator)

    def loss(ids):
        return (model(ids) * weights).sum()

    with torch.enable_grad():
        loss(batches[0]).backward()  # the projection done once, as after an update
        model.zero_grad()
        for ids in batches:
            loss(ids).backward()
        separate = {
            name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None
        }
        model.zero_grad()
        (loss(batches[0]) + loss(batches[1])).backward()
    for name, gradient in separate.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, gradient, msg=name)


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_training_after_an_evaluation_in_inference_mode(encoding):
    """An evaluation under torch.inference_mode() leaves nothing a later training forward
    reads and saves for backward as an inference tensor (T5's, BERT-R's and TUPE-R's bucket
    cache held the evaluation's buckets), in train mode or in eval mode with gradients."""
    causal, _ = settings_of(encoding)[0]
    model = tiny_encoder(encoding, causal=causal)
    ids = torch.randint(1, 40, (2, 7), generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        evaluated = model(ids)
    with torch.enable_grad():
        for mode in (True, False):
            model.train(mode)
            model.zero_grad()
            model(ids).sum().backward()
    torch.testing.assert_close(model(ids), evaluated, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_dynamic_int8_quantization_of_every_linear_layer_runs_close_to_float(encoding):
    """torch's `quantize_dynamic` (CPU inference) replaces every nn.Linear, an encoding's own
    included (FIRE's MLP, which read its last layer's weight as a tensor, a method there)."""
    causal, _ = settings_of(encoding)[0]
    model = tiny_encoder(encoding, causal=causal).float().eval()
    linear = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear})
    modules = dict(quantized.named_modules())
    assert all(type(modules[name]) is torch.ao.nn.quantized.dynamic.Linear for name in linear)
    ids = torch.randint(1, 40, (2, 9), generator=torch.Generator().manual_seed(7))
    want, got = model(ids), quantized(ids)
    error = (got - want).abs().max()
    # Linformer's moves most, 0.2 of the outputs' range: its float model moves 4x as much
    # as the others under 1% noise on the same weights.
    assert 0 < error < 0.25 * want.abs().max(), f"{error} against outputs up to {want.abs().max()}"
