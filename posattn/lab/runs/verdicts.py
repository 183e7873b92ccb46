"""The comparisons' verdict rule, honest about seed noise: an encoding is named best (or worst)
only where its whole spread over seeds lies beyond every other encoding's spread; otherwise the
highest median is reported with "no clear winner"."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """Median, lowest and highest value of one encoding over seeds."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        values = list(values)
        return cls(statistics.median(values), min(values), max(values))

    def signed(self, sign: int) -> Spread:
        """The spread of the values times `sign` (+1 or -1): larger is better."""
        if sign > 0:
            return self
        return Spread(-self.median, -self.high, -self.low)


def ranked(spreads: dict[str, Spread], higher_is_better: bool = True) -> list[str]:
    """Names, best median first (ties keep their given order)."""
    sign = 1 if higher_is_better else -1
    return sorted(spreads, key=lambda e: spreads[e].signed(sign).median, reverse=True)


def clear_best(spreads: dict[str, Spread], higher_is_better: bool = True) -> str | None:
    """The best-median name where its spread overlaps no other's (all strictly beyond); None
    where spreads overlap or there is nothing to compare with."""
    sign = 1 if higher_is_better else -1
    order = ranked(spreads, higher_is_better)
    top, others = order[0], order[1:]
    best = spreads[top].signed(sign)
    if others and all(best.low > spreads[e].signed(sign).high for e in others):
        return top
    return None


def clear_worst(spreads: dict[str, Spread], higher_is_better: bool = True) -> str | None:
    """The worst-median name where its spread lies strictly below every other's; only among
    three or more (of two, a worst is just the other side of a best)."""
    sign = 1 if higher_is_better else -1
    order = ranked(spreads, higher_is_better)
    bottom, others = order[-1], order[:-1]
    worst = spreads[bottom].signed(sign)
    if len(others) > 1 and all(worst.high < spreads[e].signed(sign).low for e in others):
        return bottom
    return None


def verdict_lines(
    label: str, spreads: dict[str, Spread], higher_is_better: bool = True, worst: bool = False
) -> list[str]:
    """Markdown bullets for one measure: the clear best or "no clear winner", and with
    worst=True a clear worst where there is one."""
    top = ranked(spreads, higher_is_better)[0]
    if clear_best(spreads, higher_is_better) is not None:
        lines = [f"- {label}: `{top}` is best on every seed (its spread overlaps no other)."]
    else:
        best = "highest" if higher_is_better else "lowest"
        lines = [f"- {label}: {best} median `{top}`, but seed spreads overlap: no clear winner."]
    bottom = clear_worst(spreads, higher_is_better) if worst else None
    if bottom is not None:
        lines.append(
            f"- {label}: `{bottom}` is worst on every seed (its spread overlaps no other)."
        )
    return lines
