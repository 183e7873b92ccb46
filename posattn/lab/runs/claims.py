"""The papers' claims, each checked against a run's measurements with an interval-based verdict.

A claim has an `id`, the `paper` it comes from, a short `statement` (faithful to the paper),
the `measure` the run computes, and an evaluator; the papers' claims are in claims_table.py.
`evaluate_claims(measurements, claims)` returns one dict per claim:

    {"id", "paper", "statement", "measure",
     "values": what was measured, with intervals (JSON-ready),
     "verdict": "holds" | "does not hold" | "inconclusive",
     "reason": one sentence saying why}

Verdict rules (from intervals, never from medians or means alone):
- directional "A > B": the paired difference A - B; holds when its interval lies entirely above
  0, does not hold when entirely below 0, otherwise inconclusive.
- equivalence "A about equal B" / "costs nothing": holds when the interval lies within
  +- margin (a parameter of the claim, in points, default 1), does not hold when it lies entirely
  outside [-margin, margin], otherwise inconclusive.
- at most a limit (the 30% claim): holds when the interval's upper bound <= limit, does not hold
  when its lower bound > limit, otherwise inconclusive.
- exact (Theorem 1's rank bound): computed here without training; holds or does not hold.
- chain (TUPE-R > TUPE-A > BERT-R > BERT-A): the three adjacent pairs are also claims of their
  own; the chain holds only when every pair holds, does not hold when any pair does not hold,
  otherwise inconclusive.
- a claim whose encodings, tasks or curves the run lacks, or with one seed and no per-example
  scores (no interval), is "inconclusive"; where something is missing the reason starts
  "not tested by this run: needs ...".

The input, `Measurements` (filled by the comparison commands):

    Measurements(
        downstream={task: {encoding: [{"seed": int, "score": float,
                                       "per_example": list[float] | None}, ...]}},
        task_kinds={task: "single" | "pair"},
        mlm_curves={encoding: [[[step, validation_loss], ...]  # pretraining seed 0
                               , ...]},                         # seed 1, ...
        baselines={task: {"majority": float, "bag_of_words": float,
                          "word_overlap": float | None, "random_init": float}},
        point=1.0,
    )

- encodings are free-form names: a library encoding ("tupe-a", "learned", "diet-abs") or a
  variant "<encoding>/<variant>" ("tupe-a/tie-cls", "diet-rel/segments-attention",
  "diet-rel/segments-input", "diet-abs/share-none"). A plain name is the encoding with its
  defaults (segments at the input, DIET-ABS shared layer-wise).
- scores: higher is better, one scale for every task (e.g. accuracy in percent). `point` is one
  accuracy point on that scale: 1.0 for percent, 0.01 for fractions; margins are in points.
- runs are paired across encodings (and across tasks) by "seed": a comparison uses the seeds
  that both encodings ran on every task it averages.
- per_example (optional): the run's score on each test example, in a fixed example order, on
  the score's scale, so that their mean is the score (0/100 correctness for accuracy in
  percent). Give it only for tasks whose metric is such a mean (not MCC, not Pearson). Where
  every paired run of a comparison has it, the interval is the paired bootstrap over runs and
  examples; otherwise the paired t-interval over seeds (sign-flip p-value).
- mlm_curves: per encoding, one curve per pretraining seed, curves paired across encodings by
  list index; each point [step, validation MLM loss], steps increasing.
- baselines: passed through to results.json, on the scores' scale.
- bounds: the scale's limits where it has them ((0, 100) for accuracy in percent,
  ACCURACY_PERCENT): each encoding's interval is cut to them (statistics.mean_interval).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .statistics import (
    PairedComparison,
    check_bounds,
    mean_interval,
    paired_bootstrap_tasks,
    paired_permutation,
    smallest_sign_flip_p,
)

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE)
TASK_KINDS = ("single", "pair")
ACCURACY_PERCENT = (0.0, 100.0)
BASELINE_NAMES = ("majority", "bag_of_words", "word_overlap", "random_init")
NOT_TESTED = "not tested by this run: needs "
TUPE, DIET = "TUPE (Ke et al., ICLR 2021)", "DIET (Chen et al., EMNLP 2021)"


@dataclass
class Measurements:
    """What one comparison run measured; see the module docstring for every field."""

    downstream: dict[str, dict[str, list[dict]]] = field(default_factory=dict)
    task_kinds: dict[str, str] = field(default_factory=dict)
    mlm_curves: dict[str, list[list[list[float]]]] = field(default_factory=dict)
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)
    point: float = 1.0
    bounds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        for task, kind in self.task_kinds.items():
            if kind not in TASK_KINDS:
                raise ValueError(f"task_kinds[{task!r}]={kind!r}: one of {TASK_KINDS}")
        for task, encodings in self.downstream.items():
            for encoding, runs in encodings.items():
                for run in runs:
                    if "seed" not in run or "score" not in run:
                        raise ValueError(
                            f"downstream[{task!r}][{encoding!r}]: each run needs 'seed' and "
                            f"'score', not {sorted(run)}"
                        )
        if not self.point > 0:
            raise ValueError(f"point={self.point}: must be > 0")
        if self.bounds is not None:
            check_bounds(self.bounds)

    def tasks(self, kind: str | None = None) -> list[str]:
        """The measured tasks, of one kind ("single" or "pair") where given."""
        return [t for t in self.downstream if kind is None or self.task_kinds.get(t) == kind]

    def has(self, encoding: str, kind: str | None = None) -> bool:
        return any(encoding in self.downstream[t] for t in self.tasks(kind))


@dataclass(frozen=True)
class Outcome:
    values: dict
    verdict: str
    reason: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r}: one of {VERDICTS}")


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    statement: str
    measure: str
    evaluate: Callable[[Measurements], Outcome]

    def evaluated(self, measurements: Measurements) -> dict:
        outcome = self.evaluate(measurements)
        return {
            "id": self.id,
            "paper": self.paper,
            "statement": self.statement,
            "measure": self.measure,
            "values": outcome.values,
            "verdict": outcome.verdict,
            "reason": outcome.reason,
        }


# --- verdict rules ----------------------------------------------------------------------------


def interval_text(bounds: Sequence[float], point: float = 1.0) -> str:
    return f"[{bounds[0] / point:+.3g}, {bounds[1] / point:+.3g}]"


def directional_verdict(bounds: Sequence[float] | None, point: float = 1.0) -> tuple[str, str]:
    """A > B from the interval of A - B."""
    if bounds is None:
        return INCONCLUSIVE, "one paired seed and no per-example scores: no interval"
    low, high = bounds
    text = f"the 95% interval of the difference {interval_text(bounds, point)} points"
    if low > 0:
        return HOLDS, f"{text} lies above 0"
    if high < 0:
        return FAILS, f"{text} lies below 0"
    return INCONCLUSIVE, f"{text} contains 0"


def equivalence_verdict(
    bounds: Sequence[float] | None, margin: float, point: float = 1.0
) -> tuple[str, str]:
    """A about equal B: the interval of A - B against +- margin (margin in points)."""
    if bounds is None:
        return INCONCLUSIVE, "one paired seed and no per-example scores: no interval"
    low, high = (x / point for x in bounds)
    text = f"the 95% interval of the difference {interval_text(bounds, point)} points"
    if -margin <= low and high <= margin:
        return HOLDS, f"{text} lies within +-{margin:g}"
    if low > margin or high < -margin:
        return FAILS, f"{text} lies outside +-{margin:g}"
    return INCONCLUSIVE, f"{text} crosses the margin +-{margin:g}"


def at_most_verdict(bounds: Sequence[float] | None, limit: float) -> tuple[str, str]:
    """A mean at most `limit`, from its interval."""
    if bounds is None:
        return INCONCLUSIVE, "one pretraining seed: no interval"
    low, high = bounds
    text = f"the 95% interval [{low:.3g}, {high:.3g}]"
    if high <= limit:
        return HOLDS, f"{text} lies at or below {limit:g}"
    if low > limit:
        return FAILS, f"{text} lies above {limit:g}"
    return INCONCLUSIVE, f"{text} contains {limit:g}"


# --- downstream comparisons -------------------------------------------------------------------

KIND_WORDS = {None: "", "single": "single-sentence ", "pair": "sentence-pair "}


def resolve(m: Measurements, names: str | Sequence[str], kind: str | None) -> str | None:
    """The first of `names` the run measured on a task of `kind`."""
    for name in (names,) if isinstance(names, str) else names:
        if m.has(name, kind):
            return name
    return None


def per_example_matrix(runs: list[dict], scale: float) -> np.ndarray | None:
    """[runs, examples] where every run has per-example scores of one length that average to
    its score; else None."""
    rows = [run.get("per_example") for run in runs]
    if any(row is None for row in rows) or len({len(row) for row in rows}) != 1:
        return None
    matrix = np.asarray(rows, dtype=np.float64)
    if matrix.shape[1] == 0:
        return None
    scores = np.asarray([run["score"] for run in runs], dtype=np.float64)
    if not np.allclose(matrix.mean(axis=1), scores, rtol=1e-6, atol=1e-9 * scale):
        return None
    return matrix


def paired_downstream(
    m: Measurements, a: str, b: str, tasks: list[str]
) -> tuple[dict, PairedComparison | None]:
    """a against b on the average over `tasks`, paired by seed: JSON-ready values and the
    comparison (None where no seed ran both on every task)."""
    by_seed = {
        (task, name): {run["seed"]: run for run in m.downstream[task][name]}
        for task in tasks
        for name in (a, b)
    }
    seeds = sorted(set.intersection(*(set(runs) for runs in by_seed.values())))
    values = {"a": a, "b": b, "tasks": tasks, "seeds": seeds}
    if not seeds:
        return values, None
    a_avg = [float(np.mean([by_seed[t, a][s]["score"] for t in tasks])) for s in seeds]
    b_avg = [float(np.mean([by_seed[t, b][s]["score"] for t in tasks])) for s in seeds]
    values["a_score"] = mean_interval(a_avg, bounds=m.bounds).to_dict()
    values["b_score"] = mean_interval(b_avg, bounds=m.bounds).to_dict()
    scale = max(1.0, 100 * m.point)
    a_rows = [per_example_matrix([by_seed[t, a][s] for s in seeds], scale) for t in tasks]
    b_rows = [per_example_matrix([by_seed[t, b][s] for s in seeds], scale) for t in tasks]
    if all(
        x is not None and y is not None and x.shape == y.shape
        for x, y in zip(a_rows, b_rows, strict=True)
    ):
        comparison = paired_bootstrap_tasks(a_rows, b_rows)
    else:
        comparison = paired_permutation(a_avg, b_avg)
    values["difference"] = comparison.to_dict()
    return values, comparison


def missing_text(m: Measurements, names: list[str | Sequence[str]], kind: str | None) -> str:
    where = f"{KIND_WORDS[kind]}tasks" if kind else "downstream tasks"
    if not m.tasks(kind):
        return f"{NOT_TESTED}{where} (none measured)"
    absent = [n if isinstance(n, str) else " or ".join(n) for n in names if not resolve(m, n, kind)]
    if absent:
        return f"{NOT_TESTED}encodings {', '.join(f'`{n}`' for n in absent)} on {where}"
    return f"{NOT_TESTED}`{names[0]}` and `{names[1]}` on a common {where[:-1]}"


def downstream_outcome(
    m: Measurements,
    a: str | Sequence[str],
    b: str | Sequence[str],
    kind: str | None,
    verdict_of: Callable[[list[float] | None], tuple[str, str]],
) -> Outcome:
    name_a, name_b = resolve(m, a, kind), resolve(m, b, kind)
    tasks = [t for t in m.tasks(kind) if name_a in m.downstream[t] and name_b in m.downstream[t]]
    if name_a is None or name_b is None or not tasks:
        return Outcome({"a": name_a, "b": name_b}, INCONCLUSIVE, missing_text(m, [a, b], kind))
    values, comparison = paired_downstream(m, name_a, name_b, tasks)
    if comparison is None:
        reason = f"{NOT_TESTED}a seed that ran both `{name_a}` and `{name_b}` on every task"
        return Outcome(values, INCONCLUSIVE, reason)
    verdict, reason = verdict_of(comparison.bounds)
    reason = (
        f"`{name_a}` - `{name_b}` = {comparison.difference / m.point:+.3g} points over "
        f"{len(tasks)} task(s) and {comparison.runs} seed(s) ({comparison.method}); {reason}"
    )
    return Outcome(values, verdict, reason)


def better(a, b, kind: str | None = None) -> Callable[[Measurements], Outcome]:
    """Directional: a > b on the average score of the tasks of `kind` (None: all tasks). a, b:
    an encoding name or alternatives, the first measured one used."""

    def evaluate(m: Measurements) -> Outcome:
        return downstream_outcome(
            m, a, b, kind, lambda bounds: directional_verdict(bounds, m.point)
        )

    return evaluate


def about_equal(a, b, margin: float = 1.0, kind: str | None = None):
    """Equivalence: |a - b| within `margin` points on the average score of the tasks of `kind`."""

    def evaluate(m: Measurements) -> Outcome:
        outcome = downstream_outcome(
            m, a, b, kind, lambda bounds: equivalence_verdict(bounds, margin, m.point)
        )
        return Outcome({**outcome.values, "margin": margin}, outcome.verdict, outcome.reason)

    return evaluate


# --- the 30% claim ----------------------------------------------------------------------------


def curves_missing(m: Measurements, *names: str) -> Outcome:
    absent = " and ".join(f"`{n}`" for n in names if not m.mlm_curves.get(n))
    return Outcome({}, INCONCLUSIVE, f"{NOT_TESTED}MLM validation curves of {absent}")


def first_step_reaching(curve: list[list[float]], target: float) -> float | None:
    for step, loss in sorted(curve, key=lambda point: point[0]):
        if loss <= target:
            return step
    return None


def step_before(curve: list[list[float]], step: float) -> float:
    """The evaluation before `step` (0 where none): the crossing lies in (that, step]."""
    return max((point[0] for point in curve if point[0] < step), default=0.0)


def steps_fraction(encoding: str, base: str = "learned", limit: float = 0.3):
    """Per pretraining seed: the first eval step at which `encoding`'s validation loss is at or
    below `base`'s final validation loss, as a fraction of `base`'s steps; its mean at most
    `limit` (upper interval bound). The interval's spread is at least that of the evaluation
    grid (`mean_interval`'s resolution: the widest gap before a crossing)."""

    def evaluate(m: Measurements) -> Outcome:
        curves, base_curves = m.mlm_curves.get(encoding), m.mlm_curves.get(base)
        if not curves or not base_curves:
            return curves_missing(m, encoding, base)
        fractions, never, gaps = [], [], []
        for seed, (curve, base_curve) in enumerate(zip(curves, base_curves, strict=False)):
            base_step, target = sorted(base_curve, key=lambda point: point[0])[-1]
            reached = first_step_reaching(curve, target)
            if reached is None:
                never.append((seed, max(point[0] for point in curve) / base_step))
                fractions.append(None)
            else:
                fractions.append(reached / base_step)
                gaps.append((reached - step_before(curve, reached)) / base_step)
        values = {"encoding": encoding, "base": base, "limit": limit, "fractions": fractions}
        if never:
            seeds = ", ".join(str(s) for s, _ in never)
            if all(last >= limit for _, last in never):
                return Outcome(
                    values,
                    FAILS,
                    f"`{encoding}` never reached `{base}`'s final validation loss on pretraining "
                    f"seed(s) {seeds}: a fraction > 1 there (> its last step), so not at most "
                    f"{limit:g}",
                )
            return Outcome(
                values,
                INCONCLUSIVE,
                f"`{encoding}`'s curve on seed(s) {seeds} stops before {limit:g} of `{base}`'s "
                "steps without reaching its final loss",
            )
        # Each crossing is known to within the evaluation before it: the interval's spread
        # is at least that grid's, so seeds crossing at one evaluation are not a zero width.
        resolution = max(gaps)
        interval = mean_interval(fractions, resolution=resolution)
        values["fraction"] = interval.to_dict()
        values["resolution"] = resolution
        verdict, reason = at_most_verdict(interval.bounds, limit)
        reason = (
            f"mean fraction of `{base}`'s steps {interval.mean:.3g} over {interval.n} "
            f"pretraining seed(s), each read to within {resolution:.3g} (the evaluation "
            f"spacing); {reason} (a seed whose curve never reaches the loss counts as "
            "a fraction > 1: does not hold)"
        )
        return Outcome(values, verdict, reason)

    return evaluate


def lower_final_loss(encoding: str, base: str = "learned"):
    """`encoding`'s final MLM validation loss below `base`'s, paired by pretraining seed (the
    same data order and masks): holds where the t-interval of base - encoding lies above 0,
    with the exact sign-flip p-value beside it."""

    def evaluate(m: Measurements) -> Outcome:
        curves, base_curves = m.mlm_curves.get(encoding), m.mlm_curves.get(base)
        if not curves or not base_curves:
            return curves_missing(m, encoding, base)
        pairs = [
            (sorted(b)[-1][1], sorted(a)[-1][1])
            for a, b in zip(curves, base_curves, strict=False)
            if a and b
        ]
        comparison = paired_permutation([b for b, _ in pairs], [a for _, a in pairs])
        values = {"encoding": encoding, "base": base, "difference": comparison.to_dict()}
        verdict, reason = directional_verdict(comparison.bounds)
        reason = (
            f"`{base}` - `{encoding}` final validation loss = {comparison.difference:+.3f} over "
            f"{comparison.runs} pretraining seed(s) (p = {comparison.p_value:.3g}, exact sign "
            f"flips); {reason.replace(' points', '')}"
        )
        smallest = smallest_sign_flip_p(comparison.runs)
        if verdict != INCONCLUSIVE and smallest > 1 - comparison.confidence:
            # Said beside the verdict: with few seeds only the t-interval can decide.
            reason += (
                f"; no sign flip of {comparison.runs} seeds can give p below {smallest:.3g}, so "
                "the verdict rests on the t-interval's normal seed-to-seed differences"
            )
        return Outcome(values, verdict, reason)

    return evaluate


# --- chains -----------------------------------------------------------------------------------


def chain(parts: Sequence[Claim]) -> Callable[[Measurements], Outcome]:
    """Holds only where every part holds; does not hold where any part does not."""

    def evaluate(m: Measurements) -> Outcome:
        outcomes = {part.id: part.evaluate(m) for part in parts}
        values = {name: outcome.verdict for name, outcome in outcomes.items()}
        failed = [name for name, o in outcomes.items() if o.verdict == FAILS]
        untested = [o.reason for o in outcomes.values() if o.reason.startswith(NOT_TESTED)]
        if failed:
            return Outcome(values, FAILS, f"does not hold: {', '.join(failed)}")
        if all(o.verdict == HOLDS for o in outcomes.values()):
            return Outcome(values, HOLDS, "every adjacent pair holds")
        if untested:
            needs = "; ".join(dict.fromkeys(r.removeprefix(NOT_TESTED) for r in untested))
            return Outcome(values, INCONCLUSIVE, f"{NOT_TESTED}{needs}")
        open_ = [name for name, o in outcomes.items() if o.verdict == INCONCLUSIVE]
        return Outcome(values, INCONCLUSIVE, f"inconclusive: {', '.join(open_)}")

    return evaluate


# --- DIET Theorem 1 -----------------------------------------------------------------------------


def rank_theorem(
    n: int = 16, d: int = 12, head_dim: int = 4, rank: int = 8, trials: int = 5, seed: int = 0
):
    """DIET Theorem 1 computed here (float64, no training): rank(A_a) <= d_h for random X, P,
    W_Q, W_K (A_a = (X+P) W_Q W_K^T (X+P)^T), and the App. B construction gives
    rank(A_r) = d_h + d_p (A_r = X W_Q W_K^T X^T + P P^T with the two terms on disjoint
    blocks; here rotated by a random orthogonal matrix)."""
    if not (head_dim < rank < d and n >= head_dim + rank):
        raise ValueError(f"need d_h < d_p < d and n >= d_h + d_p: {head_dim}, {rank}, {d}, {n}")

    def evaluate(m: Measurements) -> Outcome:
        import torch

        generator = torch.Generator().manual_seed(seed)

        def normal(*shape):
            return torch.randn(*shape, generator=generator, dtype=torch.float64)

        ranks_a = []
        for _ in range(trials):
            x, p, wq, wk = normal(n, d), normal(n, d), normal(d, head_dim), normal(d, head_dim)
            a_a = (x + p) @ wq @ wk.T @ (x + p).T
            ranks_a.append(int(torch.linalg.matrix_rank(a_a)))
        q = torch.linalg.qr(normal(n, n)).Q  # a random rotation of the block construction
        x = torch.zeros(n, d, dtype=torch.float64)
        x[:, :head_dim] = q[:, :head_dim]
        w = torch.zeros(d, head_dim, dtype=torch.float64)
        w[:head_dim] = torch.eye(head_dim, dtype=torch.float64)
        p_hat = q[:, head_dim : head_dim + rank]
        a_r = x @ w @ w.T @ x.T + p_hat @ p_hat.T
        rank_r = int(torch.linalg.matrix_rank(a_r))
        values = {"n": n, "d": d, "d_h": head_dim, "d_p": rank, "rank_A_a": ranks_a}
        values["rank_A_r"] = rank_r
        ok = max(ranks_a) <= head_dim and rank_r == head_dim + rank
        reason = (
            f"rank(A_a) = {max(ranks_a)} (at most d_h = {head_dim} required) over {trials} "
            f"random draws; rank(A_r) = {rank_r} (d_h + d_p = {head_dim + rank} required)"
        )
        return Outcome(values, HOLDS if ok else FAILS, reason)

    return evaluate


def evaluate_claims(measurements: Measurements, claims: Sequence[Claim]) -> list[dict]:
    """Every claim evaluated on `measurements` (the papers': `claims_table.default_claims()`)."""
    return [claim.evaluated(measurements) for claim in claims]
