"""The CPU recomputing backward for a bias described by its parts (`fused_parts`: low-rank
factors, a Toeplitz table, TUPE's [CLS] untie): every part's gradient exact, whatever parts
are present, padded and causal, over one head group or several, for decoding rows, and no
[H, n, n] gradient held."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_encoder

from posattn import execution
from posattn.kernels import build_attention_mask, fused_bias, fused_parts
from posattn.kernels.fused_bias import fused_bias_attention
from posattn.kernels.fused_parts import BiasParts, fused_parts_attention
from posattn.toeplitz import ClsUntie, toeplitz

BATCH, HEADS, N_Q, N_K, HEAD_DIM, RANK = 3, 2, 5, 5, 4, 3


def dense_bias(n_q, n_k, table=None, factors=None, untie=None) -> torch.Tensor:
    """The [1, H, n_q, n_k] bias the parts describe, written from `LayerTerms`' definition:
    f_q f_k^T + untie(toeplitz(table) or 0)."""
    matrix = torch.zeros(HEADS, n_q, n_k, dtype=torch.float64)
    if table is not None:
        matrix = toeplitz(table, n_k)
    matrix = matrix.unsqueeze(0)
    if untie is not None:
        matrix = untie.applied(matrix)
    if factors is not None:
        matrix = matrix + factors[0] @ factors[1].mT
    return matrix


def masks(n_q: int, n_k: int) -> dict:
    padding = torch.ones(BATCH, n_k, dtype=torch.bool)
    padding[1, n_k - 2 :] = False
    padding[2, :1] = False
    start = n_k - n_q
    return {
        "none": None,
        "padded causal": build_attention_mask(padding, n_k, True, "cpu", query_start=start),
    }


@pytest.fixture(params=[2**20, 1], ids=["one head group", "a group per head"])
def chunk_elements(request, monkeypatch):
    monkeypatch.setattr(fused_bias, "CHUNK_ELEMENTS_PER_THREAD", request.param)
    return request.param


# (table, factor heads (query's and key's, or one for both) or None, untie (row, column) or
# None): TUPE-R, DIET-ABS with per-head and shared factors, TUPE-A (factors and an untie on
# zeros), a table with an untie alone, an untie away from position 0.
DESCRIPTIONS = {
    "tupe-r": (True, HEADS, (0, 0)),
    "factors per head": (False, HEADS, None),
    "factors shared by the heads": (False, 1, None),
    "a query factor shared, a key factor per head": (False, (1, HEADS), None),
    "tupe-a": (False, HEADS, (0, 0)),
    "table and untie": (True, None, (0, 0)),
    "untie inside": (True, HEADS, (2, 3)),
}


def parts_of(description: str, n_q: int, n_k: int, row_start: int = 0):
    has_table, factor_heads, untie_at = DESCRIPTIONS[description]
    table = torch.randn(HEADS, n_q + n_k - 1, dtype=torch.float64) if has_table else None
    factors = None
    if factor_heads is not None:
        heads_q, heads_k = factor_heads if isinstance(factor_heads, tuple) else (factor_heads,) * 2
        factors = (
            torch.randn(1, heads_q, n_q, RANK, dtype=torch.float64),
            torch.randn(1, heads_k, n_k, RANK, dtype=torch.float64),
        )
    untie = None
    if untie_at is not None:
        column_value = torch.randn(HEADS, dtype=torch.float64)
        untie = ClsUntie(untie_at[0], untie_at[1], column_value).from_row(row_start)
    return table, factors, untie


def leaves(table, factors, untie) -> list[torch.Tensor]:
    found = [table, *(factors or ()), None if untie is None else untie.column_value]
    return [t.requires_grad_() for t in found if t is not None]


def run_with(description: str, table, factors, untie, mask, n_q, n_k):
    """A function of the learned tensors (in `leaves` order) for gradcheck."""
    has_table, factor_heads, untie_at = DESCRIPTIONS[description]

    def attention(q, k, v, *learned):
        learned = list(learned)
        t = learned.pop(0) if has_table else None
        f = (learned.pop(0), learned.pop(0)) if factor_heads is not None else None
        u = None if untie_at is None else ClsUntie(untie.row, untie.column, learned.pop(0))
        bias = dense_bias(n_q, n_k, t, f, u)
        return fused_parts_attention(q, k, v, bias, mask, 0.6, BiasParts(t, f, u))

    return attention


@pytest.mark.parametrize("description", list(DESCRIPTIONS))
@pytest.mark.parametrize("mask_name", ["none", "padded causal"])
def test_parts_gradcheck(description, mask_name, chunk_elements):
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(BATCH, HEADS, n, HEAD_DIM, dtype=torch.float64, requires_grad=True)
        for n in (N_Q, N_K, N_K)
    )
    table, factors, untie = parts_of(description, N_Q, N_K)
    attention = run_with(description, table, factors, untie, masks(N_Q, N_K)[mask_name], N_Q, N_K)
    assert torch.autograd.gradcheck(attention, (q, k, v, *leaves(table, factors, untie)))


@pytest.mark.parametrize("description", ["tupe-r", "tupe-a", "untie inside"])
def test_decoding_rows_keep_every_parts_gradient(description):
    """Query rows [3, 7) over 7 keys: the table's first n_q + n_k - 1 values, the untie's row
    counted from the first of them (outside them for [CLS] at 0)."""
    torch.manual_seed(1)
    n_q, n_k = 4, 7
    q = torch.randn(BATCH, HEADS, n_q, HEAD_DIM, dtype=torch.float64, requires_grad=True)
    k, v = (
        torch.randn(BATCH, HEADS, n_k, HEAD_DIM, dtype=torch.float64, requires_grad=True)
        for _ in range(2)
    )
    table, factors, untie = parts_of(description, n_q, n_k, row_start=n_k - n_q)
    mask = masks(n_q, n_k)["padded causal"]
    attention = run_with(description, table, factors, untie, mask, n_q, n_k)
    assert torch.autograd.gradcheck(attention, (q, k, v, *leaves(table, factors, untie)))


def test_factors_at_given_positions_take_the_bias_path():
    """Factors that differ by batch element (DIET-ABS at given positions) need each dS: the
    parts path declines them."""
    bias = torch.zeros(1, HEADS, N_Q, N_K)
    per_batch = (torch.zeros(BATCH, HEADS, N_Q, RANK), torch.zeros(BATCH, HEADS, N_K, RANK))
    assert BiasParts(factors=(per_batch[0][:1], per_batch[1][:1])).served(bias)
    assert not BiasParts(factors=per_batch).served(bias)
    assert not BiasParts(table=torch.zeros(HEADS, 9)).served(bias.expand(BATCH, -1, -1, -1))


@pytest.mark.parametrize("encoding", ["tupe-r", "tupe-a", "diet-abs"])
def test_models_train_through_the_parts_with_eager_gradients(encoding, monkeypatch):
    """Causal and padded, through sdpa-lowmem: the parts path in every layer, eager's values
    and gradients."""
    calls = []
    original = fused_parts.FusedPartsAttention.apply
    monkeypatch.setattr(
        fused_parts.FusedPartsAttention, "apply", lambda *a: calls.append(1) or original(*a)
    )
    torch.manual_seed(3)
    ids = torch.randint(1, 40, (3, 9))
    padding = torch.ones(3, 9, dtype=torch.bool)
    padding[1, 6:] = False
    padding[2, :2] = False
    model = tiny_encoder(encoding, causal=True)
    results = []
    for kernel in ("eager", "sdpa-lowmem"):
        model.set_kernel(kernel)
        model.zero_grad()
        out = model(ids, padding)
        out[padding].square().sum().backward()
        results.append((out.detach(), *[p.grad.clone() for p in model.parameters()
                                        if p.grad is not None]))  # fmt: skip
    assert len(calls) == 2  # both layers
    assert len(results[1]) == len(results[0])
    for ours, reference in zip(*results, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-9, atol=1e-9)


def backward_peak_mib(heads: int, n: int, path: str) -> float:
    """The extra peak MiB of one backward of TUPE-R's parts (float32, B=2, d_h=16)."""
    from posattn.lab.bench.memory import extra_peak_mib

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, heads, n, 16, dtype=torch.float32, requires_grad=True)
               for _ in range(3))  # fmt: skip
    table = torch.randn(heads, 2 * n - 1, dtype=torch.float32, requires_grad=True)
    factors = tuple(
        torch.randn(1, heads, n, 8, dtype=torch.float32, requires_grad=True) for _ in range(2)
    )
    untie = ClsUntie(0, 0, torch.randn(heads, dtype=torch.float32, requires_grad=True))
    bias = untie.applied(toeplitz(table, n).unsqueeze(0)) + factors[0] @ factors[1].mT
    if path == "parts":
        out = fused_parts_attention(q, k, v, bias, None, 0.125, BiasParts(table, factors, untie))
    else:
        out = fused_bias_attention(q, k, v, bias, None, 0.125)
    out.sum().backward(retain_graph=True)  # the leaves' gradients made once
    return extra_peak_mib(lambda: out.sum().backward(retain_graph=True))


def test_the_backward_holds_no_gradient_of_the_whole_bias(monkeypatch):
    """From 4 to 8 heads (n=256, a head group per head) the parts path's backward grows by
    the gradients of q, k and v alone (3 [2, 4, n, 16] float32 tensors, 0.375 MiB): one
    block of dS's sum and its diagonal sums serve every head. The bias path's grows by at
    least the [4, n, n] gradient of the added heads' bias (1 MiB)."""
    monkeypatch.setattr(fused_bias, "CHUNK_ELEMENTS_PER_THREAD", 1)
    growth = {
        path: backward_peak_mib(8, 256, path) - backward_peak_mib(4, 256, path)
        for path in ("parts", "whole")
    }
    assert growth["parts"] < 0.75 and growth["whole"] >= 1


def test_auto_hands_tupe_rs_parts_to_the_parts_path_above_its_threshold(monkeypatch):
    """kernel="auto" on CPU, above `recompute_threshold_bytes`: the parts path (TUPE-R's
    table is not the whole bias: neither the table path nor flex's table reading)."""
    calls = []
    original = fused_parts.FusedPartsAttention.apply
    monkeypatch.setattr(
        fused_parts.FusedPartsAttention, "apply", lambda *a: calls.append(1) or original(*a)
    )
    model = tiny_encoder("tupe-r", kernel="auto")
    with execution.choose(recompute_threshold_bytes=0):
        model(torch.randint(1, 40, (2, 6))).sum().backward()
    assert len(calls) == 2
