"""The pretraining corpus: public-domain books, two Bibles and WordNet's glosses, one clean
paragraph per line, split into train and validation by group.

Groups keep related text on one side of the split: 20 consecutive paragraphs of a book, one
Bible chapter in both translations (they are paraphrases of each other), one synset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from . import rpackage, sword, wordnet
from .splits import CORPUS_FRACTIONS, assign_split
from .text import between_gutenberg_markers, one_line, paragraphs, prose

BOOK_BLOCK = 20  # paragraphs per split group in a book
SPLIT_SALT = "posattn-corpus"

AUSTEN = {
    "sensesensibility": "Sense and Sensibility",
    "prideprejudice": "Pride and Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}


@dataclass(frozen=True)
class Paragraph:
    text: str
    group: str  # paragraphs of one group share a split


def book(title: str, lines: Iterable[str]) -> list[Paragraph]:
    found = prose(paragraphs(lines))
    return [Paragraph(text, f"{title}/{i // BOOK_BLOCK}") for i, text in enumerate(found)]


def austen(root: Path) -> list[Paragraph]:
    novels = rpackage.package_data(root, "janeaustenr")
    return [p for name, title in AUSTEN.items() for p in book(title, novels[name])]


def moby_dick(root: Path) -> list[Paragraph]:
    (text,) = rpackage.package_data(root, "tokenizers")["mobydick"]
    lines = between_gutenberg_markers(text.lstrip("\ufeff")).splitlines()
    return book("Moby Dick", lines)


def tidytext_books(root: Path) -> list[Paragraph]:
    """tidytext's books.rda, less Pride and Prejudice (janeaustenr has it)."""
    books = rpackage.read_rda(root / "usr/lib/R/site-library/tidytext/extdata/books.rda")
    table = books["books"]
    lines_by_title: dict[str, list[str]] = {}
    for title, line in zip(table["title"], table["text"], strict=True):
        lines_by_title.setdefault(title, []).append(line or "")
    return [
        p
        for title, lines in lines_by_title.items()
        if title not in AUSTEN.values()
        for p in book(title, lines)
    ]


def bible(root: Path) -> list[Paragraph]:
    """Verses joined into the module's own paragraphs; a chapter always starts a new one."""
    found: list[tuple[str, list[str]]] = []
    for verse in sword.verses(sword.module_dir(root)):
        text = verse.text
        if not text:
            continue
        if not found or found[-1][0] != verse.chapter or verse.starts_paragraph:
            found.append((verse.chapter, []))
        found[-1][1].append(text)
    return [Paragraph(" ".join(texts), f"bible/{chapter}") for chapter, texts in found]


def wordnet_glosses(root: Path) -> list[Paragraph]:
    """'word, word: gloss' for every synset."""
    return [
        Paragraph(one_line(f"{', '.join(s.words)}: {s.gloss}"), f"wordnet/{s.key}")
        for s in wordnet.synsets(root)
    ]


# Source package -> reader of its unpacked tree, in the order the corpus files list them.
READERS: dict[str, Callable[[Path], list[Paragraph]]] = {
    "r-cran-janeaustenr": austen,
    "r-cran-tokenizers": moby_dick,
    "r-cran-tidytext": tidytext_books,
    "sword-text-kjv": bible,
    "sword-text-web": bible,
    "wordnet-base": wordnet_glosses,
}


def user_corpus(path: Path, lines: list[str]) -> list[Paragraph]:
    """A user's text file, one paragraph per line (blank lines skipped)."""
    return [
        Paragraph(one_line(line), f"{path.name}/{i // BOOK_BLOCK}")
        for i, line in enumerate(lines)
        if line.strip()
    ]


def split_corpus(found: Iterable[Paragraph]) -> dict[str, list[str]]:
    splits: dict[str, list[str]] = {name: [] for name, _ in CORPUS_FRACTIONS}
    for paragraph in found:
        splits[assign_split(paragraph.group, CORPUS_FRACTIONS, SPLIT_SALT)].append(paragraph.text)
    return splits
