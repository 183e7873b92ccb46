"""Score a model on parallel pairs: greedy and beam-search translations, corpus BLEU and chrF
of the detokenised output, and the copy-the-source baseline on the same pairs."""

from __future__ import annotations

import time

from .decoding import SearchSettings
from .runconfig import DecodeSection
from .scoring import corpus_scores
from .translate import translate


def evaluate_model(
    model,
    tokenizer,
    pairs: list[tuple[str, str]],
    decode: DecodeSection,
    examples: int = 3,
    truncate: bool = True,
) -> dict:
    """{"greedy": scores, "beam": scores, "copy_source": scores, "references", ...}; each
    search keeps every hypothesis (paired significance tests need them). Sources longer than
    the model's max_len are truncated and counted (truncate=True), or refused with an error."""
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    result = {
        "pairs": len(pairs),
        "copy_source": corpus_scores(sources, references),
        "references": references,
    }
    searches = {"greedy": 1, "beam": decode.beam_size}
    for name, beam in searches.items():
        settings = SearchSettings(beam, decode.length_penalty, decode.max_new_tokens)
        start = time.perf_counter()
        hypotheses, truncated = translate(
            model, tokenizer, sources, settings, decode.batch_size, truncate=truncate
        )
        result[name] = {
            **corpus_scores(hypotheses, references),
            "beam_size": beam,
            "length_penalty": decode.length_penalty,
            "seconds": time.perf_counter() - start,
            "hypotheses": hypotheses,
        }
        result["truncated_sources"] = len(truncated)
        result[f"{name}_examples"] = [
            {"source": s, "reference": r, "output": h}
            for s, r, h in list(zip(sources, references, hypotheses, strict=True))[:examples]
        ]
    return result
