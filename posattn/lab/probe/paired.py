"""Probe accuracies paired by seed: every encoding against each reference encoding.

A seed fixes a cell's training and evaluation examples (`cell.train` and `cell.evaluate` draw
them from the task and the seed alone), so two encodings' cells of one seed saw the same data
and differ by the encoding and its initialisation. The difference of their token accuracies,
seed by seed, is then the paired quantity: its mean with a Student-t interval over seeds and
the exact sign-flip p-value (`statistics.paired_permutation`, the test `compare` reads where
runs keep no per-example scores), in accuracy points (percent), the interval cut to +-100.
"""

from __future__ import annotations

from ..runs.statistics import paired_permutation
from .settings import ProbeSettings

METRICS = ("token", "exact")
DIFFERENCE_BOUNDS = (-100.0, 100.0)


def difference_at(mine: dict, reference: dict, length: str, metric: str) -> dict:
    """`mine` - `reference` at one test length: PairedComparison's fields in points, or
    {"status": why there is no difference} where either side has no accuracy there."""
    for side in (mine, reference):
        if side["status"] != "ok":
            return {"status": "unsupported"}
        if "status" in side["lengths"][length]:
            return {"status": side["lengths"][length]["status"]}
    a = [100 * value for value in mine["lengths"][length][metric]["by_seed"]]
    b = [100 * value for value in reference["lengths"][length][metric]["by_seed"]]
    # A difference of two accuracies lies within +-100 points: its interval is cut there.
    return paired_permutation(a, b, bounds=DIFFERENCE_BOUNDS).to_dict()


def paired_results(results: dict, settings: ProbeSettings) -> dict:
    """paired[reference][task][encoding][length][metric] for every reference of
    `settings.references()` and every other encoding of the run."""
    paired: dict = {}
    for reference in settings.references():
        paired[reference] = {}
        for task in settings.tasks:
            base = results[task][reference]
            paired[reference][task] = {
                encoding: {
                    str(length): {
                        metric: difference_at(results[task][encoding], base, str(length), metric)
                        for metric in METRICS
                    }
                    for length in settings.test_lens
                }
                for encoding in settings.encodings
                if encoding != reference
            }
    return paired
