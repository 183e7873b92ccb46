"""Attention with a learned bias at the cost of fused attention, on CPU.

torch's SDPA sends any attn_mask that requires grad to its unfused math path, which keeps
several [B, H, n, n] tensors alive for backward. Here the forward runs the fused CPU flash
kernel with the bias detached, and one backward pass recomputes the probabilities from the
saved log-sum-exp a few heads at a time and takes everything from them: dq, dk, dv with five
matrix products (as many as the flash kernel's own backward) and the bias gradient as the sum
of dS over the batch. Profiled on the 2-core development CPU (B=8, H=8, d_h=64, n=512, T5):
running the flash backward for dq, dk, dv and a second recompute for the bias gradient spent
the time on that second pass and on copies of the expanded bias; SDPA's math path on its
[B, H, n, n] matrix products and softmax.

Two entry points: `fused_bias_attention` for any bias tensor, and `fused_table_attention` for a
Toeplitz bias given by its [H, 2n-1] diagonal values (`LayerTerms.offset_bias`), whose gradient
is reduced along the diagonals head group by head group: no [H, n, n] gradient exists. A bias
described by factors, a table and TUPE's untie takes the same backward in `fused_parts`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from ..errors import invalid, require
from ..toeplitz import toeplitz

# Elements of one recomputed [heads, n_q, n_k] block in backward, per torch thread: two such
# blocks are alive at a time (P and dS). Blocks that stay near the cache train faster: on the
# 2-core development CPU (B=8, H=8, d_h=64, a T5 table, one `fused_table_attention` call
# alternated with bias-free SDPA) one head of n=512 per thread took the fwd+bwd ratio from 1.46
# to 1.28 (n=1024: 1.64 to 1.28) against 2**24-element blocks on one thread, and from 1.47 /
# 1.76 to 1.37 / 1.32 on two.
CHUNK_ELEMENTS_PER_THREAD = 2**18

NEG_INF = float("-inf")


def additive_mask(bias: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return bias
    return torch.where(mask, bias, torch.tensor(NEG_INF, dtype=bias.dtype))


def reduce_to(gradient: Tensor, shape: torch.Size) -> Tensor:
    """Sum a broadcast gradient back to the shape of the tensor it came from."""
    dims = [i for i, (g, s) in enumerate(zip(gradient.shape, shape, strict=True)) if s == 1 != g]
    return gradient.sum(dims, keepdim=True) if dims else gradient


def pick(tensor: Tensor, batch: int, heads: slice) -> Tensor:
    """[b or 1, h or 1, ...] -> the [g or 1, ...] block of batch element `batch`, `heads`."""
    tensor = tensor[batch if tensor.shape[0] > 1 else 0]
    return tensor[heads] if tensor.shape[0] > 1 else tensor


def head_groups(heads: int, n_q: int, n_k: int) -> list[slice]:
    elements = CHUNK_ELEMENTS_PER_THREAD * torch.get_num_threads()
    size = max(1, min(heads, elements // (n_q * n_k)))
    return [slice(start, min(start + size, heads)) for start in range(0, heads, size)]


class DiagonalSums:
    """Accumulates [g, n, n] blocks and returns the sums along their 2n-1 diagonals, [g, 2n-1]
    in `toeplitz` order. Row i of each block is added at columns [n-1-i, 2n-1-i) of a zero
    [g, n, 2n-1] buffer (a strided view, no index tensors): its column sums are the diagonal
    sums. `restart` reuses the buffer for the next head group (a fresh one per group cost
    page faults and zeroing of 2-8 MB a head at n=512-1024)."""

    def __init__(self, groups: int, n: int, dtype: torch.dtype, n_k: int | None = None) -> None:
        self.n, self.n_k = n, n if n_k is None else n_k
        self.storage = torch.zeros(groups, n, n + self.n_k - 1, dtype=dtype)
        self.restart(groups)

    def restart(self, groups: int) -> None:
        """Start over with `groups` blocks (at most the number the buffer was made for)."""
        n, width = self.n, self.n + self.n_k - 1
        self.buffer = self.storage[:groups]
        self.buffer.zero_()
        self.view = self.buffer.as_strided((groups, n, self.n_k), (n * width, width - 1, 1), n - 1)

    def add(self, block: Tensor) -> None:
        self.view.add_(block)

    def total(self) -> Tensor:
        return self.buffer.sum(-2)


def blocks_of(bias: Tensor, mask: Tensor | None) -> Callable:
    """`grad_logits`' additive(b, heads): the block of a [B or 1, H or 1, n_q, n_k] bias for
    batch element b and those heads, with the mask's -inf written in."""

    def additive(b: int, heads: slice) -> Tensor:
        part = pick(bias, b, heads)
        return part if mask is None else additive_mask(part, pick(mask, b, heads))

    return additive


def flash_forward(ctx, q, k, v, merged, scale) -> tuple[Tensor, Tensor]:
    """The fused CPU kernel's output and log-sum-exp [B, H, n_q] (what backward recomputes
    the probabilities from)."""
    ctx.scale = scale
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, attn_mask=merged, scale=scale
    )


def with_column(x: Tensor, column: Tensor, factor: float = 1.0) -> Tensor:
    """[..., n, d] and [..., n] -> [..., n, d + 1] (the d columns times `factor`): one fresh
    tensor written once (torch.cat of strided heads measured twice as slow)."""
    out = torch.empty(*x.shape[:-1], x.shape[-1] + 1, dtype=x.dtype)
    torch.mul(x, factor, out=out[..., :-1])
    out[..., -1].copy_(column)
    return out


def grad_logits(
    q, k, v, out, lse, grad_out, scale, additive: Callable, grads: tuple
) -> Iterator[tuple[slice, int, Tensor]]:
    """For each head group and batch element b: dS = dL/d(logits) [g, n_q, n_k] of those heads,
    from probabilities recomputed with additive(b, heads) (bias + mask, broadcastable to
    [g, n_q, n_k]); dq, dk, dv are written into `grads` on the way (dq complete once the
    iteration ends).

    Few, large operations per block (on a shared CPU every parallel region waits for its
    slowest thread): the log-sum-exp rides in the q k^T product as one more column, and
    delta = rowsum(dO * O) in the dO v^T product, so a block costs five matrix products, one
    add, one exp and one multiply. The bias is added after the product rather than as
    baddbmm's input, which copies it into the result first (one pass more, measured at n=512).
    The widened copies are made a block at a time: four of the whole batch had held four
    [B, H, n, d + 1] tensors through the backward (64 MiB of T5's 120 MiB over bias-free
    SDPA at B = H = 8, n = 1024)."""
    grad_q, grad_k, grad_v = grads
    neg_delta = torch.linalg.vecdot(grad_out, out).neg_()
    ones = torch.ones((), dtype=q.dtype)
    for heads in head_groups(q.shape[1], q.shape[2], k.shape[2]):
        for b in range(q.shape[0]):
            q_b, k_b, v_b = q[b, heads], k[b, heads], v[b, heads]
            q_lse = with_column(q_b, -lse[b, heads], scale)  # . [k, 1] = q k^T * scale - lse
            k_one = with_column(k_b, ones.expand(k_b.shape[:-1]))
            probs = torch.bmm(q_lse, k_one.mT)
            probs.add_(additive(b, heads)).exp_()
            torch.bmm(grad_out[b, heads].mT, probs, out=grad_v[b, heads].mT)
            do_delta = with_column(grad_out[b, heads], neg_delta[b, heads])
            v_one = with_column(v_b, ones.expand(v_b.shape[:-1]))
            grad_s = torch.bmm(do_delta, v_one.mT).mul_(probs)
            torch.bmm(grad_s, k_b, out=grad_q[b, heads])
            torch.bmm(q_lse[..., :-1].mT, grad_s, out=grad_k[b, heads].mT)
            yield heads, b, grad_s
    grad_q.mul_(scale)  # dq = dS k * scale, scaled once instead of a scaled copy of k


def require_first_order() -> None:
    """The recomputing backward writes its gradients into buffers (no graph of its own): a
    backward with create_graph=True (second derivatives) is refused by name, where autograd
    would fail on its first `out=` product."""
    if torch.is_grad_enabled():
        raise invalid(
            "create_graph",
            True,
            "the CPU recomputing attention backward (kernel 'auto' above "
            "recompute_threshold_bytes, 'sdpa-lowmem') is differentiable once; for second "
            "derivatives use kernel='eager', or torch.func (grad of grad, hessian), which runs "
            "the plain formulas",
        )


def empty_grads(q, k, v) -> tuple[Tensor, Tensor, Tensor]:
    """dq [B, H, n_q, d] and dk, dv key-major: [B, H, d, n_k] buffers seen as their transposes
    (`grad_logits` writes dk^T = q^T dS and dv^T = dO^T P). With dS and P as the products'
    right-hand side instead of transposed on their left, the two products took 0.75 of the
    time (n=1024, d=64, one thread on the 2-core development CPU: 88-94 ms against 117-119
    for the 64 blocks of a training call)."""
    grad_q = torch.empty(q.shape, dtype=q.dtype)
    grad_k, grad_v = (torch.empty(*t.shape[:-2], t.shape[-1], t.shape[-2], dtype=t.dtype).mT
                      for t in (k, v))  # fmt: skip
    return grad_q, grad_k, grad_v


class FusedBiasAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, mask, scale):
        merged = additive_mask(bias.detach().to(q.dtype), mask)
        out, lse = flash_forward(ctx, q, k, v, merged, scale)
        ctx.save_for_backward(q, k, v, out, lse, bias, mask)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        require_first_order()
        q, k, v, out, lse, bias, mask = ctx.saved_tensors
        grads = empty_grads(q, k, v)
        detached = bias.detach().to(q.dtype)
        # A bias of every batch element and head (Shaw's key term) gets each block's gradient
        # once: written, not added to zeros (a pass over [B, H, n, n] fewer).
        once = bias.shape[:2] == q.shape[:2]
        grad_bias = (torch.empty if once else torch.zeros)(bias.shape, dtype=q.dtype)

        additive = blocks_of(detached, mask)
        chunks = grad_logits(q, k, v, out, lse, grad_out, ctx.scale, additive, grads)
        for heads, b, grad_s in chunks:
            target = pick(grad_bias, b, heads)
            reduced = reduce_to(grad_s, target.shape)
            if once:
                target.copy_(reduced)
            else:
                target.add_(reduced)
        return *grads, grad_bias.to(bias.dtype), None, None


class FusedTableAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, mask, scale, bias):
        if bias is None:
            bias = toeplitz(table.detach().to(q.dtype), k.shape[-2]).unsqueeze(0)
        bias = bias.detach().to(q.dtype)
        out, lse = flash_forward(ctx, q, k, v, additive_mask(bias, mask), scale)
        ctx.save_for_backward(q, k, v, out, lse, table, mask)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        require_first_order()
        q, k, v, out, lse, table, mask = ctx.saved_tensors
        grads = empty_grads(q, k, v)
        n, n_k = q.shape[-2], k.shape[-2]
        grad_table = torch.empty(table.shape, dtype=q.dtype)
        groups = head_groups(q.shape[1], n, n_k)
        sums = DiagonalSums(groups[0].stop - groups[0].start, n, q.dtype, n_k)
        group = {}  # the head group in progress and its bias

        def additive(b, heads):
            if group.get("heads") != heads:
                bias = toeplitz(table[heads].detach().to(q.dtype), n_k)
                sums.restart(bias.shape[0])
                group.update(heads=heads, bias=bias)
            bias = group["bias"]
            return bias if mask is None else additive_mask(bias, pick(mask, b, heads))

        chunks = grad_logits(q, k, v, out, lse, grad_out, ctx.scale, additive, grads)
        for heads, b, grad_s in chunks:
            sums.add(grad_s)
            if b == q.shape[0] - 1:  # the group's last batch element
                grad_table[heads] = sums.total()
        return *grads, grad_table.to(table.dtype), None, None, None


def fused_bias_attention(q, k, v, bias, mask, scale) -> Tensor:
    """bias: [B or 1, H or 1, n_q or 1, n_k]; mask: bool of that form or None."""
    return FusedBiasAttention.apply(q, k, v, bias, mask, scale)


def fused_table_attention(q, k, v, table, mask, scale, bias=None) -> Tensor:
    """The bias bias[h, i, j] = table[h, j - i + n_q - 1] read from its table
    [H, n_q + n_k - 1] (square: [H, 2n-1]); the gradient comes back for the table. bias: that
    Toeplitz matrix already built ([1, H, n_q, n_k], as `LayerTerms.bias`), read by the
    forward instead of building it again; its gradient goes to the table."""
    width = q.shape[-2] + k.shape[-2] - 1
    require(
        table.shape == (q.shape[1], width),
        "offset_bias",
        tuple(table.shape),
        f"[H, n_q + n_k - 1] = ({q.shape[1]}, {width}) for {q.shape[-2]} queries over "
        f"{k.shape[-2]} keys",
    )
    if bias is not None:
        expected = (1, q.shape[1], q.shape[-2], k.shape[-2])
        require(tuple(bias.shape) == expected, "bias", tuple(bias.shape), f"{expected}")
    return FusedTableAttention.apply(q, k, v, table, mask, scale, bias)
