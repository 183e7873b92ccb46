"""The contract between a positional encoding and the attention core.

Every method touches attention in one or more of these places (README, "Where an encoding
acts"):

- input: a vector added to the token embeddings before layer 1 (`input_embedding`);
- q/k transform: q and k are changed before the dot product (`LayerTerms.transform_qk`);
- logit bias: an input-independent [1, H, n, n] term on the logits (`LayerTerms.bias`);
- content x position: terms that need q or k (`LayerTerms.qk_logits`, `LayerTerms.value_term`);
- k/v sequence projection: keys and values projected to fewer rows (`LayerTerms.project_kv`).

`PositionalEncoding.layer_terms` is called once per model forward and returns one `LayerTerms`
per layer; where a method shares its terms across layers the same object is returned for each
layer, so an input-independent bias is built once and broadcast over the batch.

Positions as an input (`position_ids`: packed documents, left padding, custom positions):
`input_embedding_at` and `layer_terms_at` take the position of every token, [B, n], instead of
0..n-1; their terms are per batch row ([B, H, n, n] biases). The default positions keep the
shared fast path above; an encoding that cannot take arbitrary positions says why
(`positions_refusal`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.optim.optimizer import register_optimizer_step_post_hook

from ..errors import invalid, require, require_positive_int
from ..toeplitz import ClsUntie, TableTails, toeplitz
from ..tracing import traced
from .relative import position_differences

# Optimizer steps taken in this process, counted by a global post-step hook: part of the key of
# the cached terms (`PositionalEncoding.terms_for`), since a fused optimizer step leaves the
# parameters' version counters unchanged.
OPTIMIZER_STEPS = [0]


def count_optimizer_step(optimizer, args, kwargs) -> None:
    OPTIMIZER_STEPS[0] += 1


register_optimizer_step_post_hook(count_optimizer_step)


class Place(str, Enum):
    INPUT = "input"
    SEQUENCE_PROJECTION = "k/v sequence projection"
    QK_TRANSFORM = "q/k transform"
    LOGIT_BIAS = "logit bias"
    CONTENT_POSITION = "content x position"


@dataclass(frozen=True)
class ModelDims:
    """The sizes an encoding needs to build its parameters."""

    d_model: int
    num_heads: int
    num_layers: int
    max_len: int
    init_std: float = 0.02
    causal: bool = False

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "num_layers", "max_len"):
            require_positive_int(name, getattr(self, name))
        require(
            self.d_model % self.num_heads == 0,
            "d_model",
            self.d_model,
            f"must be divisible by num_heads={self.num_heads}",
        )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


class DeferredBias:
    """`LayerTerms.bias` as a tensor, None, or a function that builds it when it is first read
    (and keeps it: layers share one `LayerTerms`), in the grad mode the terms were made in.
    A Toeplitz bias is deferred so that a kernel reading its table (kernel="triton") never
    makes the [H, n, n] tensor (2 GiB in float32 at H=8, n=8192), and a bias described by
    factors (TUPE, DIET-ABS) so that a kernel folding them never does; every other path
    reads it as before. A stack whose layers are checkpointed reads it before them
    (`Encoder.layer_inputs`)."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, terms, owner=None):
        if terms is None:
            return None  # the dataclass field's default
        value = terms.__dict__[self.slot]
        if callable(value):
            value = value()
            object.__setattr__(terms, self.slot, value)
        return value

    def __set__(self, terms, value) -> None:
        if callable(value):
            value = _in_grad_mode(value, torch.is_grad_enabled())
        # object.__setattr__, as a frozen dataclass's own __init__ sets its fields: the dynamo
        # of torch 2.8 and 2.9 fails on a write to such an object's __dict__
        # ("directly_update_dict").
        object.__setattr__(terms, self.slot, value)

    @staticmethod
    def is_built(terms) -> bool:
        """Whether the bias exists as a tensor (or is None) without building it."""
        return not callable(terms.__dict__["_bias"])


class Once:
    """A value made at the first call and kept (a forward's index, shared by its layers); a
    plain object, which torch.compile traces where functools.cache breaks the graph."""

    def __init__(self, make: Callable[[], Tensor]) -> None:
        self.make, self.value = make, None

    def __call__(self) -> Tensor:
        if self.value is None:
            self.value = self.make()
        return self.value


def _in_grad_mode(build: Callable[[], Tensor], enabled: bool) -> Callable[[], Tensor]:
    """`build` run in the grad mode of the terms' making, whenever it is read: a bias read
    under no_grad from terms made with gradients still takes part in backward."""

    def built() -> Tensor:
        with torch.set_grad_enabled(enabled):
            return build()

    return built


@dataclass(frozen=True)
class LayerTerms:
    """What one attention layer receives from the positional encoding.

    scale: multiplier of the content logits q.k (1/sqrt(d_h) unless the method says otherwise).
    bias: input-independent logits, [1, H, n, n] (or [H, n, n]), added after scaling.
    transform_qk: (q, k) -> (q, k) on [B, H, n, d_h], applied before the dot product.
    qk_logits: (q, k, attention) -> [B, H, n, n] extra logits that need the content, in final
        logit units; `attention` is the calling MultiHeadAttention, for methods that reuse its
        projections (DeBERTa's share_att_key).
    value_term: probabilities [B, H, n, n] -> [B, H, n, d_h] added to the attention output.
        Never a kernel's concern: `MultiHeadAttention.attend` runs such a layer on the eager
        path itself, since it needs the probabilities.
    project_kv: (k, v, key_keep) -> (k', v') with fewer rows (Linformer: E k, F v); key_keep
        [B, 1, n, 1] zeroes padded keys first, and the kernel then sees every projected key.
    bias_factors: (f_q [1, H or 1, n, r], f_k [1, H or 1, n, r]) with f_q f_k^T equal to
        `bias` up to a constant per query row (which no softmax sees): a low-rank bias that
        the fused kernels fold into the dot product (`posattn.kernels.fold`) instead of adding
        [H, n, n] logits whose gradient SDPA cannot fuse. `bias` stays for the eager
        reference and for inspection, deferred (`DeferredBias`): a folding kernel never
        builds it.
    offset_bias: [H, n_q + n_k - 1] values per diagonal with
        bias[..., h, i, j] == offset_bias[h, j - i + n_q - 1] for the n_q query rows and n_k
        keys of `bias` ([H, 2n-1] in `relative.offsets` order for a full n x n bias): the same
        bias described by its distinct values, for kernels that read a Toeplitz bias from its
        table instead of an [H, n, n] tensor (and reduce its gradient along diagonals,
        kernel="triton"). Set only where `bias` is exactly that Toeplitz matrix, or, with
        `bias_factors`, where `bias` is f_q f_k^T plus that Toeplitz matrix up to a constant
        per query row (TUPE-R: its absolute part as factors, T5's part as the table);
        `bias` stays for the eager reference.
    offset_tails: where `offset_bias` is known past two position offsets by construction
        (`posattn.toeplitz.TableTails`: flat, as T5's last buckets and DIET-REL's clipped
        rows, or linear, as ALiBi), or None. Kernels that read the table (kernel="triton")
        handle the tiles inside a tail without reading it (one value per head, or a line),
        nor summing their gradient along diagonals. Index t of `offset_bias` is offset t -
        (n_k - 1), for a whole bias and for its query rows alike.
    cls_untie: with `bias_factors`, TUPE's [CLS] untie (`posattn.toeplitz.ClsUntie`: a row
        set to 0, a column to one value per head) on the Toeplitz matrix of `offset_bias`, or
        on zeros without one (TUPE-A): bias = f_q f_k^T + untie(table's matrix or 0), up to
        a constant per query row. The kernels that read tables apply it themselves
        (kernel="triton", flex); the factors leave the [CLS] position out. Folded for the
        other kernels, it becomes part of the Toeplitz rest (`unfolded_bias`) or, without a
        table, one more factor column (`folded_factors`). Riding in the factors instead
        would widen q and k past a power of two (TUPE-R 64 + 66 = 130, TUPE-A 64 + 65 =
        129: a 256-wide block in the Triton kernel).
    rows: start -> these terms for the query rows [start, n), made directly (every term, as
        `query_rows` would give them, without computing the rows before), or None: for
        terms beyond a bias (Shaw's content x position logits and values).
    bias_rows: start -> the query rows [start, n) of `bias` (`bias[..., start:, :]`), built
        without the rows before them, or None: what cached decoding reads (`query_rows`),
        where building the whole bias cost O(n^2) at every new token to keep its last rows
        (ALiBi with 2048 cached tokens: 172 ms a token on the 2-core CPU, 1.3 ms from its
        rows). Set with `bias` by `of_rows` (`of_table`, `of_differences`, FIRE, TUPE,
        DIET-ABS).
    kernel_inputs: a dict for the kernels, empty when the terms are made (never passed,
        never copied by `dataclasses.replace`): what a kernel derives from the terms
        (kernel="triton": the table's aligned copies, the factors scaled) is kept there by
        the first layer that reads them and reused by the others, which share the terms
        (`posattn.kernels.triton_inputs.kept_in`). Terms made anew start with an empty one.
    """

    scale: float
    bias: Tensor | Callable[[], Tensor] | None = DeferredBias()
    transform_qk: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None
    qk_logits: Callable[[Tensor, Tensor, nn.Module], Tensor] | None = None
    value_term: Callable[[Tensor], Tensor] | None = None
    project_kv: Callable[[Tensor, Tensor, Tensor | None], tuple[Tensor, Tensor]] | None = None
    bias_factors: tuple[Tensor, Tensor] | None = None
    offset_bias: Tensor | None = None
    offset_tails: TableTails | None = None
    cls_untie: ClsUntie | None = None
    bias_rows: Callable[[int], Tensor] | None = None
    rows: Callable[[int], LayerTerms] | None = None
    kernel_inputs: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of_table(
        cls, scale: float, by_offset: Tensor, tails: TableTails | None = None
    ) -> LayerTerms:
        """Terms of a Toeplitz bias given by its table [H, 2n-1] (`offset_bias`, known past
        `tails`: `offset_tails`): the [1, H, n, n] `bias` is built when something first reads
        it, and its rows from a query on from the table (rows [start, n) read its first
        2n - 1 - start offsets)."""
        n = (by_offset.shape[-1] + 1) // 2

        def rows(start: int) -> Tensor:
            return toeplitz(by_offset[..., : 2 * n - 1 - start], n).unsqueeze(0)

        return cls.of_rows(scale, rows, offset_bias=by_offset, offset_tails=tails)

    @classmethod
    def of_rows(cls, scale: float, rows: Callable[[int], Tensor], **fields) -> LayerTerms:
        """Terms of a bias given by its query rows, `rows(start)` = bias[..., start:, :]
        (`bias_rows`): the whole bias is rows(0), built when first read."""
        return cls(scale=scale, bias=partial(rows, 0), bias_rows=rows, **fields)

    @classmethod
    def of_differences(
        cls, scale: float, positions: Tensor, build: Callable[[Tensor], Tensor]
    ) -> LayerTerms:
        """Terms of a bias that is a function of the position differences alone, at given
        positions [B, n]: `build` maps differences p_j - p_i [B, m, n] (`position_differences`)
        to the bias [B, H, m, n], entry by entry. Built when first read; a query's rows from
        its own differences."""
        return cls.of_rows(scale, lambda start: build(position_differences(positions, start)))

    def folded_factors(self) -> tuple[Tensor, Tensor]:
        """The factors to fold into q and k for kernels that add the rest as a bias tensor:
        `bias_factors`, with the [CLS] untie as one more column where no table carries it."""
        if self.cls_untie is not None and self.offset_bias is None:
            return self.cls_untie.folded_into(self.bias_factors)
        return self.bias_factors

    def learned_rest(self) -> bool:
        """Whether `unfolded_bias`, what stays a bias once `bias_factors` ride in q and k,
        takes a gradient (TUPE-R's T5 table, or its untie's column values): a kernel that
        adds it keeps its [B, H, n, n] gradient whether or not the factors are folded."""
        if self.offset_bias is None:
            return False
        untie = self.cls_untie
        return self.offset_bias.requires_grad or (
            untie is not None and untie.column_value.requires_grad
        )

    def unfolded_bias(self) -> Tensor | None:
        """What is left of `bias` once `bias_factors` ride in q and k: the Toeplitz matrix of
        `offset_bias` where both are set (with `cls_untie` written in), else nothing."""
        if self.offset_bias is None:
            return None
        # n_k from the key factors, not from `bias` (reading it would build a deferred one).
        n_k = self.bias.shape[-1] if self.bias_factors is None else self.bias_factors[1].shape[-2]
        matrix = toeplitz(self.offset_bias, n_k).unsqueeze(0)
        return matrix if self.cls_untie is None else self.cls_untie.applied(matrix)

    def query_rows(self, start: int) -> LayerTerms:
        """These terms, built for a length n, restricted to the query rows [start, n) over all n
        keys: the form incremental decoding needs (q has n - start rows, k and v have n).

        bias -> bias[..., start:, :]. The callables are row-wise in the queries (query row i of
        their output depends on query row i only), so they run on the queries with `start`
        zero rows in front and the first `start` output rows are dropped: the result equals
        rows [start, n) of the full computation at length n. `offset_bias` keeps its first
        2n - 1 - start diagonals: row i of the slice is row i + start of the full bias, so
        offset j - (i + start) sits at index j - i + (n - start) - 1.
        """
        if start == 0:
            return self
        if self.project_kv is not None:
            raise invalid(
                "past_length",
                start,
                "0: keys projected along the sequence (Linformer) mix every position into each "
                "projected key, so earlier keys cannot be cached; run the full forward",
            )
        if self.rows is not None:
            return self.rows(start)

        def transform_qk(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
            q, k = self.transform_qk(pad_rows(q, start), k)
            return q[..., start:, :], k

        def qk_logits(q: Tensor, k: Tensor, attention: nn.Module) -> Tensor:
            return self.qk_logits(pad_rows(q, start), k, attention)[..., start:, :]

        def value_term(probs: Tensor) -> Tensor:
            return self.value_term(pad_rows(probs, start))[..., start:, :]

        rows_bias, rows_from = None, None
        if self.bias_rows is not None and not DeferredBias.is_built(self):
            # Only the rows (`bias_rows`), not the whole bias cut down to them.
            rows_bias = lambda: self.bias_rows(start)  # noqa: E731
            rows_from = lambda later: self.bias_rows(start + later)  # noqa: E731
        elif not DeferredBias.is_built(self) or self.bias is not None:
            rows_bias = lambda: self.bias[..., start:, :]  # noqa: E731 (deferred like self's)
        return LayerTerms(
            scale=self.scale,
            bias=rows_bias,
            transform_qk=transform_qk if self.transform_qk else None,
            qk_logits=qk_logits if self.qk_logits else None,
            value_term=value_term if self.value_term else None,
            bias_factors=(
                None
                if self.bias_factors is None
                else (self.bias_factors[0][..., start:, :], self.bias_factors[1])
            ),
            offset_bias=(None if self.offset_bias is None else self.offset_bias[..., :-start]),
            offset_tails=self.offset_tails,  # in offsets, which the rows keep
            cls_untie=None if self.cls_untie is None else self.cls_untie.from_row(start),
            bias_rows=rows_from,
        )


def pad_rows(x: Tensor, count: int) -> Tensor:
    """x [..., m, d] with `count` zero rows in front: [..., count + m, d]."""
    return F.pad(x, (0, 0, count, 0))


def empty_parameter(*shape: int) -> nn.Parameter:
    """A parameter whose values the owning module's `reset_parameters` sets."""
    return nn.Parameter(torch.empty(shape))


class OwnsParameters:
    """A posattn module that holds raw `nn.Parameter`s (not inside a torch layer).

    `reset_parameters` (re)initialises the parameters the module holds directly - its child
    modules reset their own - and is the one place their initialisation is written: the
    constructor calls it, and so does `PreTrainedModel._init_weights` (via
    `posattn.models.encoder.init_weights`) when `from_pretrained` meets a checkpoint without
    them. It must fill tensors through `torch.nn.init` functions: transformers guards those
    during loading so that parameters read from the checkpoint are left as they are
    (`posattn.initialization.normal_` calls `torch.nn.init.normal_`, and draws nothing on
    the meta device).
    """

    def reset_parameters(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must reset its own parameters")


@dataclass(frozen=True)
class NoOptions:
    """The encoding takes no options."""


class PositionalEncoding(OwnsParameters, nn.Module):
    """Base class. Subclasses set the class attributes used by the registry and `posattn list`.

    A subclass with parameters of its own (not inside child modules) overrides
    `reset_parameters` (`OwnsParameters`) and calls it at the end of its constructor."""

    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    paper: ClassVar[str]
    equation: ClassVar[str]
    places: ClassVar[tuple[Place, ...]] = ()
    cost: ClassVar[str]

    @classmethod
    def projects_keys(cls) -> bool:
        """Keys are projected along the sequence: no [n, n] logits exist (Linformer)."""
        return Place.SEQUENCE_PROJECTION in cls.places

    def __init__(self, dims: ModelDims, options) -> None:
        super().__init__()
        self.dims = dims
        self.options = options

    def reset_parameters(self) -> None:
        """No parameters of its own: child modules (tables, layers) reset theirs."""

    def positional_parameters(self) -> list[nn.Parameter]:
        """The parameters of the position terms, the ones `trainer.positional_lr_scale`
        reaches: every parameter of the encoding unless a subclass holds others (Linformer's
        sequence projections)."""
        return list(self.parameters())

    def input_position_parameters(self) -> list[nn.Parameter]:
        """The parameters of a position table added to the token embeddings (BERT's), part of
        `positional_parameters`: the ones `trainer.input_positions_lr_scale` reaches. None
        unless the encoding has such a table."""
        return []

    # Encodings with a position table cannot index past it; None means any length works.
    @property
    def max_positions(self) -> int | None:
        return None

    # Why the encoding cannot take positions other than 0..n-1 (None: it can, `*_at`).
    positions_refusal: ClassVar[str | None] = None

    def content_scale(self) -> float:
        return 1.0 / math.sqrt(self.dims.head_dim)

    def input_embedding(self, seq_len: int, device: torch.device, dtype: torch.dtype):
        """[n, d_model] added to the token embeddings, or None."""
        return None

    def layer_terms(self, seq_len: int, device: torch.device, dtype: torch.dtype):
        """One `LayerTerms` per layer, computed once per forward."""
        return [LayerTerms(scale=self.content_scale())] * self.dims.num_layers

    def train(self, mode: bool = True):
        """Switching between training and evaluation drops the cached terms (`terms_for`). A
        call that keeps the mode keeps them: an evaluation loop that calls eval() per batch
        (as `posattn bench`'s inference step does) rebuilt every term, each batch."""
        if mode != self.training:
            self.__dict__.pop("_terms_cache", None)
        return super().train(mode)

    def terms_for(self, seq_len: int, device: torch.device, dtype: torch.dtype):
        """`layer_terms`, cached for inference: without gradients the input-independent terms
        depend only on the length and the parameters, so they are reused until a parameter
        changes. The key holds each parameter's version counter (bumped by in-place updates)
        and the count of optimizer steps taken in this process: fused optimizers (torch's
        fused AdamW, transformers' default) update parameters without bumping their versions,
        and evaluations between training steps would otherwise read the terms of the first.

        Not while torch.compile or torch.export traces, nor under torch.func's transforms:
        the key reads storage addresses (a graph break; a wrapped tensor has none) and a
        traced entry would outlive the trace and break the eager model; a compiled graph
        computes the terms once per call anyway."""
        if traced() or (
            torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        ):
            return self.layer_terms(seq_len, device, dtype)
        versions = tuple((p.data_ptr(), p._version) for p in self.parameters())
        # Without parameters (ALiBi, sinusoids) no optimizer step changes the terms.
        steps = OPTIMIZER_STEPS[0] if versions else None
        key = (seq_len, str(device), dtype, self.training, steps, *versions)
        cache = self.__dict__.setdefault("_terms_cache", {})
        if key not in cache:
            cache.clear()  # one entry: the latest length and weights
            cache[key] = self.layer_terms(seq_len, device, dtype)
        return cache[key]

    def forward(
        self,
        start: int,
        end: int,
        device: torch.device,
        dtype: torch.dtype,
        positions: Tensor | None = None,
    ):
        """What the model reads of the encoding for the tokens [start, end): (their input
        embedding rows or None, their `LayerTerms`), at positions 0..end-1 or at `positions`
        [B, end] (position_ids of the cached and new tokens). Models call it through the
        module, `encoding(start, end, ...)`: wrappers that gather sharded parameters around a
        module's forward (FSDP, ZeRO-3) then hold this encoding's parameters while it reads
        them, even when it is a sharding unit of its own."""
        if positions is None:
            vectors = self.input_embedding(end, device, dtype)
            vectors = None if vectors is None else vectors[start:]
            return vectors, self.window_terms(start, end, device, dtype)
        vectors = self.input_embedding_at(positions[:, start:], dtype)
        return vectors, self.window_terms_at(start, positions, dtype)

    def input_embedding_at(self, positions: Tensor, dtype: torch.dtype) -> Tensor | None:
        """[B, n, d_model] added to the token embeddings of tokens at `positions` [B, n], or
        None. Equal to `input_embedding`'s rows where positions are 0..n-1."""
        self.require_positions(positions)
        require(
            Place.INPUT not in self.places,
            "position_ids",
            "given",
            f"default positions: encoding {self.name!r} does not implement input_embedding_at",
        )
        return None

    def layer_terms_at(self, positions: Tensor, dtype: torch.dtype) -> list[LayerTerms]:
        """One `LayerTerms` per layer for tokens at `positions` [B, n] (token t of row b sits at
        positions[b, t], as query and as key): per-row terms, biases [B, H, n, n]. Equal to
        `layer_terms` where positions are 0..n-1. Every encoding with a positional term
        overrides it; the base form is content attention (no positional term in attention)."""
        self.require_positions(positions)
        require(
            set(self.places) <= {Place.INPUT},
            "position_ids",
            "given",
            f"default positions: encoding {self.name!r} does not implement layer_terms_at",
        )
        return self.layer_terms(positions.shape[-1], positions.device, dtype)

    def require_positions(self, positions: Tensor) -> None:
        """Refuse `position_ids` where the encoding cannot take them (`positions_refusal`)."""
        if self.positions_refusal is not None:
            raise invalid(
                "position_ids",
                "positions other than 0..n-1",
                f"default positions only: encoding {self.name!r} {self.positions_refusal}",
            )

    def window_terms_at(self, start: int, positions: Tensor, dtype: torch.dtype):
        """`window_terms` at given positions: the terms of the tokens at `positions` [B, end]
        (cached and new) restricted to the query rows [start, end)."""
        return restrict_rows(self.layer_terms_at(positions, dtype), start)

    def window_terms(self, start: int, end: int, device: torch.device, dtype: torch.dtype):
        """One `LayerTerms` per layer for the query rows [start, end) over the keys [0, end):
        incremental (cached key/value) decoding of a causal model, where tokens [0, start) are
        already in the cache. Layers that share terms still share them.

        Generic: the terms at length `end` restricted by `LayerTerms.query_rows`, so every
        encoding gets it and it equals rows [start, end) of the full forward at length `end`.
        A bias with `LayerTerms.bias_rows` (a Toeplitz table's, `of_table`; one of position
        differences, `of_differences`) builds those rows alone; any other bias is built at
        [H, end, end] to keep them. An encoding may override it with something cheaper that
        returns the same values. Keys must be given to the terms
        *before* any q/k transform (cache the raw projections), since the transform is
        re-applied to all of them.
        """
        return restrict_rows(self.terms_for(end, device, dtype), start)


def restrict_rows(terms: list[LayerTerms], start: int) -> list[LayerTerms]:
    """Each layer's terms restricted to the query rows [start, n); shared terms stay shared."""
    if start == 0:
        return terms
    restricted: dict[int, LayerTerms] = {}
    for layer_terms in terms:
        if id(layer_terms) not in restricted:
            restricted[id(layer_terms)] = layer_terms.query_rows(start)
    return [restricted[id(layer_terms)] for layer_terms in terms]


def require_causal(name: str, dims: ModelDims) -> None:
    """For methods the papers define for causal attention only."""
    require(
        dims.causal,
        "causal",
        dims.causal,
        f"encoding {name!r} is defined for causal attention only (a decoder): set causal=True",
    )


def sharing_groups(sharing: str, dims: ModelDims) -> tuple[int, int]:
    """(layer groups, head groups) for DIET's sharing variants (DIET Sec. 4.4).

    none: a table per layer and head; layer: shared across layers, per head;
    head: shared across the heads of a layer, per layer.
    """
    layers = 1 if sharing == "layer" else dims.num_layers
    heads = 1 if sharing == "head" else dims.num_heads
    return layers, heads


def layer_group(sharing: str, layer: int) -> int:
    return 0 if sharing == "layer" else layer
