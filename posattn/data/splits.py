"""Deterministic splits: an item's split is a hash of its group key, nothing else.

So a split never depends on the order of the input, on the other items, or on a random seed,
and items that share a group (both translations of one chapter, two copies of one tweet)
always land together. Disjointness of the groups follows by construction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

TASK_FRACTIONS = (("train", 0.8), ("dev", 0.1), ("test", 0.1))
CORPUS_FRACTIONS = (("train", 0.98), ("validation", 0.02))


def unit_interval(key: str, salt: str) -> float:
    """A uniform-looking number in [0, 1) from sha256(salt / key)."""
    digest = hashlib.sha256(f"{salt}/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_split(key: str, fractions: Sequence[tuple[str, float]], salt: str) -> str:
    """The split whose cumulative-fraction interval holds unit_interval(key, salt)."""
    point = unit_interval(key, salt)
    total = 0.0
    for name, fraction in fractions:
        total += fraction
        if point < total:
            return name
    return fractions[-1][0]  # fractions summing to 1 - epsilon
