"""The examples a capped fine-tuning run uses, shared by fine-tuning and the baselines so that
both train and score on exactly the same records."""

from __future__ import annotations

import random
from typing import TypeVar

T = TypeVar("T")


def fixed_subset(records: list[T], limit: int | None) -> list[T]:
    """All of `records` without a limit (or one at least their number); else a fixed random
    subset of `limit` of them, in file order: `random.Random(0).sample` of the indices, the
    same for every encoding and run. Never a prefix, as task files may be grouped by label."""
    if not limit or limit >= len(records):
        return list(records)
    keep = sorted(random.Random(0).sample(range(len(records)), limit))
    return [records[i] for i in keep]
