"""Rotating pairs of dimensions (RoPE, xPos) in as few passes over q and k as torch allows.

Pair i of a row at position m becomes (x1 c - x2 s, x2 c + x1 s) with (c, s) = cos/sin[m, i]
(scaled by xPos). Written as a cat of four products and two sums, as rotary code usually is,
it passes over each [B, H, n, d] tensor some ten times: at n=512 (B=8, H=8, d=64) rotating
q and k cost a fifth of a fused attention forward on the CPU. Here:
- interleaved pairs (x_2i, x_2i+1) in float32 / float64 are complex numbers in place: one
  complex product by c + i s reads q once and writes it once (its gradient is the product by
  the conjugate);
- half-split pairs (x_i, x_i+d/2), and any pairs in half precision, by `PairRotation`: four
  products written into halves of one output, and a backward that is the same rotation by
  the opposite angle (the pair map c I + s J has the adjoint c I - s J), nothing saved but
  the tables.
Under torch.compile the plain formula runs, for the compiler to fuse as it sees fit, and under
torch.func's transforms, which take neither the Function nor a complex view of a wrapped tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..tracing import traced

COMPLEX_DTYPES = (torch.float32, torch.float64)


def rotate(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Rotate the first 2 * cos.shape[-1] dims of x [..., n, d] pairwise by the tables
    cos, sin [..., n, d_rot / 2] (broadcast over x's leading dims); the rest pass through.
    layout: "interleaved" pairs (x_2i, x_2i+1), "half" pairs (x_i, x_i+d_rot/2)."""
    dim = 2 * cos.shape[-1]
    part = x[..., :dim]
    if traced() or not tables_fit(part, cos, sin):
        rotated = rotated_by_formula(part, cos, sin, layout)
    elif layout == "interleaved" and x.dtype in COMPLEX_DTYPES:
        rotated = rotated_as_complex(part, cos, sin)
    else:
        rotated = PairRotation.apply(part, cos, sin, layout, 1.0)
    return rotated if dim == x.shape[-1] else torch.cat((rotated, x[..., dim:]), dim=-1)


def tables_fit(x: Tensor, cos: Tensor, sin: Tensor) -> bool:
    """Whether the fast paths serve the tables: x's dtype, no gradient of their own, and
    broadcast to x's pair shape without widening it (else `rotated_by_formula`)."""
    pair_shape = (*x.shape[:-1], x.shape[-1] // 2)
    return (
        cos.dtype == sin.dtype == x.dtype
        and not (cos.requires_grad or sin.requires_grad)
        and torch.broadcast_shapes(pair_shape, cos.shape, sin.shape) == pair_shape
    )


def rotated_by_formula(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """The rotation as plain differentiable ops: the reference, and the path for tables that
    carry a gradient themselves."""
    x1, x2 = halves(x, layout)
    first, second = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    if layout == "half":
        return torch.cat((first, second), dim=-1)
    return torch.stack((first, second), dim=-1).flatten(-2)


def rotated_as_complex(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Interleaved pairs as complex numbers times c + i s: one pass over x."""
    pairs = x.unflatten(-1, (-1, 2))
    if not complex_viewable(pairs):
        pairs = pairs.contiguous()
    turned = torch.view_as_complex(pairs) * torch.complex(cos, sin)
    return torch.view_as_real(turned).flatten(-2)


def complex_viewable(pairs: Tensor) -> bool:
    """Whether `torch.view_as_complex` takes pairs [..., 2] as they lie: the pair adjacent
    in memory, every other stride and the offset even."""
    return (
        pairs.stride(-1) == 1
        and pairs.storage_offset() % 2 == 0
        and all(stride % 2 == 0 for stride in pairs.stride()[:-1])
    )


def halves(x: Tensor, layout: str) -> tuple[Tensor, Tensor]:
    """The two members of every pair, as views of x."""
    if layout == "half":
        return x.chunk(2, dim=-1)
    return x[..., 0::2], x[..., 1::2]


def rotated_into(x: Tensor, cos: Tensor, sin: Tensor, layout: str, sign: float) -> Tensor:
    """x rotated by the angle of (cos, sign * sin), written pair member by pair member into
    one new tensor (x's layout where it is dense)."""
    out = torch.empty_like(x)
    (x1, x2), (out1, out2) = halves(x, layout), halves(out, layout)
    torch.mul(x1, cos, out=out1)
    out1.addcmul_(x2, sin, value=-sign)
    torch.mul(x2, cos, out=out2)
    out2.addcmul_(x1, sin, value=sign)
    return out


class PairRotation(torch.autograd.Function):
    """x -> x rotated pairwise by (cos, sign * sin); the gradient is the rotation of the
    output's gradient by (cos, -sign * sin), itself differentiable. The tables take no
    gradient (`rotate` sends tables that want one through `rotated_by_formula`)."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, layout: str, sign: float) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.layout, ctx.sign = layout, sign
        return rotated_into(x, cos, sin, layout, sign)

    @staticmethod
    def backward(ctx, grad: Tensor):
        cos, sin = ctx.saved_tensors
        turned_back = PairRotation.apply(grad, cos, sin, ctx.layout, -ctx.sign)
        return turned_back, None, None, None, None
