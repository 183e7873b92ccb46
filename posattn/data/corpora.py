"""The built-in MLM corpora `prepare --builtin-corpus` chooses from: each maps its source
packages to the readers of their unpacked trees, in the order the corpus files list them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .corpus import READERS as BOOK_READERS
from .corpus import Paragraph
from .news_corpus import NEWS_SOURCE, news
from .news_corpus import RULES as NEWS_RULES

BUILTIN_CORPORA: dict[str, dict[str, Callable[[Path], list[Paragraph]]]] = {
    "books": BOOK_READERS,  # novels, two Bibles, WordNet glosses: the default
    "news": {NEWS_SOURCE: news},  # BBC articles in no dev/test split of a BBC task
}
DEFAULT_CORPUS = "books"
# A corpus's selection rules beyond its sources, part of its build fingerprint (books has none,
# so data directories built before the choice existed stay current).
CORPUS_RULES = {"news": NEWS_RULES}
