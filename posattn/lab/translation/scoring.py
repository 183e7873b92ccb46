"""Corpus BLEU and chrF with sacrebleu, on detokenised text (the strings as a reader sees
them), sacrebleu's default 13a tokenisation for BLEU: the numbers DIET Table 4 reports; and
sacrebleu's paired significance tests between two systems on the same references."""

from __future__ import annotations

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from ...errors import require, require_choice

SIGNIFICANCE_TESTS = ("ar", "bs")  # approximate randomisation, paired bootstrap resampling


def check_pairs(hypotheses: list[str], references: list[str]) -> None:
    require(
        len(hypotheses) == len(references),
        "hypotheses",
        len(hypotheses),
        f"one per reference ({len(references)} references)",
    )
    require(bool(references), "references", 0, "at least one reference")


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """{"bleu", "chrf"} in [0, 100], the BLEU brevity penalty and both metrics' sacrebleu
    signatures (what a reader needs to compare with other papers' numbers)."""
    check_pairs(hypotheses, references)
    bleu_metric, chrf_metric = BLEU(), CHRF()
    bleu = bleu_metric.corpus_score(hypotheses, [references])
    chrf = chrf_metric.corpus_score(hypotheses, [references])
    return {
        "bleu": bleu.score,
        "chrf": chrf.score,
        "brevity_penalty": bleu.bp,
        "signature": {
            "bleu": str(bleu_metric.get_signature()),
            "chrf": str(chrf_metric.get_signature()),
        },
    }


def paired_significance(
    baseline: list[str],
    system: list[str],
    references: list[str],
    test_type: str = "ar",
    samples: int = 1000,
) -> dict:
    """sacrebleu's paired test of `system` against `baseline` on the same references:
    {"bleu"|"chrf": {"baseline", "system", "difference", "p_value"}, "test", "samples"}.
    The p-value is two-sided for "ar" (approximate randomisation, Riezler and Maxwell 2005)
    and for "bs" (paired bootstrap resampling, Koehn 2004) as sacrebleu computes them."""
    require_choice("test_type", test_type, SIGNIFICANCE_TESTS)
    require(samples >= 100, "samples", samples, "at least 100 resamples")
    check_pairs(baseline, references)
    check_pairs(system, references)
    if system == baseline:  # sacrebleu counts a zero difference as significant (multeval's rule)
        same = corpus_scores(system, references)
        return {
            "test": test_type,
            "samples": samples,
            **{
                m: {"baseline": same[m], "system": same[m], "difference": 0.0, "p_value": 1.0}
                for m in ("bleu", "chrf")
            },
        }
    test = PairedTest(
        [("baseline", baseline), ("system", system)],
        {"bleu": BLEU(), "chrf": CHRF()},
        references=[references],
        test_type=test_type,
        n_samples=samples,
    )
    _, results = test()
    # sacrebleu names its columns by the metrics' own names ("BLEU", "chrF2"), in our order.
    columns = [name for name in results if name != "System"]
    out: dict = {"test": test_type, "samples": samples}
    for metric, column in zip(("bleu", "chrf"), columns, strict=True):
        base, other = results[column]
        out[metric] = {
            "baseline": base.score,
            "system": other.score,
            "difference": other.score - base.score,
            "p_value": other.p_value,
        }
    return out
