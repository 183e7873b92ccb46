"""Intervals and paired tests over seeds, for the comparisons' claims.

- `mean_interval(values)`: the mean over seeds and its Student-t interval (n - 1 degrees of
  freedom; scipy's t quantile). Values read on a grid (a step found at the first evaluation
  past it) pass the grid's `resolution`: the spread is then at least that of a value uniform
  within one grid step, so seeds tied on the grid do not give a zero-width interval.
- `paired_bootstrap(a, b)`: two encodings scored on the same test examples by several runs
  (arrays [runs, examples], runs paired by seed index): the mean difference a - b, a
  percentile-bootstrap interval that resamples runs and examples jointly, and a two-sided
  bootstrap p-value. `paired_bootstrap_tasks` does the same for the average over several tasks
  (one run resample shared by every task, examples resampled within each task). Written here:
  scipy's bootstrap resamples one axis, not runs and examples together.
- `paired_permutation(a, b)`: one number per seed (e.g. the MLM loss of each pretraining seed):
  the exact sign-flip permutation test of the mean difference (scipy's permutation_test), with
  its t-interval. With n seeds the smallest possible p-value is 2 / 2^n (0.25 for 3 seeds,
  0.0625 for 5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ...errors import is_real, require

RESAMPLES = 5000
BOOTSTRAP_SEED = 0
EXACT_PERMUTATION_MAX_N = 16  # 2^16 sign vectors; beyond, as many random ones (fixed seed)
CELLS_PER_CHUNK = 1 << 22  # resamples x examples held at once by the bootstrap
DEFAULT_CONFIDENCE = 0.95


def require_confidence(parameter: str, confidence: float) -> None:
    """A level of the intervals over seeds, as a command takes it: a number in (0, 1)."""
    allowed = "a level in (0, 1), e.g. 0.95"
    require(is_real(confidence) and 0.0 < confidence < 1.0, parameter, confidence, allowed)


def level_text(confidence: float) -> str:
    """0.95 -> "95%", 0.975 -> "97.5%"."""
    return f"{100 * confidence:g}%"


# --- intervals --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A mean over n values and its interval; low/high are None where n < 2 (no interval)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    confidence: float = 0.95

    @property
    def bounds(self) -> list[float] | None:
        return None if self.low is None else [self.low, self.high]

    def to_dict(self) -> dict:
        """The results.json shape: {"mean", "interval": [lo, hi] or null, "runs"}."""
        return {"mean": self.mean, "interval": self.bounds, "runs": self.n}


def _check_confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must lie in (0, 1)")
    return 1.0 - confidence


def check_bounds(bounds: tuple[float, float]) -> tuple[float, float]:
    """A scale's (low, high) limits, refused unless low < high."""
    lowest, highest = bounds
    if not lowest < highest:
        raise ValueError(f"bounds={bounds}: must be (low, high) with low < high")
    return lowest, highest


def mean_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    resolution: float = 0.0,
    bounds: tuple[float, float] | None = None,
) -> Interval:
    """The mean of `values` (one per seed) and its Student-t interval with n - 1 degrees of
    freedom: mean +- t((1 + confidence) / 2, n - 1) * s / sqrt(n). One value: no interval.

    resolution: the grid step the values were read on (0: exact values). s is then at least
    resolution / sqrt(12), the standard deviation of a value uniform within one step: two
    seeds that cross a threshold at the same evaluation differ by an unknown amount below the
    step, not by zero.

    bounds: the scale's limits (an accuracy in %: (0, 100)). The interval is cut to them: the
    mean cannot lie outside, so the cut interval covers it as often as the whole one, and a
    table does not show an accuracy of 121% (two seeds give t = 12.7). Values outside the
    bounds are an error, as they come from another scale."""
    alpha = _check_confidence(confidence)
    if not resolution >= 0.0:
        raise ValueError(f"resolution={resolution}: must be >= 0 (the grid step, 0 for exact)")
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("mean_interval of no values")
    if bounds is not None:
        lowest, highest = check_bounds(bounds)
        if x.min() < lowest or x.max() > highest:
            raise ValueError(
                f"values from {x.min():g} to {x.max():g}: outside bounds={bounds}, the scale "
                "they were declared on"
            )
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, None, None, 1, confidence)
    t = float(stats.t.ppf(1.0 - alpha / 2.0, x.size - 1))
    spread = max(float(x.std(ddof=1)), resolution / math.sqrt(12.0))
    half = t * spread / math.sqrt(x.size)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Interval(mean, low, high, int(x.size), confidence)


# --- paired comparisons -----------------------------------------------------------------------


@dataclass(frozen=True)
class PairedComparison:
    """a - b: the mean difference, its interval and a two-sided p-value."""

    difference: float
    low: float | None
    high: float | None
    p_value: float
    runs: int
    method: str
    confidence: float = 0.95

    @property
    def bounds(self) -> list[float] | None:
        return None if self.low is None else [self.low, self.high]

    def to_dict(self) -> dict:
        return {
            "difference": self.difference,
            "interval": self.bounds,
            "p_value": self.p_value,
            "runs": self.runs,
            "method": self.method,
        }


def _as_runs(scores, name: str) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name}: per-run per-example scores [runs, examples], not {x.shape}")
    return x


def _bootstrap_statistics(differences: list[np.ndarray], resamples: int, seed: int) -> np.ndarray:
    """`resamples` bootstrap replicates of mean_t(mean of differences[t]): each replicate draws
    runs with replacement (the same draw for every task) and, per task, examples with
    replacement. Counts from multinomial draws, so a replicate is counts_r @ d @ counts_e."""
    rng = np.random.default_rng(seed)
    runs = differences[0].shape[0]
    widest = max(d.shape[1] for d in differences)
    chunk = max(1, min(resamples, CELLS_PER_CHUNK // max(widest, runs)))
    statistics = np.empty(resamples)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        run_counts = rng.multinomial(runs, np.full(runs, 1.0 / runs), size=size)
        total = np.zeros(size)
        for d in differences:
            examples = d.shape[1]
            example_counts = rng.multinomial(examples, np.full(examples, 1.0 / examples), size)
            total += np.einsum("me,me->m", run_counts @ d, example_counts) / (runs * examples)
        statistics[start : start + size] = total / len(differences)
    return statistics


def _bootstrap_result(
    differences: list[np.ndarray], resamples: int, confidence: float, seed: int, method: str
) -> PairedComparison:
    alpha = _check_confidence(confidence)
    if resamples < 100:
        raise ValueError(f"resamples={resamples}: at least 100")
    observed = float(np.mean([d.mean() for d in differences]))
    stats = _bootstrap_statistics(differences, resamples, seed)
    low, high = (float(q) for q in np.quantile(stats, [alpha / 2.0, 1.0 - alpha / 2.0]))
    below = (1 + int(np.count_nonzero(stats <= 0.0))) / (resamples + 1)
    above = (1 + int(np.count_nonzero(stats >= 0.0))) / (resamples + 1)
    p_value = min(1.0, 2.0 * min(below, above))
    return PairedComparison(
        observed, low, high, p_value, differences[0].shape[0], method, confidence
    )


def paired_bootstrap(
    a,
    b,
    resamples: int = RESAMPLES,
    confidence: float = 0.95,
    seed: int = BOOTSTRAP_SEED,
) -> PairedComparison:
    """Encoding a against encoding b on the same test examples: a, b are per-run per-example
    scores, [runs, examples] (a 1-D array is one run), row r of a paired with row r of b (the
    same seed). The difference is mean(a - b); the interval is the percentile bootstrap of it,
    resampling runs and examples jointly (numpy Generator seeded with `seed`); the two-sided
    p-value is 2 min(P*(diff <= 0), P*(diff >= 0)) over the replicates, with the usual +1 in
    numerator and denominator, capped at 1 (so it is never 0: its floor is 2 / (resamples+1))."""
    a, b = _as_runs(a, "a"), _as_runs(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a {a.shape} and b {b.shape}: paired scores need one shape")
    return _bootstrap_result(
        [a - b], resamples, confidence, seed, "paired bootstrap over runs and examples"
    )


def paired_bootstrap_tasks(
    a: Sequence,
    b: Sequence,
    resamples: int = RESAMPLES,
    confidence: float = 0.95,
    seed: int = BOOTSTRAP_SEED,
) -> PairedComparison:
    """`paired_bootstrap` of the average over tasks: a[t], b[t] are task t's [runs, examples]
    scores (every task with the same runs, in the same seed order; examples may differ per
    task). The difference is mean over tasks of mean(a[t] - b[t]); each replicate resamples the
    runs once for all tasks and the examples within each task."""
    if len(a) != len(b) or not a:
        raise ValueError(f"{len(a)} and {len(b)} tasks: one or more, as many in a as in b")
    differences = []
    for index, (x, y) in enumerate(zip(a, b, strict=True)):
        x, y = _as_runs(x, f"a[{index}]"), _as_runs(y, f"b[{index}]")
        if x.shape != y.shape:
            raise ValueError(f"task {index}: a {x.shape} and b {y.shape} differ")
        differences.append(x - y)
    if len({d.shape[0] for d in differences}) != 1:
        raise ValueError("every task needs the same runs (seeds)")
    return _bootstrap_result(
        differences, resamples, confidence, seed, "paired bootstrap over runs and examples"
    )


def sign_flip_p_value(differences: Sequence[float], seed: int = BOOTSTRAP_SEED) -> float:
    """Two-sided sign-flip permutation p-value of mean(differences) = 0 (scipy's
    permutation_test of one sample): exact over the 2^n sign vectors for n <= 16; beyond, 2^16
    random ones from a Generator seeded with `seed`."""
    d = np.asarray(differences, dtype=np.float64).ravel()
    if d.size == 0:
        raise ValueError("sign_flip_p_value of no differences")
    if d.size == 1:  # both signs give the same |mean| (scipy wants two or more values)
        return 1.0
    exact = d.size <= EXACT_PERMUTATION_MAX_N
    result = stats.permutation_test(
        (d,),
        np.mean,
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf if exact else 1 << EXACT_PERMUTATION_MAX_N,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(result.pvalue)


def smallest_sign_flip_p(runs: int) -> float:
    """The smallest two-sided p-value an exact sign-flip test of `runs` differences can give:
    the all-same-sign vectors, 2 of the 2^runs (1 for one difference)."""
    return 1.0 if runs < 2 else 2.0 / 2**runs


def paired_permutation(
    a, b, confidence: float = 0.95, bounds: tuple[float, float] | None = None
) -> PairedComparison:
    """One number per seed for each encoding (a[i], b[i] from seed i): the mean difference
    a - b, its Student-t interval over seeds (None for one seed; cut to `bounds`, the limits
    of a difference on the scale, as `mean_interval` cuts) and the exact two-sided sign-flip
    permutation p-value."""
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"a ({x.size}) and b ({y.size}): one value per seed, as many in each")
    interval = mean_interval(x - y, confidence, bounds=bounds)
    method = "sign-flip permutation over seeds, t-interval"
    return PairedComparison(
        interval.mean,
        interval.low,
        interval.high,
        sign_flip_p_value(x - y),
        int(x.size),
        method,
        confidence,
    )
