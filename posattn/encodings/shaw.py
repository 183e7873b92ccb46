"""Shaw et al. (2018) relative position representations."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from ..errors import require_positive_int
from ..initialization import normal_
from ..tracing import is_symbolic
from .base import LayerTerms, ModelDims, Once, Place, PositionalEncoding, empty_parameter
from .relative import offsets, position_differences, rows_widened, skew, use_skew
from .row_offsets import spread_by_offset, sums_by_offset_row


@dataclass(frozen=True)
class ShawOptions:
    max_distance: int = 128
    values: bool = False

    def __post_init__(self) -> None:
        require_positive_int("max_distance", self.max_distance)


class ShawRelative(PositionalEncoding):
    """[shaw] Shaw et al. 2018 relative keys (TUPE Eq. 4), optionally values:

    alpha_ij = (x_i W^Q)(x_j W^K + a^K_{clip(j - i, t)})^T / sqrt(d_h),
    z_i = sum_j softmax(alpha)_ij (x_j W^V + a^V_{clip(j - i, t)})   (values=True).

    a^K, a^V in R^{(2t+1) x d_h}: one table per layer, shared by the heads of the layer (as DIET
    describes it); t = max_distance (128, TUPE's footnote). Any length: distances are clipped.
    The key term is computed as q a^K^T ([B,H,n,2t+1]) spread over the keys by offset
    (`row_offsets`: a gather whose backward sums by offset without an index scatter), or (GPU
    training) as q against every offset's row ([B,H,n,2n-1]) read through `skew`, never as an
    [n, n, d_h] tensor. The value term needs the probabilities, so it runs the eager kernel.
    """

    name = "shaw"
    Options = ShawOptions
    paper = "Shaw et al. 2018"
    equation = "TUPE Eq. 4"
    places = (Place.CONTENT_POSITION,)
    cost = "per layer, q a^T [B,H,n,2t+1] + gather"

    def __init__(self, dims: ModelDims, options: ShawOptions) -> None:
        super().__init__(dims, options)
        offsets = 2 * options.max_distance + 1
        shape = (dims.num_layers, offsets, dims.head_dim)
        self.keys = empty_parameter(*shape)
        self.values = empty_parameter(*shape) if options.values else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """a^K, a^V: N(0, init_std)."""
        for table in (self.keys, self.values):
            if table is not None:
                normal_(table, std=self.dims.init_std)

    def rows(self, seq_len: int, device) -> Tensor:
        """The table row of every offset j - i in `offsets` order: clip(j - i, -t, t) + t
        (`toeplitz` spreads it to the [n, n] rows of the gather)."""
        t = self.options.max_distance
        return offsets(seq_len, device).clamp(-t, t) + t

    def rows_read(self, seq_len: int) -> slice:
        """The table rows an n x n matrix reads, clip(j - i) + t for |j - i| < n, widened to
        a multiple of 16 (`rows_widened`): fewer than the 2t + 1 where n <= t (at n=64 with
        t = 128, 128 of 257), and the products against them with it. Every row where the
        length is symbolic (torch.export's Dim, compile's dynamic shapes), whose bounds a
        graph cannot know for every length."""
        t = self.options.max_distance
        if is_symbolic(seq_len):  # a traced length of any value: every row
            return slice(0, 2 * t + 1)
        return rows_widened(max(t - seq_len + 1, 0), min(t + seq_len - 1, 2 * t), 2 * t + 1)

    def _key_logits(
        self, layer: int, seen: Tensor, read: slice, n: int, q: Tensor, k: Tensor, attention
    ) -> Tensor:
        """q a^K_{clip(j - i)} for q's m query rows (the last m of n) and n keys; `seen`: the
        table row of each offset those rows see, [m + n - 1] in `toeplitz` order, all within
        the rows `read` (`rows_read`)."""
        if use_skew(q.device):
            # q a^K_o for every offset the rows see, then each row's window of them.
            table = self.keys[layer][seen]  # [m + n - 1, d_h]
            return skew((q * self.content_scale()) @ table.to(q.dtype).T)
        return spread_by_offset(self._scaled_products(layer, q, read), seen - read.start, n)

    def _value_term(self, layer: int, seen: Tensor, read: slice, n: int, probs: Tensor) -> Tensor:
        # sum_j p_ij a_{o(i,j)} = sum_o (sum_{j: o(i,j)=o} p_ij) a_o
        if use_skew(probs.device):
            per_offset = probs.new_zeros(*probs.shape[:-1], len(seen))
            skew(per_offset).copy_(probs)  # p_ij at offset j - i of row i
            return per_offset @ self.values[layer][seen].to(probs.dtype)
        table = self.values[layer][read]
        per_offset = sums_by_offset_row(probs, seen - read.start, table.shape[0])
        return per_offset @ table.to(probs.dtype)

    def table_rows_at(self, positions: Tensor, start: int) -> Tensor:
        """[B, 1, n - start, n] table row clip(p_j - p_i) + t of each (query, key) pair of
        the query rows [start, n) at positions [B, n]."""
        t = self.options.max_distance
        return (position_differences(positions, start).clamp(-t, t) + t)[:, None]

    def _key_logits_at(self, layer: int, index: Once, q: Tensor, k: Tensor, attention) -> Tensor:
        """q a^K_{clip(p_j - p_i)}: q against every table row, gathered by the row index of
        each (query, key) pair of q's rows (`table_rows_at`, made at the first call)."""
        index = index().expand(*q.shape[:2], -1, -1)
        return torch.gather(self._scaled_products(layer, q), -1, index)

    def _scaled_products(self, layer: int, q: Tensor, read: slice = slice(None)) -> Tensor:
        """q a^K_r for the table rows r in `read` (all by default), scaled, [B, H, m, rows]:
        q scaled before the product rather than the [B, H, m, n] logits after the gather (on
        the CPU at n=1024 two passes over 256 MiB fewer per call) or the [B, H, m, rows]
        products (0.77 ms of a 9 ms forward at n=128, B = H = 8, one thread)."""
        return (q * self.content_scale()) @ self.keys[layer][read].to(q.dtype).T

    def _value_term_at(self, layer: int, index: Once, probs: Tensor) -> Tensor:
        index = index().expand(*probs.shape[:2], -1, -1)
        per_offset = probs.new_zeros(*probs.shape[:-1], self.values.shape[1])
        per_offset.scatter_add_(-1, index, probs)
        return per_offset @ self.values[layer].to(probs.dtype)

    def rows_at(self, layer: int, positions: Tensor, start: int, index: Once | None) -> LayerTerms:
        """Layer `layer`'s terms at positions [B, n] for the query rows [start, n): a decoding
        step's made directly (it computed every row's logits to keep the new ones). Their
        index (`table_rows_at`, or one shared by the layers) is made when a call first needs
        it: a step's own rows never make the whole [B, 1, n, n]."""
        index = index or Once(partial(self.table_rows_at, positions, start))
        return LayerTerms(
            scale=self.content_scale(),
            qk_logits=partial(self._key_logits_at, layer, index),
            value_term=(
                partial(self._value_term_at, layer, index) if self.values is not None else None
            ),
            rows=lambda later: self.rows_at(layer, positions, start + later, None),
        )

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        index = Once(partial(self.table_rows_at, positions, 0))  # one for every layer
        return [self.rows_at(layer, positions, 0, index) for layer in range(self.dims.num_layers)]

    def layer_rows(self, layer: int, rows: Tensor, n: int, start: int) -> LayerTerms:
        """Layer `layer`'s terms for the query rows [start, n) of a length n (`rows`: the
        table row of every offset, `self.rows`): those rows see its first 2n - 1 - start."""
        seen, read = rows[: 2 * n - 1 - start], self.rows_read(n)
        return LayerTerms(
            scale=self.content_scale(),
            qk_logits=partial(self._key_logits, layer, seen, read, n),
            value_term=(
                partial(self._value_term, layer, seen, read, n) if self.values is not None else None
            ),
            rows=lambda later: self.layer_rows(layer, rows, n, start + later),
        )

    def layer_terms(self, seq_len, device, dtype):
        rows = self.rows(seq_len, device)
        return [self.layer_rows(layer, rows, seq_len, 0) for layer in range(self.dims.num_layers)]


__all__ = ["ShawOptions", "ShawRelative"]
