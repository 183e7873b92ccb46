"""`pair_rotation.rotate`'s fast paths (complex product, `PairRotation`) against a loop over
the pairs from RoFormer Eq. 13-15, and against the plain formula they replace: values and
gradients, in every layout, dtype, rotated fraction and layout of q in memory."""

from __future__ import annotations

import pytest
import torch

from posattn.encodings import pair_rotation
from posattn.encodings.pair_rotation import PairRotation, rotate, rotated_by_formula


def pair_indices(layout: str, dim: int) -> list[tuple[int, int]]:
    half = dim // 2
    if layout == "half":
        return [(i, i + half) for i in range(half)]
    return [(2 * i, 2 * i + 1) for i in range(half)]


def rotated_by_loop(x, cos, sin, layout):
    """Pair i of every row m turned by (cos, sin)[m, i]; dims past the pairs unchanged."""
    cos, sin = (t.expand(*x.shape[:-1], t.shape[-1]) for t in (cos, sin))
    out = x.clone()
    for i, (a, b) in enumerate(pair_indices(layout, 2 * cos.shape[-1])):
        c, s = cos[..., i], sin[..., i]
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., a] * s + x[..., b] * c
    return out


def tables(n, pairs, dtype, batch=None):
    """Rotation tables with an xPos-like scale (cos^2 + sin^2 != 1), [n, pairs] or
    [batch, 1, n, pairs] (positions per row of a batch)."""
    shape = (n, pairs) if batch is None else (batch, 1, n, pairs)
    angle = torch.rand(shape, dtype=torch.float64) * 50
    scale = 0.5 + torch.rand(shape, dtype=torch.float64)
    return (angle.cos() * scale).to(dtype), (angle.sin() * scale).to(dtype)


def heads(b, h, n, d, dtype, transposed):
    """q as a model hands it over: split off [B, n, H, d] (transposed) or contiguous."""
    if transposed:
        return torch.randn(b, n, h, d, dtype=torch.float64).to(dtype).transpose(1, 2)
    return torch.randn(b, h, n, d, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rotated_dims", [8, 4])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("per_row", [False, True])
def test_rotate_equals_the_pairwise_loop(layout, dtype, rotated_dims, transposed, per_row):
    x = heads(2, 3, 5, 8, dtype, transposed)
    cos, sin = tables(5, rotated_dims // 2, dtype, batch=2 if per_row else None)
    expected = rotated_by_loop(x.double(), cos.double(), sin.double(), layout)
    got = rotate(x, cos, sin, layout)
    tolerance = {} if dtype != torch.bfloat16 else dict(atol=0.05, rtol=0.02)
    torch.testing.assert_close(got.double(), expected, **tolerance)
    assert got.dtype == dtype and got.shape == x.shape


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotated_dims", [8, 6])
@pytest.mark.parametrize("transposed", [False, True])
def test_rotate_gradients_equal_the_formula(layout, rotated_dims, transposed):
    """float64: the complex path (interleaved) and PairRotation (half) against autograd
    through the plain formula, for x and for a downstream loss that is not linear."""
    x = heads(2, 3, 5, 8, torch.float64, transposed).requires_grad_()
    cos, sin = tables(5, rotated_dims // 2, torch.float64)
    weight = torch.randn(2, 3, 5, 8, dtype=torch.float64)

    def loss(rotation):
        out = rotation(x)
        return (out * weight).sum() + out.pow(2).sum()

    fast = torch.autograd.grad(loss(lambda t: rotate(t, cos, sin, layout)), x)[0]
    dim = rotated_dims

    def formula(t):
        rotated = rotated_by_formula(t[..., :dim], cos, sin, layout)
        return torch.cat((rotated, t[..., dim:]), dim=-1)

    torch.testing.assert_close(fast, torch.autograd.grad(loss(formula), x)[0])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_pair_rotation_gradcheck_and_gradgradcheck(layout):
    x = torch.randn(2, 3, 4, 6, dtype=torch.float64, requires_grad=True)
    cos, sin = tables(4, 3, torch.float64)

    def rotation(t):
        return PairRotation.apply(t, cos, sin, layout, 1.0)

    assert torch.autograd.gradcheck(rotation, (x,))
    assert torch.autograd.gradgradcheck(rotation, (x,))
    assert torch.autograd.gradgradcheck(lambda t: rotate(t, cos, sin, "interleaved"), (x,))


def test_each_path_is_the_one_its_inputs_take(monkeypatch):
    """Interleaved float32/64 through the complex product, half-split and half precision
    through PairRotation, tables with a gradient or of another dtype through the formula."""
    taken = []
    for name in ("rotated_as_complex", "rotated_by_formula"):
        original = getattr(pair_rotation, name)
        monkeypatch.setattr(
            pair_rotation, name, lambda *a, _f=original, _n=name: taken.append(_n) or _f(*a)
        )
    original_apply = PairRotation.apply
    monkeypatch.setattr(
        PairRotation, "apply", lambda *a: taken.append("PairRotation") or original_apply(*a)
    )
    x = torch.randn(1, 2, 3, 4, dtype=torch.float32)
    cos, sin = tables(3, 2, torch.float32)
    cases = [
        (x, cos, sin, "interleaved", "rotated_as_complex"),
        (x, cos, sin, "half", "PairRotation"),
        (x.bfloat16(), cos.bfloat16(), sin.bfloat16(), "interleaved", "PairRotation"),
        (x, cos.double(), sin.double(), "half", "rotated_by_formula"),
        (x, cos.clone().requires_grad_(), sin, "interleaved", "rotated_by_formula"),
    ]
    for tensor, c, s, layout, path in cases:
        taken.clear()
        rotate(tensor, c, s, layout)
        assert taken == [path], (layout, tensor.dtype, c.dtype)


def test_complex_view_is_skipped_where_memory_does_not_allow_it():
    """Pairs that are not adjacent in memory (q sliced at an odd offset) are copied first."""
    base = torch.randn(2, 3, 5, 9, dtype=torch.float64)
    x = base[..., 1:]  # storage offset 1: no complex view of it
    cos, sin = tables(5, 4, torch.float64)
    expected = rotated_by_loop(x, cos, sin, "interleaved")
    torch.testing.assert_close(rotate(x, cos, sin, "interleaved"), expected)
