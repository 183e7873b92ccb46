"""Corpus BLEU and chrF with sacrebleu, on detokenised text (the strings as a reader sees
them), sacrebleu's default 13a tokenisation for BLEU: the numbers DIET Table 4 reports."""

from __future__ import annotations

from sacrebleu.metrics import BLEU, CHRF

from ...errors import require


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """{"bleu", "chrf"} in [0, 100] and the BLEU signature's brevity penalty."""
    require(
        len(hypotheses) == len(references),
        "hypotheses",
        len(hypotheses),
        f"one per reference ({len(references)} references)",
    )
    require(bool(references), "references", 0, "at least one reference")
    bleu = BLEU().corpus_score(hypotheses, [references])
    chrf = CHRF().corpus_score(hypotheses, [references])
    return {"bleu": bleu.score, "chrf": chrf.score, "brevity_penalty": bleu.bp}
