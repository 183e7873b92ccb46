"""Intervals and paired tests over seeds, for the comparisons' claims (numpy only, no scipy).

- `mean_interval(values)`: the mean over seeds and its Student-t interval (n - 1 degrees of
  freedom). The t quantile is computed here: bisection on the t CDF, which is written with a
  regularised incomplete beta function (continued fraction, Numerical Recipes 6.4).
- `paired_bootstrap(a, b)`: two encodings scored on the same test examples by several runs
  (arrays [runs, examples], runs paired by seed index): the mean difference a - b, a
  percentile-bootstrap interval that resamples runs and examples jointly, and a two-sided
  bootstrap p-value. `paired_bootstrap_tasks` does the same for the average over several tasks
  (one run resample shared by every task, examples resampled within each task).
- `paired_permutation(a, b)`: one number per seed (e.g. the MLM loss of each pretraining seed):
  the exact sign-flip permutation test of the mean difference, with its t-interval. With n
  seeds the smallest possible p-value is 2 / 2^n (0.25 for 3 seeds, 0.0625 for 5).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 5000
BOOTSTRAP_SEED = 0
EXACT_PERMUTATION_MAX_N = 16  # 2^16 sign vectors; beyond, as many random ones (fixed seed)
CELLS_PER_CHUNK = 1 << 22  # resamples x examples held at once by the bootstrap


# --- the Student t distribution -------------------------------------------------------------


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if a <= 0 or b <= 0:
        raise ValueError(f"a={a}, b={b}: both must be > 0")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x={x}: must lie in [0, 1]")
    if x in (0.0, 1.0):
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom."""
    if dof <= 0:
        raise ValueError(f"dof={dof}: must be > 0")
    tail = 0.5 * regularized_incomplete_beta(dof / 2.0, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, dof: float) -> float:
    """The t with P(T <= t) = p (bisection on `t_cdf` to 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p}: must lie in (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, dof)
    low, high = 0.0, 1.0
    while t_cdf(high, dof) < p:
        low, high = high, 2.0 * high
    while high - low > 1e-12 * max(1.0, high):
        middle = 0.5 * (low + high)
        if t_cdf(middle, dof) < p:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


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


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean of `values` (one per seed) and its Student-t interval with n - 1 degrees of
    freedom: mean +- t((1 + confidence) / 2, n - 1) * s / sqrt(n). One value: no interval."""
    alpha = _check_confidence(confidence)
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("mean_interval of no values")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, None, None, 1, confidence)
    half = t_quantile(1.0 - alpha / 2.0, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Interval(mean, mean - half, mean + half, int(x.size), confidence)


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
    """Two-sided sign-flip permutation p-value of mean(differences) = 0: the share of the 2^n
    sign vectors s with |sum(s d)| >= |sum(d)| (exact for n <= 16; beyond, 2^16 random sign
    vectors from a Generator seeded with `seed`, plus the observed one)."""
    d = np.asarray(differences, dtype=np.float64).ravel()
    if d.size == 0:
        raise ValueError("sign_flip_p_value of no differences")
    observed = abs(float(d.sum()))
    tolerance = 1e-12 * max(1.0, float(np.abs(d).sum()))
    if d.size <= EXACT_PERMUTATION_MAX_N:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        return float(np.mean(np.abs(signs @ d) >= observed - tolerance))
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(1 << EXACT_PERMUTATION_MAX_N, d.size))
    extreme = int(np.count_nonzero(np.abs(signs @ d) >= observed - tolerance))
    return (1 + extreme) / (signs.shape[0] + 1)


def paired_permutation(a, b, confidence: float = 0.95) -> PairedComparison:
    """One number per seed for each encoding (a[i], b[i] from seed i): the mean difference
    a - b, its Student-t interval over seeds (None for one seed) and the exact two-sided
    sign-flip permutation p-value."""
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"a ({x.size}) and b ({y.size}): one value per seed, as many in each")
    interval = mean_interval(x - y, confidence)
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
