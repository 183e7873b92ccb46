"""Parallel pairs as training examples: token ids of the source (input_ids) and of the target
(labels), both ending in </s>, with the length policy applied and counted."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ...errors import invalid
from ..runs.datasets import ListDataset


@dataclass
class EncodedPairs:
    dataset: ListDataset
    truncated: int  # pairs cut to max_len
    dropped: int  # pairs left out for being too long


def sample(pairs: list, limit: int | None, seed: int = 0) -> list:
    """A fixed random subset of `limit` pairs in their original order (never a prefix: the
    files follow the book order)."""
    if not limit or limit >= len(pairs):
        return pairs
    keep = sorted(random.Random(seed).sample(range(len(pairs)), limit))
    return [pairs[i] for i in keep]


def encode_pairs(
    tokenizer, pairs: list[tuple[str, str]], max_len: int, too_long: str, where: str = "pair"
) -> EncodedPairs:
    """too_long: "error" (names the pair), "truncate" (keep the first max_len - 1 tokens and
    </s>) or "drop"."""
    sources = tokenizer([s for s, _ in pairs])["input_ids"]
    targets = tokenizer([t for _, t in pairs])["input_ids"]
    eos = tokenizer.eos_token_id
    features, truncated, dropped = [], 0, 0
    for number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1):
        longest = max(len(source), len(target))
        if longest > max_len:
            if too_long == "error":
                side = "source" if len(source) > max_len else "target"
                raise invalid(
                    f"{where} {number} ({side})",
                    f"{longest} tokens",
                    f"at most model.max_len={max_len} tokens (</s> included); set "
                    "data.too_long=truncate or data.too_long=drop to accept longer pairs",
                )
            if too_long == "drop":
                dropped += 1
                continue
            truncated += 1
            source = [*source[: max_len - 1], eos] if len(source) > max_len else source
            target = [*target[: max_len - 1], eos] if len(target) > max_len else target
        features.append({"input_ids": source, "labels": target})
    if pairs and not features:  # every pair dropped: the Trainer failed on an empty dataset
        shortest = min(max(len(s), len(t)) for s, t in zip(sources, targets, strict=True))
        raise invalid(
            "model.max_len",
            max_len,
            f"every {where} of the {len(pairs)} is longer (data.too_long=drop left none); the "
            f"shortest needs {shortest} tokens (</s> included)",
        )
    return EncodedPairs(ListDataset(features), truncated, dropped)
