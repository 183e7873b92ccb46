"""DeBERTa-v2 disentangled attention (He et al., ICLR 2021)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn

from ..errors import require
from ..initialization import normal_
from ..tracing import traced
from ..transposed import contiguous_transpose
from .base import LayerTerms, ModelDims, Once, Place, PositionalEncoding, empty_parameter
from .relative import offsets, position_differences, rows_widened, skew, toeplitz, use_skew

TERMS = ("c2p", "p2c")


def deberta_log_bucket(relative: Tensor, bucket_size: int, max_position: int) -> Tensor:
    """DeBERTa-v2's log buckets of r = i - j: |r| <= bucket_size/2 keeps r; longer distances
    get sign(r) * (mid + ceil(log(|r| / mid) / log((max_position - 1) / mid) * (mid - 1))),
    which reaches the last bucket, 2 mid - 1, at |r| = max_position - 1, and passes it beyond
    (the embedding row's clip then holds it at the edge).

    Where max_position - 1 <= mid there are no log buckets: every distance past mid lies at or
    past max_position, so it gets sign(r) * 2 mid, past the last bucket, as it would with log
    buckets. The formula itself would divide by log((max_position - 1) / mid) <= 0 there:
    transformers' `make_log_bucket_position` then maps distances past mid back onto nearer
    buckets (at max_position 32 and 256 buckets, |r| = 255 onto bucket 67), or to infinity
    where max_position - 1 = mid (a division by log 1 = 0). A
    model whose max_len fits below mid reaches these distances only when run past max_len."""
    mid = bucket_size // 2
    distance = relative.abs()
    if max_position - 1 <= mid:
        return torch.where(distance <= mid, relative, 2 * mid * relative.sign())
    # In the default float dtype, as DeBERTa computes it, so that bucket edges agree.
    ratio = torch.log(distance.clamp(min=1) / mid) / torch.log(
        torch.tensor((max_position - 1) / mid)
    )
    log_bucket = (torch.ceil(ratio * (mid - 1)) + mid).long() * relative.sign()
    return torch.where(distance <= mid, relative, log_bucket)


@dataclass(frozen=True)
class EmbeddingReads:
    """What c2p's and p2c's gathers read: the embedding rows `rows` (a slice of P holding
    every row some (query, key) pair reads), and the index of each pair into them - for p2c
    d(i, j) - rows.start, for c2p counted from the last row, rows.stop - 1 - d(i, j) (c2p
    reads the rows reversed: see `Deberta._gathered_logits`). Made once per forward and
    read by every layer."""

    rows: slice
    p2c: Tensor
    c2p: Tensor

    @classmethod
    def of(cls, index: Tensor, rows: slice) -> EmbeddingReads:
        return cls(rows, index - rows.start if rows.start else index, (rows.stop - 1) - index)


@dataclass(frozen=True)
class DebertaOptions:
    position_buckets: int = 256
    max_relative_positions: int | None = None  # None means max_len
    share_att_key: bool = True
    norm_rel_embeddings: bool = True
    terms: tuple[str, ...] = TERMS

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", tuple(self.terms))
        require(
            len(self.terms) > 0 and set(self.terms) <= set(TERMS),
            "terms",
            self.terms,
            "a non-empty subset of ('c2p', 'p2c')",
        )
        require(
            isinstance(self.position_buckets, int) and self.position_buckets >= 0,
            "position_buckets",
            self.position_buckets,
            "an integer >= 0 (0: no log buckets, one embedding per clipped distance)",
        )
        if self.max_relative_positions is not None:
            require(
                isinstance(self.max_relative_positions, int) and self.max_relative_positions >= 1,
                "max_relative_positions",
                self.max_relative_positions,
                "an integer >= 1, or None for max_len",
            )


class Deberta(PositionalEncoding):
    """[deberta] DeBERTa-v2 disentangled attention, DeBERTa Eq. 2-4 (He et al. 2021):

    A_ij = [q_i k_j^T + q_i k^r_{d(i,j)}^T + k_j q^r_{d(j,i)}^T] / sqrt(d_h (1 + #terms))

    with content q, k (c2p: content-to-position, p2c: position-to-content) and relative
    embeddings P in R^{2s x d} (s = position_buckets, or max_relative_positions without
    buckets), shared by all layers, LayerNorm-ed (norm_rel_embeddings), projected by the
    layer's own W_Q, W_K (share_att_key) or by per-layer position projections. d(i, j) =
    clip(bucket(i - j) + s, 0, 2s - 1) with DeBERTa-v2's log buckets. No input positions.
    Bidirectional as in DeBERTa; with causal=True the same terms are masked.
    """

    name = "deberta"
    Options = DebertaOptions
    paper = "He et al. 2021 (DeBERTa)"
    equation = "DeBERTa Eq. 2-4"
    places = (Place.CONTENT_POSITION,)
    cost = "per layer, q P^T and k P^T [B,H,n,2s] + gathers"

    def __init__(self, dims: ModelDims, options: DebertaOptions) -> None:
        super().__init__(dims, options)
        self.max_relative = options.max_relative_positions or dims.max_len
        buckets = options.position_buckets
        mid = buckets // 2
        if buckets > 0 and dims.max_len - 1 > mid:
            require(
                self.max_relative - 1 > mid and self.max_relative >= dims.max_len,
                "max_relative_positions",
                self.max_relative,
                f"position_buckets={buckets} log-buckets distances past {mid}; to map "
                f"max_len={dims.max_len} it needs max_relative_positions >= max_len and > "
                f"{mid + 1}",
            )
        self.span = buckets if buckets > 0 else self.max_relative
        self.embeddings = empty_parameter(2 * self.span, dims.d_model)
        self.reset_parameters()
        self.norm = nn.LayerNorm(dims.d_model) if options.norm_rel_embeddings else None
        self.key_projections = self.query_projections = None
        if not options.share_att_key:
            per_layer = lambda: nn.ModuleList(  # noqa: E731
                nn.Linear(dims.d_model, dims.d_model) for _ in range(dims.num_layers)
            )
            self.key_projections = per_layer() if "c2p" in options.terms else None
            self.query_projections = per_layer() if "p2c" in options.terms else None

    def reset_parameters(self) -> None:
        """P: N(0, init_std) (the LayerNorm and position projections are child layers)."""
        normal_(self.embeddings, std=self.dims.init_std)

    def content_scale(self) -> float:
        return 1.0 / math.sqrt(self.dims.head_dim * (1 + len(self.options.terms)))

    def relative_index(self, seq_len: int, device) -> Tensor:
        """[n, n] clip(bucket(i - j) + s, 0, 2s - 1): `offset_index` spread over the matrix."""
        return toeplitz(self.offset_index(seq_len, device))

    def rows_read(self, seq_len: int) -> slice:
        """The embedding rows an n x n matrix reads, d(i, j) for |i - j| < n (d grows with
        i - j), widened to a multiple of 16 (`rows_widened`): all of P only where n reaches
        past the buckets. At n=128 with DeBERTa's 256 buckets, 256 of 512: half the
        [B, H, n, 2s] products and their gradients. In a compiled graph every row (the ends
        are values a graph does not have), and under a torch.func transform, whose tensors
        torch before 2.13 would not read on the host ("doesn't have storage": 2.8, 2.9)."""
        if traced():
            return slice(0, 2 * self.span)
        read = self.embedding_row(torch.arange(1 - seq_len, seq_len)).tolist()  # on the host
        return rows_widened(read[0], read[-1], 2 * self.span)

    def relative_reads(self, seq_len: int, device) -> EmbeddingReads:
        """What the gathers of an n x n matrix read (`relative_index` over `rows_read`)."""
        return EmbeddingReads.of(self.relative_index(seq_len, device), self.rows_read(seq_len))

    def offset_index(self, seq_len: int, device) -> Tensor:
        """[2n - 1] the embedding row clip(bucket(i - j) + s, 0, 2s - 1) of every offset
        o = j - i in `offsets` order."""
        return self.embedding_row(-offsets(seq_len, device))

    def embedding_row(self, relative: Tensor) -> Tensor:
        """The embedding row clip(bucket(r) + s, 0, 2s - 1) of relative positions r = i - j."""
        if self.options.position_buckets > 0:
            relative = deberta_log_bucket(
                relative, self.options.position_buckets, self.max_relative
            )
        return (relative + self.span).clamp(0, 2 * self.span - 1)

    def _heads(self, x: Tensor) -> Tensor:
        return x.unflatten(-1, (self.dims.num_heads, -1)).transpose(0, 1)  # [H, 2s, d_h]

    def _projected(self, layer: int, term: str, rows: Tensor, attention) -> Tensor:
        """Embedding rows [r, d] projected for `term`, per head [H, r, d_h]: c2p's by the
        keys' projection, p2c's by the queries' (the layer's own, or the position ones)."""
        if term == "c2p":
            own, projections = attention.k_proj, self.key_projections
        else:
            own, projections = attention.q_proj, self.query_projections
        return self._heads((own if projections is None else projections[layer])(rows))

    def _logits(self, layer: int, reads, embeddings: Tensor, q, k, attention) -> Tensor:
        """reads: the gathers' `EmbeddingReads`, made at the first gather and kept for every
        layer (the skewed path reads none, and a decoding step reads rows of its own)."""
        if use_skew(q.device):
            return self._logits_by_offset(layer, embeddings, q, k, attention)
        return self._gathered_logits(layer, reads(), embeddings, q, k, attention)

    def _gathered_logits(
        self, layer: int, reads: EmbeddingReads, embeddings: Tensor, q, k, attention
    ):
        """c2p and p2c by index gathers over the embedding rows `reads.rows`; its indices
        ([m, n] or per row [B, 1, m, n]) hold each pair's row for q's m query rows (all n, or
        a decoding step's last ones) and the n keys."""
        q, k = self._scaled(q, k)
        embeddings = embeddings[reads.rows]
        terms = []
        if "c2p" in self.options.terms:
            # The embedding rows from the last: row d(i, j) falls as key j grows, the reversed
            # row grows, and the gather and its scatter read forwards (on the 2-core
            # development CPU, [8, 8, n, n], one thread: 21 -> 13 ms and 27 -> 17 ms at
            # n=512, 57 -> 27 and 72 -> 47 ms at n=1024).
            table = self._projected(layer, "c2p", embeddings, attention).to(q.dtype).flip(-2)
            rising = reads.c2p.expand(*q.shape[:2], *reads.c2p.shape[-2:])
            terms.append(torch.gather(q @ table.transpose(-1, -2), -1, rising))
        if "p2c" in self.options.terms:
            table = self._projected(layer, "p2c", embeddings, attention).to(k.dtype)
            terms.append(self._p2c(table, reads.p2c, k))
        return sum(terms[1:], terms[0])

    def _scaled(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """q and k times the logits' scale: scaled at [B, H, n, d_h] rather than the
        [B, H, n, n] logits after (on the CPU at n=512, 19 ms a pass over those logits, the
        gradient's included)."""
        scale = self.content_scale()
        return q * scale, k * scale

    @staticmethod
    def _p2c(table: Tensor, index: Tensor, k: Tensor) -> Tensor:
        """p2c logits [B, H, m, n]: key j against the query-projected embedding of row index[.., i,
        j] ([m, n] or [B, 1, m, n]) of `table`'s rows (those read, at most 2s). On the CPU with
        at least as many keys as table rows, every embedding against every key ([B, H, rows, n])
        and a gather along the embedding rows: the logits come out query-major as they are read.
        Otherwise every key against every embedding ([B, H, n, rows]), a gather along the keys'
        rows and a transposed copy (on a GPU the first gather's reads would step across rows;
        neither is timed there). On the 2-core development CPU (one thread, [8, 8, n, n], 512
        rows) the first took 30 / 82 ms forward and 42 / 117 ms for the gradient at n = 512 /
        1024 against the second's 44 / 229 and 56 / 275, and 19 / 20 against 12 / 13 at n=256.
        For a few rows (a decoding step: m d_h <= rows), each pair's embedding alone (m n d_h,
        where the first took rows n d_h at every step)."""
        rows, width = index.shape[-2], table.shape[-1]
        if rows * width > table.shape[-2]:
            if k.device.type == "cpu" and k.shape[-2] >= table.shape[-2]:  # by embedding rows
                per_row = table @ k.transpose(-1, -2)  # [B, H, rows, n]
                return torch.gather(per_row, -2, index.expand(*k.shape[:2], *index.shape[-2:]))
            per_offset = k @ table.transpose(-1, -2)  # [B, H, n, rows]
            # row j (a key) reads offset bucket(j - i) = -bucket(i - j): the transposed index
            reverse = index.transpose(-1, -2)  # [.., n keys, m queries]
            reverse = reverse.expand(*k.shape[:2], *reverse.shape[-2:])
            # Made contiguous: a transposed view left every later op reading it by columns.
            return contiguous_transpose(torch.gather(per_offset, -1, reverse))
        pairs = index if index.dim() == 4 else index[None, None]
        embedded = table[:, pairs[:, 0]]  # [H, B or 1, m, n, d_h]
        embedded = embedded.expand(-1, k.shape[0], -1, -1, -1)
        return torch.einsum("bhjd,hbijd->bhij", k, embedded)

    def _logits_by_offset(self, layer: int, embeddings: Tensor, q, k, attention) -> Tensor:
        """`_logits` through `skew`: each query (c2p) or key (p2c) against the embedding of
        every offset of the sequence, then each row's window (no index gather/scatter).
        H100, bf16, B=8, H=8, train: 63 ms against the gather's 77 ms at n=4096, 5.8 against
        5.3 at n=1024 (the log buckets keep the gather's scatter short of Shaw's contention)."""
        n = q.shape[-2]
        rows = self.offset_index(n, q.device)  # c2p: row i, column j reads offset j - i
        q, k = self._scaled(q, k)
        terms = []
        if "c2p" in self.options.terms:
            table = self._projected(layer, "c2p", embeddings[rows], attention).to(q.dtype)
            terms.append(skew(q @ table.transpose(-1, -2)))
        if "p2c" in self.options.terms:
            # key j, query i reads bucket(j - i): the c2p rows with the offset's sign flipped
            flipped = embeddings[rows.flip(0)]
            table = self._projected(layer, "p2c", flipped, attention).to(k.dtype)
            terms.append(skew(k @ table.transpose(-1, -2)).transpose(-1, -2))
        return sum(terms[1:], terms[0]).contiguous()  # one term alone is a window view

    def _logits_at(self, layer: int, reads: Once, embeddings: Tensor, q, k, attention):
        """`_gathered_logits` with the reads of `reads_at`, made at the first call."""
        return self._gathered_logits(layer, reads(), embeddings, q, k, attention)

    def index_at(self, positions: Tensor, start: int) -> Tensor:
        """[B, 1, n - start, n] row of P for (query i, key j) of the query rows [start, n) at
        positions [B, n]: d(i, j) from p_i - p_j."""
        return self.embedding_row(-position_differences(positions, start))[:, None]

    def reads_at(self, positions: Tensor, start: int) -> EmbeddingReads:
        """What the gathers read at given positions: `index_at` over every embedding row
        (given positions may read any)."""
        return EmbeddingReads.of(self.index_at(positions, start), slice(0, 2 * self.span))

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        embeddings = self.embeddings if self.norm is None else self.norm(self.embeddings)
        reads = Once(partial(self.reads_at, positions, 0))  # one for every layer
        return [
            self.rows_at(layer, positions, embeddings, 0, reads)
            for layer in range(self.dims.num_layers)
        ]

    def rows_at(
        self, layer: int, positions: Tensor, embeddings: Tensor, start: int, reads: Once | None
    ) -> LayerTerms:
        """Layer `layer`'s terms at positions for the query rows [start, n) (`LayerTerms.rows`:
        a decoding step's), their reads (`reads_at`, or ones shared by the layers) made when a
        call first needs them: a step's own rows never make the whole [B, 1, n, n]."""
        reads = reads or Once(partial(self.reads_at, positions, start))
        return LayerTerms(
            scale=self.content_scale(),
            qk_logits=partial(self._logits_at, layer, reads, embeddings),
            rows=lambda later: self.rows_at(layer, positions, embeddings, start + later, None),
        )

    def layer_terms(self, seq_len, device, dtype):
        reads = Once(partial(self.relative_reads, seq_len, device))
        embeddings = self.embeddings if self.norm is None else self.norm(self.embeddings)
        return [
            LayerTerms(
                scale=self.content_scale(),
                qk_logits=partial(self._logits, layer, reads, embeddings),
                rows=partial(self.layer_rows, layer, seq_len, embeddings),
            )
            for layer in range(self.dims.num_layers)
        ]

    def layer_rows(self, layer: int, seq_len: int, embeddings: Tensor, start: int):
        """Layer `layer`'s terms for the query rows [start, n) of a length n, by the gathers
        (`LayerTerms.rows`: a decoding step computed every row's logits to keep its own)."""
        offsets_seen = self.offset_index(seq_len, embeddings.device)[: 2 * seq_len - 1 - start]
        index = toeplitz(offsets_seen, seq_len)  # [n - start, n]
        reads = EmbeddingReads.of(index, self.rows_read(seq_len))
        return LayerTerms(
            scale=self.content_scale(),
            qk_logits=partial(self._gathered_logits, layer, reads, embeddings),
            rows=lambda later: self.layer_rows(layer, seq_len, embeddings, start + later),
        )
