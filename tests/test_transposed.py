"""`contiguous_transpose`: the transpose of the last two dimensions, contiguous, equal to
torch's own, with its gradient."""

from __future__ import annotations

import pytest
import torch

from posattn.transposed import contiguous_transpose


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (4, 6, 6), (3, 1, 9)])
def test_equals_torchs_transpose_and_is_contiguous(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    out = contiguous_transpose(x)
    assert out.is_contiguous()
    assert torch.equal(out, x.transpose(-1, -2))


def test_a_strided_input_is_read_as_its_values():
    x = torch.randn(2, 5, 8)[:, :, ::2]  # [2, 5, 4], not contiguous
    assert torch.equal(contiguous_transpose(x), x.transpose(-1, -2))


def test_gradcheck():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 4, 5, requires_grad=True)
    assert torch.autograd.gradcheck(contiguous_transpose, (x,))
    weight = torch.randn(2, 3, 5, 4)
    (contiguous_transpose(x) * weight).sum().backward()
    torch.testing.assert_close(x.grad, weight.transpose(-1, -2))
