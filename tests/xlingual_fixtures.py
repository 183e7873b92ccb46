"""A generated handbook in three languages, with the faults of the real one: blocks left in
English, blocks mostly in English, blocks in the wrong script, a page whose block count differs."""

from __future__ import annotations

import random
from pathlib import Path

from posattn.data.multilingual import Handbook
from posattn.data.xlingual import write_xlingual

ENGLISH_WORDS = [
    "the",
    "package",
    "server",
    "user",
    "file",
    "system",
    "network",
    "install",
    "update",
    "mail",
    "disk",
    "key",
]
GERMAN_WORDS = [
    "das",
    "paket",
    "dienst",
    "nutzer",
    "datei",
    "system",
    "netz",
    "laden",
    "neu",
    "post",
    "platte",
    "schluessel",
]
CYRILLIC = "абвгдежзиклмнопрстуфхцчшщ"
IDENTICAL, MOSTLY_ENGLISH, LATIN_IN_RUSSIAN = 2, 3, 4  # block indices of each fault
CHAPTERS = {"alpha": 7, "beta": 7, "gamma": 1}  # pages per chapter (gamma: too few for a label)
BLOCKS_PER_PAGE = 8
MISMATCHED_PAGE = "sect.beta-2"  # German has one block more: the page is skipped in German


def words(rng: random.Random, vocabulary: list[str], count: int) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def cyrillic_word(rng: random.Random) -> str:
    return "".join(rng.choice(CYRILLIC) for _ in range(rng.randint(3, 8)))


def generated_handbook(seed: int = 0) -> Handbook:
    rng = random.Random(seed)
    chapters, english, german, russian = {}, {}, {}, {}
    for chapter, pages in CHAPTERS.items():
        for number in range(pages):
            page = chapter if number == 0 else f"sect.{chapter}-{number}"
            chapters[page] = chapter
            en, de, ru = [], [], []
            for index in range(BLOCKS_PER_PAGE):
                size = rng.randint(7, 12)
                text = f"{page} {index} " + words(rng, ENGLISH_WORDS, size)
                en.append(text)
                if index == IDENTICAL:
                    de.append(text)
                elif index == MOSTLY_ENGLISH:
                    de.append(text + " paket")
                else:
                    de.append(f"{page} {index} " + words(rng, GERMAN_WORDS, size))
                if index == LATIN_IN_RUSSIAN:
                    ru.append(f"{page} {index} " + words(rng, GERMAN_WORDS, size))
                else:
                    ru.append(" ".join(cyrillic_word(rng) for _ in range(size)))
            if page == MISMATCHED_PAGE:
                de.append("ein Block mehr")
            english[page], german[page], russian[page] = en, de, ru
    return Handbook({"en-US": english, "de-DE": german, "ru-RU": russian}, chapters)


def build_xlingual_data(root: Path, seed: int = 0) -> Path:
    """A data directory holding only the cross-lingual set (xlingual/) of the generated book."""
    write_xlingual(generated_handbook(seed), root / "xlingual", vocab_size=300)
    return root
