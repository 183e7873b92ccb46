"""Positions as an input: `position_ids` checked, the default positions recognised, the
positions of cached tokens remembered, and packed documents found.

Conventions are transformers':
- position_ids [B, n] (or [1, n], broadcast over the batch) give the position of each new
  token; without them token t of a forward over `past` cached tokens is at past + t.
- Left-padded decoding: `generate` passes attention_mask.cumsum(-1) - 1 (pads at 0), so each
  row's first real token is at position 0 whatever its padding.
- Packed documents (`DataCollatorWithFlattening`: several documents in one row, positions
  restarting at 0 for each): with position_ids, no attention_mask and no cached tokens, a new
  document starts wherever a position is not its predecessor + 1 (transformers'
  `find_packed_sequence_indices`), and attention does not cross documents.

A cache that has seen position_ids keeps the positions of its tokens (`RECORD`), since the keys
are cached before the positional transform and relative terms need every key's position.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers.masking_utils import find_packed_sequence_indices

from ..errors import invalid, require
from ..tracing import read_on_host, traced

# Attribute of a key/value cache holding the positions [B, past] of its tokens, set once a
# forward with position_ids has written to it (absent: the cached tokens are at 0..past-1).
RECORD = "posattn_position_ids"


def check_position_ids(position_ids, batch: int, seq_len: int) -> Tensor:
    """position_ids as [B, n] integer positions, or a clear error naming the parameter."""
    require(
        isinstance(position_ids, Tensor)
        and position_ids.dim() == 2
        and not position_ids.is_floating_point()
        and not position_ids.is_complex()
        and position_ids.dtype != torch.bool,
        "position_ids",
        position_ids if not isinstance(position_ids, Tensor) else tuple(position_ids.shape),
        "a [batch, seq_len] tensor of integer positions",
    )
    if not (position_ids.shape[0] in (1, batch) and position_ids.shape[1] == seq_len):
        # Formatted only on failure, as a length traced as symbolic would be fixed by it.
        raise invalid(
            "position_ids.shape",
            tuple(position_ids.shape),
            f"({batch}, {seq_len}) or (1, {seq_len}): one position per new token",
        )
    return position_ids.long().expand(batch, seq_len)


def check_position_range(positions: Tensor, limit: int | None, encoding: str) -> None:
    """Positions >= 0 and, for an encoding with a table (limit: its size), below its size.
    The checks read the tensor, so they are left out while torch.compile traces and where
    torch.func's vmap batches the positions."""
    if torch.compiler.is_compiling() or not positions.numel():
        return
    bounds = read_on_host(positions.min(), positions.max())
    if bounds is None:
        return
    low, high = bounds
    if low < 0:
        raise invalid("position_ids", f"values in [{low}, {high}]", "positions >= 0")
    if limit is not None and high >= limit:
        raise invalid(
            "position_ids",
            f"values in [{low}, {high}]",
            f"positions in [0, {limit - 1}]: encoding {encoding!r} has a position table of "
            f"max_len={limit} and no row for a later position",
        )


def are_default(position_ids: Tensor, past_length: int) -> bool:
    """Every row is past, past + 1, ...: the default positions, which keep the shared fast
    path. Not decided while compiling or under torch.func's transforms (the general path is
    equal up to rounding)."""
    if traced():
        return False
    n = position_ids.shape[1]
    default = torch.arange(past_length, past_length + n, device=position_ids.device)
    return bool((position_ids == default).all())


def all_positions(position_ids: Tensor | None, cache, past_length: int, batch: int, seq_len: int):
    """Positions [B, past + n] of the cached and the new tokens, or None where every one is at
    its default position (today's fast path). Records them on the cache."""
    record = None if cache is None or not past_length else getattr(cache, RECORD, None)
    if record is None and (position_ids is None or are_default(position_ids, past_length)):
        return None
    device = record.device if position_ids is None else position_ids.device
    if position_ids is None:
        position_ids = torch.arange(past_length, past_length + seq_len, device=device)
        position_ids = position_ids.expand(batch, seq_len)
    if record is None:
        record = torch.arange(past_length, device=device).expand(batch, past_length)
    require(
        record.shape[1] >= past_length and record.shape[0] in (1, batch),
        "past_key_values",
        f"positions of {tuple(record.shape)} recorded for {past_length} cached tokens",
        f"a cache whose {past_length} tokens were given positions for a batch of {batch}",
    )
    positions = torch.cat([record[:, :past_length].expand(batch, -1), position_ids], dim=1)
    if cache is not None:
        setattr(cache, RECORD, positions)
    return positions


def packed_documents(positions: Tensor) -> Tensor | None:
    """Document ids [B, n] of a packed row (transformers' convention, see the module), or
    None when every row holds one document."""
    return find_packed_sequence_indices(positions)
