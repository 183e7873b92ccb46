"""Parallel text for translation: what each set is (`PARALLEL`), how its pairs are built from
the unpacked packages, which pairs are dropped, and how a prepared split is loaded.

en-es: the King James Bible and the Reina-Valera 1909 (Debian `sword-text-kjv`,
`sword-text-sparv`). Both modules use the KJV versification, so verse slots align one to one.
cs-en: the Debian Administrator's Handbook, Czech -> English (Debian `debian-handbook`),
the direction DIET reports; paragraphs align by position on each page (handbook.py).

Dropped pairs (`degenerate`): a side with no letters, lists of names ("Iddo, Ginnetho,
Abijah,": every word capitalised once "and"/"y" are set aside, nothing to translate), word
counts more than 3x apart (the few verse slots where the two versifications differ), and, in
the handbook, blocks shorter than 4 words or left untranslated (identical to the English).
Splits are fixed by a hash of the group: a Bible chapter, a handbook block.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import invalid, require
from . import handbook, sword
from .layout import SPLITS, paths
from .parallel_files import read_parallel
from .splits import assign_split

# Bump when a reader or filter changes what the pairs are: prepare rebuilds the sets.
PAIRS_VERSION = 2
PARALLEL_FRACTIONS = (("train", 0.9), ("dev", 0.05), ("test", 0.05))
MAX_LENGTH_RATIO = 3.0
MIN_HANDBOOK_WORDS = 4
NAME_LIST_JOINERS = {"and", "y", "e", "a"}
# SWORD's Spanish text sets a space after an opening question or exclamation mark.
OPENING_MARK_SPACE = re.compile(r"([¿¡]) ")

Pair = tuple[str, str, str]  # (group, source, target)


@dataclass(frozen=True)
class ParallelSpec:
    name: str
    source_lang: str
    target_lang: str
    description: str
    sources: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "sources": list(self.sources)}


PARALLEL = {
    spec.name: spec
    for spec in (
        ParallelSpec(
            "en-es",
            "en",
            "es",
            "Bible verses, King James (1611/1769) -> Reina-Valera (1909)",
            ("sword-text-kjv", "sword-text-sparv"),
        ),
        ParallelSpec(
            "cs-en",
            "cs",
            "en",
            "Debian Administrator's Handbook paragraphs, Czech -> English",
            ("debian-handbook",),
        ),
    )
}


def is_name_list(text: str) -> bool:
    words = [w for w in text.split() if w[0].isalpha() and w.lower() not in NAME_LIST_JOINERS]
    return bool(words) and all(w[0].isupper() for w in words)


def degenerate(source: str, target: str) -> bool:
    """True for a pair that teaches no translation (see the module docstring)."""
    if not any(c.isalpha() for c in source) or not any(c.isalpha() for c in target):
        return True
    if is_name_list(source) or is_name_list(target):
        return True
    words = len(source.split()), len(target.split())
    return max(words) > MAX_LENGTH_RATIO * min(words)


def bible_pairs(roots: dict[str, Path]) -> list[Pair]:
    english = sword.verses(sword.module_dir(roots["sword-text-kjv"]))
    spanish = {v.key: v.text for v in sword.verses(sword.module_dir(roots["sword-text-sparv"]))}
    pairs = []
    for verse in english:
        target = OPENING_MARK_SPACE.sub(r"\1", spanish.get(verse.key, ""))
        if verse.text and target:
            pairs.append((f"bible/{verse.chapter}", verse.text, target))
    return pairs


def handbook_pairs(roots: dict[str, Path]) -> list[Pair]:
    pairs = []
    for key, czech, english in handbook.aligned_blocks(roots["debian-handbook"], "cs-CZ", "en-US"):
        short = min(len(czech.split()), len(english.split())) < MIN_HANDBOOK_WORDS
        if not short and czech != english:
            pairs.append((f"handbook/{key}", czech, english))
    return pairs


BUILDERS: dict[str, Callable[[dict[str, Path]], list[Pair]]] = {
    "en-es": bible_pairs,
    "cs-en": handbook_pairs,
}


def split_pairs(name: str, pairs: list[Pair]) -> tuple[dict[str, list[tuple[str, str]]], int]:
    """(pairs by split, number dropped as degenerate); a pair's split is a hash of its group.
    A source sentence seen before (the Bible repeats verses) takes its first group, so a test
    sentence never appears in training."""
    splits: dict[str, list[tuple[str, str]]] = {split: [] for split in SPLITS}
    dropped = 0
    first_group: dict[str, str] = {}
    for group, source, target in pairs:
        if degenerate(source, target):
            dropped += 1
            continue
        group = first_group.setdefault(source.lower(), group)
        splits[assign_split(group, PARALLEL_FRACTIONS, f"posattn-parallel-{name}")].append(
            (source, target)
        )
    return splits, dropped


def parallel_dir(data_dir: str | os.PathLike | None, name: str) -> Path:
    return paths(data_dir).translation_dir(name)


def load_parallel(
    data_dir: str | os.PathLike | None, name: str, split: str
) -> list[tuple[str, str]]:
    """(source, target) pairs of a prepared set's split."""
    require(split in SPLITS, "split", split, f"one of {', '.join(SPLITS)}")
    folder = paths(data_dir).translation_dir(name)
    if not (folder / "pairs.json").is_file():
        known = ", ".join(PARALLEL)
        raise invalid(
            "translation set",
            name,
            f"a prepared set in {folder.parent} (built-in: {known}); run "
            f"`posattn data prepare --translation {name}`",
        )
    spec = PARALLEL.get(name)
    source_lang, target_lang = (spec.source_lang, spec.target_lang) if spec else ("src", "tgt")
    return read_parallel(folder / f"{split}.{source_lang}", folder / f"{split}.{target_lang}")
