"""A low-rank bias folded into q and k (kernels/fold.py): the same logits and outputs, at a
head size SDPA's fused GPU kernels take."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from posattn.kernels.fold import fold_bias_factors


@pytest.mark.parametrize(("head", "rank"), [(64, 66), (64, 8), (16, 5), (8, 1)])
def test_folded_logits_and_outputs_equal_the_bias_and_widths_are_multiples_of_8(head, rank):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, head) for _ in "qkv")
    f_q, f_k = torch.randn(1, 3, 7, rank), torch.randn(1, 3, 7, rank)
    scale = head**-0.5
    q2, k2, v2 = fold_bias_factors(q, k, v, (f_q, f_k), scale)
    width = head + rank
    assert q2.shape[-1] == k2.shape[-1] == v2.shape[-1] == width + (-width % 8)
    assert q2.shape[-1] % 8 == 0
    logits = scale * q @ k.mT + f_q @ f_k.mT
    torch.testing.assert_close(scale * q2 @ k2.mT, logits)
    assert (q2[..., width:] == 0).all() and (k2[..., width:] == 0).all()
    out = torch.softmax(logits, -1) @ v
    folded = torch.softmax(scale * q2 @ k2.mT, -1) @ v2
    torch.testing.assert_close(folded[..., :head], out)
    assert (folded[..., head:] == 0).all()


def recorded_terms(model) -> list:
    """The list every `LayerTerms` the model's encoding makes from now on is added to."""
    made = []
    layer_terms = model.encoding.layer_terms

    def kept(*arguments):
        terms = layer_terms(*arguments)
        made.extend(terms)
        return terms

    model.encoding.layer_terms = kept
    return made


@pytest.mark.parametrize(
    ("encoding", "options"),
    [("tupe-r", {}), ("tupe-a", {}), ("diet-abs", {"sharing": "none"}), ("diet-abs", {})],
)
def test_a_folded_bias_is_never_built_and_trains_as_the_built_one(encoding, options):
    """The [H, n, n] bias of an encoding described by factors (TUPE-A, TUPE-R with its table,
    DIET-ABS) is deferred: a model that folds the factors into q and k (GPU training; forced
    here) never builds it - at H=8, n=8192 it was 2 GiB of float32 written every forward and
    never read - and its loss and every gradient equal those of the model that adds it."""
    from conftest import tiny_encoder

    from posattn import execution
    from posattn.encodings.base import DeferredBias

    results = []
    for fold in (True, False):
        model = tiny_encoder(encoding, encoding_options=options).train()
        made = recorded_terms(model)
        torch.manual_seed(1)
        x = torch.randn(2, 9, model.config.d_model, dtype=torch.float64)
        with torch.enable_grad(), execution.choose(fold=fold):
            loss = model(None, inputs_embeds=x).square().sum()
            loss.backward()
        assert made and all(DeferredBias.is_built(terms) != fold for terms in made)
        results.append([loss.detach(), *(p.grad for p in model.encoding.parameters())])
    for folded, added in zip(*results, strict=True):
        torch.testing.assert_close(folded, added)


@pytest.mark.parametrize(
    ("encoding", "rest"), [("tupe-r", True), ("tupe-a", False), ("diet-abs", False)]
)
def test_the_default_folds_only_where_no_learned_bias_stays_beside(monkeypatch, encoding, rest):
    """GPU training folds a low-rank bias by default, except where a learned bias stays beside
    the factors (TUPE-R's T5 table): its [B, H, n, n] gradient stays either way, and the fold
    would only double q's and k's width. Here the measured default is made to hold on the CPU:
    TUPE-R builds its whole bias (unfolded), TUPE-A and DIET-ABS never build it (folded); a
    forced fold folds TUPE-R too; without gradients nothing is a learned rest."""
    from conftest import tiny_encoder

    from posattn import execution
    from posattn.encodings.base import DeferredBias

    gpu = torch.device("cuda")
    with torch.enable_grad():
        assert execution.use_fold(gpu) and not execution.use_fold(gpu, learned_rest=True)
        with execution.choose(fold=True):
            assert execution.use_fold(gpu, learned_rest=True)
    monkeypatch.setattr(
        execution, "_measured", lambda forced, device: True if forced is None else forced
    )
    for fold, built in ((None, rest), (True, False)):
        model = tiny_encoder(encoding).train()
        made = recorded_terms(model)
        x = torch.randn(2, 9, model.config.d_model, dtype=torch.float64)
        with torch.enable_grad(), execution.choose(fold=fold):
            model(None, inputs_embeds=x).sum().backward()
        assert made and all(terms.learned_rest() == rest for terms in made)
        assert all(DeferredBias.is_built(terms) == built for terms in made)
    with torch.no_grad():
        terms = tiny_encoder(encoding).encoding.layer_terms(9, torch.device("cpu"), torch.float64)
    assert not any(t.learned_rest() for t in terms)


def test_a_kernel_that_reads_the_rest_from_its_table_keeps_the_fold():
    """A learned Toeplitz rest stops the default fold only for kernels that add it as a
    tensor (SDPA): FlexAttention reads it from its table (with TUPE's untie), no [B, H, n, n]
    gradient, so the fold still pays there, and so does auto where it hands a training call
    to flex; an extra bias with a gradient (DIET's segments inside attention) stops it for
    every kernel."""
    from conftest import tiny_encoder

    from posattn import execution
    from posattn.attention import MultiHeadAttention

    model = tiny_encoder("tupe-r").train()
    with torch.enable_grad():
        terms = model.encoding.layer_terms(9, torch.device("cpu"), torch.float64)[0]
    sdpa, flex, auto = (
        MultiHeadAttention(16, 2, kernel=kernel) for kernel in ("sdpa", "flex", "auto")
    )
    q = torch.zeros(1, 2, 9, 8)
    assert sdpa.learned_rest(terms, None, q, q) and not flex.learned_rest(terms, None, q, q)
    extra = torch.zeros(1, 2, 9, 9, requires_grad=True)
    assert flex.learned_rest(terms, extra, q, q)
    assert not flex.learned_rest(terms, extra.detach(), q, q)
    # auto: as flex where it hands the call to flex (on a GPU, past flex_threshold_bytes,
    # no dropout); a stand-in for a GPU tensor: only its device, shape and size are read.
    on_gpu = SimpleNamespace(device=torch.device("cuda"), shape=q.shape, element_size=lambda: 2)
    assert auto.learned_rest(terms, None, q, q) and auto.learned_rest(terms, None, on_gpu, q)
    with execution.choose(flex_threshold_bytes=0):
        assert auto.learned_rest(terms, None, q, q)  # on the CPU it never takes flex
        assert not auto.learned_rest(terms, None, on_gpu, q)
        auto.dropout = 0.1
        assert auto.train().learned_rest(terms, None, on_gpu, q)  # with dropout: SDPA
