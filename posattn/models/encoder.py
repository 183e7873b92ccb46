"""A BERT-style encoder whose attention takes any registered positional encoding."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import logging

from ..attention import MultiHeadAttention
from ..encodings import LayerTerms, build_encoding
from ..encodings.base import OwnsParameters
from ..errors import invalid, require
from ..initialization import normal_
from ..kernels import build_attention_mask
from ..tracing import active_transforms, read_on_host
from .config import PosAttnConfig
from .input_tensors import check_padding_mask, require_index_dtype
from .outputs import StackRecord
from .positions import (
    all_positions,
    check_position_ids,
    check_position_range,
    packed_documents,
)
from .segments import SegmentAttentionBias, reads_segments

logger = logging.get_logger(__name__)


class WordEmbedding(nn.Embedding):
    """An `nn.Embedding` whose vectors are multiplied by `scale` (the config's
    `input_word_scale()`: 1; sqrt(d_model) in the encoder-decoder, Vaswani Sec. 3.4):
    `get_input_embeddings()(ids)` is then exactly what the model adds positions to, which is
    what transformers' `inputs_embeds` stand in for."""

    scale: float = 1.0

    @classmethod
    def adopt(cls, embedding: nn.Embedding, scale: float) -> WordEmbedding:
        """`embedding` itself made a WordEmbedding with `scale` (its class changes in place,
        its weight and identity stay): transformers' `set_input_embeddings(e)` must leave
        `get_input_embeddings() is e`, and the model must keep scaling its word vectors."""
        if not isinstance(embedding, nn.Embedding):
            raise invalid("embeddings", type(embedding).__name__, "a torch nn.Embedding")
        embedding.__class__ = cls
        embedding.scale = scale
        return embedding

    def forward(self, input_ids: Tensor) -> Tensor:
        try:
            vectors = super().forward(input_ids)
        except IndexError:
            # Read only once the lookup has failed, so a good batch costs no host read (on a
            # GPU an id out of range is a device-side assert, which cannot be caught here).
            raise out_of_vocabulary(input_ids, self.num_embeddings) from None
        return vectors if self.scale == 1.0 else vectors * self.scale


def out_of_vocabulary(input_ids: Tensor, vocab_size: int) -> Exception:
    """torch's "index out of range in self" named neither the ids nor the vocabulary."""
    low, high = int(input_ids.min()), int(input_ids.max())
    allowed = (
        f"ids in [0, {vocab_size - 1}] (vocab_size={vocab_size}); the tokenizer and the "
        "model's vocabulary must match"
    )
    return invalid("input_ids", f"values in [{low}, {high}]", allowed)


class Embeddings(nn.Module):
    """Word (+ segment, when at the input) embeddings; positions come from the encoding."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__()
        self.word = WordEmbedding(config.vocab_size, config.d_model)
        self.word.scale = config.input_word_scale()
        self.segment = (
            nn.Embedding(config.num_segments, config.d_model)
            if config.segments == "input"
            else None
        )
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        input_ids: Tensor | None,
        segment_ids: Tensor,
        positions: Tensor | None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """positions: the encoding's input vectors, [n, d] (default positions) or [B, n, d].
        inputs_embeds [B, n, d_model] replace `self.word(input_ids)` (scaled), as in
        transformers: segments, positions, LayerNorm and dropout still apply."""
        x = self.word(input_ids) if inputs_embeds is None else inputs_embeds
        if self.segment is not None:
            x = x + self.segment(segment_ids)
        if positions is not None:
            x = x + positions.to(x.dtype)
        return self.dropout(self.norm(x))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, ffn_dim: int, dropout: float) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, ffn_dim)
        self.down = nn.Linear(ffn_dim, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.down(F.gelu(self.up(x))))


class EncoderLayer(GradientCheckpointingLayer):
    """One self-attention + feed-forward block; `model.gradient_checkpointing_enable()`
    recomputes its activations in the backward pass (transformers' GradientCheckpointingLayer)."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm == "pre"
        self.attention = MultiHeadAttention(
            config.d_model, config.num_heads, config.attention_dropout, config.kernel
        )
        self.attention_dropout = nn.Dropout(config.dropout)
        self.attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config.d_model, config.ffn_dim, config.dropout)
        self.ffn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        x: Tensor,
        terms: LayerTerms,
        mask,
        segment_bias,
        cache=None,
        layer_index: int = 0,
        output_attentions: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The layer's output; with output_attentions, (output, attention probabilities)."""
        probs = []

        def attend(h: Tensor) -> Tensor:
            out = self.attention(
                h, terms, mask, segment_bias, cache, layer_index, output_attentions
            )
            if output_attentions:
                out, p = out
                probs.append(p)
            return self.attention_dropout(out)

        if self.pre_norm:
            x = x + attend(self.attention_norm(x))
            x = x + self.ffn(self.ffn_norm(x))
        else:
            x = self.attention_norm(x + attend(x))
            x = self.ffn_norm(x + self.ffn(x))
        return (x, probs[0]) if output_attentions else x


class Encoder(nn.Module):
    """Token ids -> hidden states [B, n, d_model]; with `causal=True`, a decoder-only stack.

    The positional encoding is consulted once per forward: its input vector (if any) and one
    `LayerTerms` per layer, which carries the input-independent bias shared across layers.
    A causal stack also decodes incrementally: given a key/value cache holding `past` tokens,
    input_ids are the new tokens only and the positional terms cover their rows
    [past, past + n) (`PositionalEncoding.window_terms`); the logits equal the full forward's.
    """

    layer_type: type[nn.Module] = EncoderLayer  # the decoder (decoder.py) swaps in its own
    main_input_name = "input_ids"  # what transformers' generate reads from a model's .encoder

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoding = build_encoding(config.encoding, config.dims, config.encoding_options)
        self.segment_bias = (
            SegmentAttentionBias(
                config.num_layers, config.num_heads, config.num_segments, config.init_std
            )
            if config.segments == "attention"
            else None
        )
        self.layers = nn.ModuleList(self.layer_type(config) for _ in range(config.num_layers))
        self.final_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
            if config.norm == "pre"
            else None
        )
        for module in self.modules():
            init_weights(module, config.init_std)

    def set_kernel(self, name: str) -> None:
        """Switch every attention of the stack (a decoder's self- and cross-attention too) to
        another kernel; the weights are unchanged."""
        self.config.check_kernel(name)
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.set_kernel(name)
        self.config.kernel = name

    def reads_bias_tables(self) -> bool:
        """Some attention of the stack runs a kernel that reads biases from their tables
        (kernel="triton"): it gets segment pairs as a table, not as [B, H, n, n] values."""
        return any(
            getattr(module.kernel, "reads_bias_tables", False)
            for module in self.modules()
            if isinstance(module, MultiHeadAttention)
        )

    def token_shape(self, input_ids, inputs_embeds) -> tuple[int, int]:
        """(batch, n) of the new tokens, given as ids [B, n] or as vectors [B, n, d_model]."""
        require(
            (input_ids is None) != (inputs_embeds is None),
            "input_ids",
            "given with inputs_embeds" if input_ids is not None else None,
            "exactly one of input_ids and inputs_embeds",
        )
        if input_ids is not None:
            require(
                input_ids.dim() == 2,
                "input_ids",
                tuple(input_ids.shape),
                "expected a [batch, seq_len] tensor of token ids",
            )
            require_index_dtype("input_ids", input_ids)
            name, shape = "input_ids", tuple(input_ids.shape)
        else:
            require(
                inputs_embeds.dim() == 3 and inputs_embeds.shape[-1] == self.config.d_model,
                "inputs_embeds",
                tuple(inputs_embeds.shape),
                f"expected a [batch, seq_len, d_model={self.config.d_model}] tensor",
            )
            name, shape = "inputs_embeds", tuple(inputs_embeds.shape)
        # Without a token the positions' ranges were torch's error ("upper bound and lower
        # bound inconsistent with step sign").
        require(shape[1] >= 1, f"{name}.shape", shape, "at least one token (seq_len >= 1)")
        return shape[:2]

    def _check_inputs(
        self,
        tokens: tuple[int, int],
        attention_mask,
        segment_ids,
        past_length: int,
        positions_given=False,
    ) -> None:
        """tokens: `token_shape` of the new tokens."""
        seq_len = past_length + tokens[1]
        limit = self.encoding.max_positions
        # With positions given, a table bounds the positions (checked with them), not the length.
        if limit is not None and seq_len > limit and not positions_given:
            raise invalid(
                "seq_len",
                seq_len,
                f"encoding {self.config.encoding!r} has a position table of max_len={limit}; "
                "use a relative or functional encoding for longer inputs",
            )
        if past_length:
            require(
                self.config.causal,
                "cache",
                f"{past_length} cached tokens",
                "an empty cache: incremental decoding needs a causal model (causal=True)",
            )
            require(
                self.segment_bias is None,
                "segments",
                self.config.segments,
                "'input' or 'none' for incremental decoding: segments inside attention would "
                "need the segment ids of the cached tokens; run the full forward instead",
            )
        check_padding_mask(
            "attention_mask", attention_mask, (tokens[0], seq_len), "cached + new tokens"
        )
        if segment_ids is None:
            return
        if tuple(segment_ids.shape) != tokens:
            shape = tuple(segment_ids.shape)
            raise invalid("segment_ids.shape", shape, f"must be {tokens} (input_ids.shape)")
        require_index_dtype("segment_ids", segment_ids)
        if not segment_ids.numel():
            return
        reads = reads_segments(self.config)
        count = self.config.num_segments if reads else 1
        in_range = ((segment_ids >= 0) & (segment_ids < count)).all()
        if torch.compiler.is_compiling():
            # Reading the values out would break the graph: the check runs inside it.
            torch._assert_async(in_range, f"segment_ids must be in [0, {count - 1}]")
        elif read_on_host(in_range) == (False,):
            # One read on the host a forward (on a GPU, a wait for its queued work) for a
            # clear error; the bounds are read only to name them.
            low, high = int(segment_ids.min()), int(segment_ids.max())
            allowed = (
                f"ids in [0, {count - 1}] (num_segments={count})"
                if reads
                else "0 only: the model has no segments (segments='none'), and other ids would "
                "be ignored; use segments='input' or 'attention' for sentence pairs"
            )
            raise invalid("segment_ids", f"values in [{low}, {high}]", allowed)

    def token_positions(self, tokens: tuple[int, int], position_ids, cache, past_length: int):
        """Positions [B, past + n] of the cached and new tokens (`token_shape` [B, n]), or None
        for the defaults 0, 1, ... (`positions.all_positions`); position_ids checked against
        the encoding."""
        batch, seq_len = tokens
        if position_ids is not None:
            position_ids = check_position_ids(position_ids, batch, seq_len)
        positions = all_positions(position_ids, cache, past_length, batch, seq_len)
        if positions is not None:  # the new tokens' (the cached ones were checked before)
            limit = self.encoding.max_positions
            check_position_range(positions[:, past_length:], limit, self.config.encoding)
        return positions

    def layer_inputs(
        self,
        input_ids,
        attention_mask=None,
        segment_ids=None,
        past_length=0,
        position_ids=None,
        cache=None,
        inputs_embeds=None,
    ):
        """(embeddings, per-layer terms, mask, per-layer segment bias) for one forward of the
        new tokens, given as ids or as vectors (inputs_embeds): at positions
        [past_length, past_length + n), or at position_ids [B, n] (see
        `posattn.models.positions`: packed documents, left padding, custom positions)."""
        tokens = self.token_shape(input_ids, inputs_embeds)
        positions = self.token_positions(tokens, position_ids, cache, past_length)
        self._check_inputs(tokens, attention_mask, segment_ids, past_length, positions is not None)
        device = (input_ids if input_ids is not None else inputs_embeds).device
        seq_len = past_length + tokens[1]
        if segment_ids is None:
            segment_ids = torch.zeros(tokens, dtype=torch.long, device=device)
        dtype = self.embeddings.word.weight.dtype
        # through the module's forward: FSDP / ZeRO-3 gather its parameters there
        vectors, terms = self.encoding(past_length, seq_len, device, dtype, positions)
        if checkpointing(self) and torch.is_grad_enabled():
            refuse_checkpointing_under_func_transform()
            # A deferred bias (`DeferredBias`) built inside a checkpointed layer saves tensors
            # in the forward that the recomputation, finding it built, does not save again,
            # which torch.utils.checkpoint refuses: built here, outside the layers.
            for layer_terms in terms:
                layer_terms.bias  # noqa: B018 (read to build it)
        documents = None
        if positions is not None and attention_mask is None and not past_length:
            documents = packed_documents(positions)
        x = self.embeddings(input_ids, segment_ids, vectors, inputs_embeds)
        mask = build_attention_mask(
            attention_mask,
            seq_len,
            self.config.causal,
            device,
            query_start=past_length,
            documents=documents,
        )
        if self.segment_bias is None:
            segment_bias = [None] * len(self.layers)
        elif self.reads_bias_tables():
            segment_bias = self.segment_bias.described(segment_ids)  # no [B, H, n, n] tensor
        else:
            segment_bias = self.segment_bias(segment_ids)
        return x, terms, mask, segment_bias

    def forward(
        self,
        input_ids,
        attention_mask=None,
        segment_ids=None,
        cache=None,
        position_ids=None,
        record: StackRecord | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """cache: None, or an object with `get_seq_length()` and `update(k, v, layer_index)`
        (transformers' `DynamicCache`); it then holds the past tokens and receives the new
        ones, attention_mask covers past + new tokens and segment_ids the new ones.
        position_ids: [B, n] positions of the new tokens (`posattn.models.positions`).
        record: a `StackRecord` that gathers the hidden states and attention probabilities.
        inputs_embeds: [B, n, d_model] vectors in place of input_ids (`Embeddings.forward`)."""
        cache = checked_cache(self, cache)
        past_length = 0 if cache is None else cache.get_seq_length()
        x, terms, mask, segment_bias = self.layer_inputs(
            input_ids, attention_mask, segment_ids, past_length, position_ids, cache, inputs_embeds
        )
        record = record or StackRecord()
        record.add_hidden(x)
        for index, (layer, layer_terms, layer_segments) in enumerate(
            zip(self.layers, terms, segment_bias, strict=True)
        ):
            x = layer(x, layer_terms, mask, layer_segments, cache, index, record.attention)
            if record.attention:
                x, probs = x
                record.attentions.append(probs)
            record.add_hidden(x)
        return self.finish(x, record)

    def finish(self, x: Tensor, record: StackRecord) -> Tensor:
        """The final LayerNorm (pre-norm), which the last recorded hidden state includes."""
        if self.final_norm is None:
            return x
        x = self.final_norm(x)
        record.replace_last_hidden(x)
        return x


def checkpointing(stack: nn.Module) -> bool:
    """The stack's layers recompute their activations in this (training) forward."""
    return stack.training and any(
        getattr(layer, "gradient_checkpointing", False) for layer in stack.layers
    )


def refuse_checkpointing_under_func_transform() -> None:
    """torch's non-reentrant checkpoint keeps its tensors through saved-tensor hooks, which
    torch.func's grad, vjp, jacrev and hessian do not support, and under vmap its backward
    recomputes the layers outside the transform: refused by name before a layer runs, where
    torch would fail inside one. jvp (forward mode) saves nothing and runs it."""
    if torch.compiler.is_compiling() or not active_transforms() & {"Grad", "Vmap"}:
        return
    raise invalid(
        "gradient_checkpointing",
        True,
        "off inside torch.func's grad, vmap, jacrev and hessian, whose autograd does not run "
        "torch's checkpoint: model.gradient_checkpointing_disable(), or model.eval() for a "
        "forward alone",
    )


def checked_cache(stack: nn.Module, cache):
    """The cache to use: none while training with gradient checkpointing (the recomputed
    forward would append the keys and values a second time), as transformers' models do. An
    empty cache is left unused with a warning; one holding tokens is an error, since the
    input ids are then only the new tokens."""
    if cache is None or not checkpointing(stack):
        return cache
    if cache.get_seq_length():
        raise invalid(
            "past_key_values",
            f"{cache.get_seq_length()} cached tokens",
            "no cache while training with gradient checkpointing (model.eval() to decode)",
        )
    logger.warning_once("Gradient checkpointing in training: the key/value cache is not used.")
    return None


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: N(0, std) weights, zero biases, unit LayerNorm; posattn's own
    parameters (encodings, the segment bias) as their module's `reset_parameters` says.

    Only the parameters `module` holds directly, through `torch.nn.init`: transformers calls
    this for every module and guards those functions so that loaded parameters are kept."""
    if isinstance(module, nn.Linear):
        normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        normal_(module.weight, std=std)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, OwnsParameters):
        module.reset_parameters()
