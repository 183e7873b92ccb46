"""The comparison's baselines: majority label, bag of words, and a random-initialised model,
scored on the same capped examples as fine-tuning."""

from __future__ import annotations

import math
import random

import pytest
import torch

from posattn.data import order_tasks
from posattn.lab.pretraining.baselines import (
    bag_of_words,
    bag_of_words_baseline,
    majority_baseline,
    overlap_features,
    random_init_model_dir,
    task_baselines,
    word_overlap_baseline,
)
from posattn.lab.pretraining.finetune import encode
from posattn.lab.pretraining.runconfig import load_run_config
from posattn.lab.pretraining.subset import fixed_subset
from posattn.lab.runs.sources import PreparedData
from posattn.models import PosAttnForMaskedLM, PosAttnForSequenceClassification

WORDS = ("the", "minister", "said", "shares", "in", "the", "club", "rose", "sharply", "on",
         "friday", "after", "a", "strong", "season")  # fmt: skip


def records(labels, text="a b"):
    return [{"text": f"{text} {i}", "label": label} for i, label in enumerate(labels)]


def test_majority_predicts_the_training_majority():
    train = records([0, 1, 1, 2])
    assert majority_baseline(train, records([1, 1, 1, 0])) == 0.75
    assert majority_baseline(train, records([0, 2])) == 0.0
    assert majority_baseline(records([1, 0]), records([0, 0, 1])) == pytest.approx(2 / 3)  # tie
    # With the caps, exactly the examples fixed_subset keeps.
    test = records([random.Random(1).randint(0, 1) for _ in range(50)])
    kept = fixed_subset(test, 20)
    expected = sum(r["label"] == 1 for r in kept) / 20
    assert majority_baseline(train, test, test_limit=20) == expected


def test_the_subset_is_the_one_fine_tuning_encodes(tokenizer):
    rows = [{"text": f"{WORDS[i % len(WORDS)]} {WORDS[(7 * i) % len(WORDS)]}", "label": i % 3}
            for i in range(40)]  # fmt: skip
    for i, row in enumerate(rows):
        row["label"] = i  # unique, so the labels name the rows kept
    kept = fixed_subset(rows, 15)
    assert [r["label"] for r in kept] == sorted(random.Random(0).sample(range(40), 15))
    assert [f["labels"] for f in encode(tokenizer, rows, 16, 15).features] == [
        r["label"] for r in kept
    ]
    assert fixed_subset(rows, None) == rows and fixed_subset(rows, 40) == rows


@pytest.fixture
def tokenizer():
    from conftest import word_level_tokenizer

    return word_level_tokenizer(sorted(set(WORDS)))


def word_order_records(count, seed):
    """Sentences of shuffled vocabulary, each given as written and as reordered."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        words = rng.sample(WORDS, 12)
        sentence = " ".join([words[0].capitalize(), *words[1:]]) + f" {i}."
        rows.append({"text": sentence, "label": 1})
        rows.append({"text": order_tasks.reorder(sentence, str(i)), "label": 0})
    return rows


def test_bag_of_words_is_at_chance_on_word_order():
    train, test = word_order_records(200, 0), word_order_records(100, 1)
    # Each test sentence comes in both forms, which have the same bag of words: whatever the
    # model answers for one it answers for the other, so exactly half are right.
    assert all(
        sorted(bag_of_words(a)) == sorted(bag_of_words(b))
        for a, b in zip(test[::2], test[1::2], strict=True)
    )
    assert bag_of_words_baseline(train, test, seed=0) == 0.5


def test_bag_of_words_learns_words_and_keeps_the_segments_apart():
    rng = random.Random(0)

    def row(label):
        cue = "upward" if label else "downward"  # words of no other row
        return {"text": " ".join([*rng.sample(WORDS, 5), cue]), "label": label}

    train = [row(i % 2) for i in range(200)]
    test = [row(i % 2) for i in range(60)]
    assert bag_of_words_baseline(train, test, seed=0) == 1.0
    # In a pair task the same word in either segment is a different feature.
    pair = {"text": "rose sharply", "text_pair": "rose"}
    assert bag_of_words(pair) == ["a:rose", "a:sharply", "b:rose"]
    swapped = [{"text": "b", "text_pair": "a", "label": 0}, {"text": "a", "text_pair": "b",
               "label": 1}] * 20  # fmt: skip
    assert bag_of_words_baseline(swapped, swapped[:2], seed=3) == 1.0
    assert bag_of_words_baseline(train, test, seed=0, train_limit=50, test_limit=30) == (
        bag_of_words_baseline(fixed_subset(train, 50), fixed_subset(test, 30), seed=0)
    )


def test_overlap_features_by_hand():
    pair = {"text": "The club rose, the club fell", "text_pair": "club ROSE again"}
    # words {the, club, rose, fell} and {club, rose, again}: 2 shared of 5
    assert overlap_features(pair) == [2 / 5, math.log1p(2)]
    assert overlap_features({"text": "a", "text_pair": "b"}) == [0.0, 0.0]
    # Other units: characters, as for a script written without spaces.
    assert overlap_features({"text": "語言", "text_pair": "言語學"}, list) == [2 / 3, math.log1p(2)]


def overlap_pairs(count, seed):
    """Pairs of random vocabulary words whose label is whether B repeats three words of A: the
    words differ from row to row, so only what the segments share tells the labels apart."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(400)]
    rows = []
    for i in range(count):
        words = rng.sample(vocabulary, 12)
        first, second = words[:6], words[6:]
        if i % 2:
            second = [*first[:3], *second[3:]]
        rows.append({"text": " ".join(first), "text_pair": " ".join(second), "label": i % 2})
    return rows


def test_word_overlap_reads_what_the_segments_share_where_a_bag_of_words_cannot():
    train, test = overlap_pairs(300, 0), overlap_pairs(100, 1)
    assert word_overlap_baseline(train, test) == 1.0
    assert bag_of_words_baseline(train, test) < 0.7
    # the caps pick the examples fine-tuning sees
    assert word_overlap_baseline(train, test, train_limit=40, test_limit=30) == (
        word_overlap_baseline(fixed_subset(train, 40), fixed_subset(test, 30))
    )
    # a single-segment task has no overlap to read
    assert word_overlap_baseline(records([0, 1]), records([1])) is None
    # one training label: the majority answer, as the bag of words
    one = [dict(r, label=1) for r in train[:10]]
    assert word_overlap_baseline(one, test) == 0.5


def test_task_baselines_use_the_fine_tuning_caps(tiny_data_dir):
    config = load_run_config("smoke")
    tasks = PreparedData(tiny_data_dir)
    found = task_baselines(tasks, "sentiment", config.finetune)
    assert found["train_examples"] == config.finetune.max_train_examples == 64  # of 96
    assert found["test_examples"] == 48  # all: fewer than max_eval_examples
    test = fixed_subset(tasks.records("sentiment", "test"), config.finetune.max_eval_examples)
    assert found["majority"] in {
        sum(r["label"] == label for r in test) / len(test) for label in (0, 1)
    }
    assert 0.0 <= found["bag_of_words"] <= 1.0
    assert found["word_overlap"] is None  # sentiment: one segment
    pair = task_baselines(tasks, "paraphrase", config.finetune)
    train = tasks.records("paraphrase", "train")
    test = tasks.records("paraphrase", "test")
    caps = {"train_limit": 64, "test_limit": config.finetune.max_eval_examples}
    assert pair["word_overlap"] is not None
    assert pair["word_overlap"] == word_overlap_baseline(train, test, **caps)


def test_random_init_model_dir_loads_for_fine_tuning(tmp_path, tiny_data_dir, float32_default):
    config = load_run_config("smoke")
    tokenizer = PreparedData(tiny_data_dir).tokenizer()
    state = torch.random.get_rng_state()
    first = random_init_model_dir(config, tokenizer, tmp_path / "a", seed=1)
    assert torch.equal(state, torch.random.get_rng_state())
    second = random_init_model_dir(config, tokenizer, tmp_path / "b", seed=1)
    a = PosAttnForMaskedLM.from_pretrained(first)
    b = PosAttnForMaskedLM.from_pretrained(second)
    assert a.config.d_model == config.model.d_model and a.config.vocab_size == len(tokenizer)
    assert a.config.encoding == config.model.encoding
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    classifier = PosAttnForSequenceClassification.from_pretrained(first, num_labels=3)
    assert classifier.config.num_labels == 3
    assert (first / "tokenizer.json").is_file()
