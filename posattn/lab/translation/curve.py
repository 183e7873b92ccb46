"""The learning curve of a translation run: every train.curve_steps steps, and at the last
step, the model translates a fixed sample of dev pairs greedily (batched, cheap) and their
corpus BLEU and chrF are recorded.

The points are entries of the Trainer's log history ({"step", "curve_bleu", "curve_chrf",
"curve_seconds"}), which every checkpoint saves in trainer_state.json and a resumed run
restores: points up to the checkpoint are kept as they were, never recomputed, and points the
killed process made after it are made again by the resumed one."""

from __future__ import annotations

import time

from transformers import TrainerCallback

from ...errors import require
from .data import sample
from .decoding import SearchSettings
from .runconfig import DecodeSection
from .scoring import corpus_scores
from .translate import translate

PREFIX = "curve_"


def curve_subset(pairs: list[tuple[str, str]], size: int) -> list[tuple[str, str]]:
    """The curve's dev pairs: a fixed random sample of `size` (all where fewer), book order."""
    require(
        bool(pairs), "train.curve_pairs", size, "dev pairs to score; none is left to sample from"
    )
    return sample(pairs, size)


def greedy_scores(model, tokenizer, pairs: list[tuple[str, str]], decode: DecodeSection) -> dict:
    """Corpus BLEU and chrF of the model's greedy translations of `pairs` (sources over the
    model's max_len are truncated, as the final evaluation does); the model's train/eval mode
    is left as it was."""
    training = model.training
    settings = SearchSettings(1, decode.length_penalty, decode.max_new_tokens)
    try:
        hypotheses, _ = translate(
            model, tokenizer, [s for s, _ in pairs], settings, decode.batch_size, truncate=True
        )
    finally:
        model.train(training)
    return corpus_scores(hypotheses, [t for _, t in pairs])


def is_curve_step(step: int, every: int, last: int) -> bool:
    return step % every == 0 or step == last


class LearningCurve(TrainerCallback):
    """Scores the model on the curve's pairs after each curve step (before that step's
    checkpoint is written, so the checkpoint holds the point)."""

    def __init__(self, tokenizer, pairs: list[tuple[str, str]], decode: DecodeSection, every: int):
        self.tokenizer, self.pairs, self.decode, self.every = tokenizer, pairs, decode, every

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if not is_curve_step(state.global_step, self.every, state.max_steps):
            return
        start = time.perf_counter()
        scores = greedy_scores(model, self.tokenizer, self.pairs, self.decode)
        point = {
            "step": state.global_step,
            f"{PREFIX}bleu": scores["bleu"],
            f"{PREFIX}chrf": scores["chrf"],
            f"{PREFIX}seconds": time.perf_counter() - start,
        }
        state.log_history.append(point)
        print(
            f"curve step {point['step']}: dev BLEU {scores['bleu']:.2f} chrF {scores['chrf']:.2f}"
        )


def curve_points(history: list[dict]) -> list[dict]:
    """[{"step", "bleu", "chrf", "seconds"}] of a log history, by step."""
    points = [
        {"step": entry["step"], **{k[len(PREFIX) :]: v for k, v in entry.items() if k != "step"}}
        for entry in history
        if f"{PREFIX}bleu" in entry
    ]
    return sorted(points, key=lambda point: point["step"])
