"""What a fine-tuned encoding must beat: the majority label, a bag of words, on pair tasks the
words the two segments share, and the same model fine-tuned from random weights (no
pretraining).

The accuracies are fractions in [0, 1] on the very records the fine-tuning scores: with a cap,
`fixed_subset` picks the same training and test examples as `finetune.encode`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

from ...data.identity import DataFolders
from ...models import PosAttnForMaskedLM
from ..runs.model_card import write_model_card
from ..runs.stages import save_run, start_stage
from .pretrain import model_config, pretrain_stage
from .runconfig import FinetuneSection, RunConfig
from .subset import fixed_subset

WORD = re.compile(r"\w+")
BOW_C = 1.0  # the logistic regression's inverse L2 strength (scikit-learn's default)
BOW_MAX_ITER = 2000


def majority_label(records: Sequence[dict]) -> int:
    """The most frequent label; a tie goes to the smallest label id."""
    counts = Counter(int(r["label"]) for r in records)
    return max(sorted(counts), key=counts.__getitem__)


def accuracy(predicted: Sequence[int], records: Sequence[dict]) -> float:
    if not records:
        raise ValueError("no test records to score")
    right = sum(int(p) == int(r["label"]) for p, r in zip(predicted, records, strict=True))
    return right / len(records)


# A fitted baseline: test records -> predicted label ids.
Predictor = Callable[[Sequence[dict]], list[int]]


def fit_majority(train: Sequence[dict]) -> Predictor:
    label = majority_label(train)
    return lambda test: [label] * len(test)


def majority_baseline(
    train_records: Sequence[dict],
    test_records: Sequence[dict],
    *,
    train_limit: int | None = None,
    test_limit: int | None = None,
) -> float:
    """Test accuracy of always answering the training set's majority label. The limits are
    the fine-tuning caps (max_train_examples, max_eval_examples), applied by fixed_subset."""
    train = fixed_subset(list(train_records), train_limit)
    return scored(fit_majority(train), test_records, test_limit)


def scored(predict: Predictor | None, test_records: Sequence[dict], test_limit: int | None):
    """Accuracy of a fitted baseline on the capped test records (None: no baseline)."""
    if predict is None:
        return None
    test = fixed_subset(list(test_records), test_limit)
    return accuracy(predict(test), test)


def bag_of_words(record: dict) -> list[str]:
    """Lower-cased word features; the second segment's words are prefixed apart from the
    first's ("a:word", "b:word"), so a pair task keeps which segment a word came from."""
    features = [f"a:{w}" for w in WORD.findall(record["text"].lower())]
    if record.get("text_pair") is not None:
        features += [f"b:{w}" for w in WORD.findall(record["text_pair"].lower())]
    return features


def fit_bag_of_words(train: Sequence[dict], seed: int = 0) -> Predictor:
    """A TF-IDF bag of words (unigrams, sublinear counts) and an L2-regularised logistic
    regression (lbfgs, deterministic) fitted on the training records."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    labels = [int(r["label"]) for r in train]
    if len(set(labels)) < 2:  # nothing to fit: every answer is the one label seen
        return fit_majority(train)
    vectorizer = TfidfVectorizer(analyzer=bag_of_words, sublinear_tf=True)
    features = vectorizer.fit_transform(train)
    model = LogisticRegression(C=BOW_C, max_iter=BOW_MAX_ITER, random_state=seed)
    model.fit(features, labels)
    return lambda test: model.predict(vectorizer.transform(test)).tolist()


def bag_of_words_baseline(
    train_records: Sequence[dict],
    test_records: Sequence[dict],
    seed: int = 0,
    *,
    train_limit: int | None = None,
    test_limit: int | None = None,
) -> float:
    """Test accuracy of `fit_bag_of_words` fitted on the (capped) training records. Word order
    is invisible to it, so on the word-order task it is at chance."""
    train = fixed_subset(list(train_records), train_limit)
    return scored(fit_bag_of_words(train, seed), test_records, test_limit)


def lower_words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def overlap_features(record: dict, units: Callable[[str], Sequence] = lower_words) -> list[float]:
    """How much of a pair's two segments is shared: the Jaccard index of their sets of units
    (words by default) and log(1 + the count of shared units). Numbers, not words, so a
    classifier of them reads any language whose units `units` can find."""
    first, second = set(units(record["text"])), set(units(record["text_pair"]))
    shared = len(first & second)
    return [shared / max(1, len(first | second)), math.log1p(shared)]


def is_pair_task(records: Sequence[dict]) -> bool:
    return all(r.get("text_pair") is not None for r in records)


def fit_word_overlap(
    train: Sequence[dict], seed: int = 0, units: Callable[[str], Sequence] = lower_words
) -> Predictor | None:
    """A logistic regression on overlap_features fitted on the training records; None for a
    single-segment task."""
    from sklearn.linear_model import LogisticRegression

    if not is_pair_task(train):
        return None
    labels = [int(r["label"]) for r in train]
    if len(set(labels)) < 2:
        return fit_majority(train)
    model = LogisticRegression(C=BOW_C, max_iter=BOW_MAX_ITER, random_state=seed)
    model.fit([overlap_features(r, units) for r in train], labels)
    return lambda test: model.predict([overlap_features(r, units) for r in test]).tolist()


def word_overlap_baseline(
    train_records: Sequence[dict],
    test_records: Sequence[dict],
    seed: int = 0,
    *,
    units: Callable[[str], Sequence] = lower_words,
    train_limit: int | None = None,
    test_limit: int | None = None,
) -> float | None:
    """Test accuracy of `fit_word_overlap`; None for a single-segment task. A bag of words sees
    each segment's words but not which of them both segments hold, which is what a pair task
    about one text following or restating the other may turn on; where this baseline is far
    above a fine-tuned model, the model has not learnt to compare the segments."""
    train = fixed_subset(list(train_records), train_limit)
    if not is_pair_task(test_records):
        return None
    return scored(fit_word_overlap(train, seed, units), test_records, test_limit)


def task_baselines(tasks, task: str, finetune: FinetuneSection, seed: int = 0) -> dict:
    """Majority, bag-of-words and word-overlap (pair tasks; else None) test accuracy of one
    task under a fine-tuning section's caps:
    training on its max_train_examples, scored on its max_eval_examples of the test split,
    as `finetune` does. `tasks`: an object with .records(task, split) (PreparedData)."""
    train, test = tasks.records(task, "train"), tasks.records(task, "test")
    limits = {"train_limit": finetune.max_train_examples, "test_limit": finetune.max_eval_examples}
    return {
        "majority": majority_baseline(train, test, **limits),
        "bag_of_words": bag_of_words_baseline(train, test, seed, **limits),
        "word_overlap": word_overlap_baseline(train, test, seed, **limits),
        "train_examples": len(fixed_subset(train, limits["train_limit"])),
        "test_examples": len(fixed_subset(test, limits["test_limit"])),
    }


def random_init_model_dir(config: RunConfig, tokenizer, output: Path, seed: int = 0) -> Path:
    """Write a randomly initialised PosAttnForMaskedLM of the run's model section and the
    tokenizer into `output`, as pretraining writes its model: fine-tuning from this directory
    is the "random initialisation" baseline. The weights depend only on the config and `seed`
    (drawn under a forked RNG, so the caller's random state is left as it was); they are
    saved in float32 whatever the default dtype."""
    output = Path(output)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = PosAttnForMaskedLM(model_config(config, tokenizer)).float()
    model.save_pretrained(str(output))
    tokenizer.save_pretrained(str(output))
    write_model_card(output, model.config, config, {"steps": 0}, kind="untrained masked LM")
    return output


def save_initial_model(config: RunConfig, output: Path, tokenizer, data: DataFolders) -> dict:
    """The "random initialisation" arm: the run's model built with pretrain.seed and not
    trained, saved where a pretraining saves its model (output/model) with its metrics.json,
    so that fine-tuning starts from it exactly as from a pretrained one. data: the folders
    of the run's data (its tokenizer's), recorded as a pretraining's are."""
    output = Path(output)
    start_stage(pretrain_stage(config, output, data))
    model_dir = random_init_model_dir(config, tokenizer, output / "model", config.pretrain.seed)
    parameters = sum(t.numel() for t in load_file(model_dir / "model.safetensors").values())
    metrics = {
        "encoding": config.model.encoding,
        "steps": 0,
        "eval_loss": [],
        "final_eval_loss": None,
        "parameters": parameters,
    }
    save_run(output, {"metrics.json": metrics}, config)
    return metrics
