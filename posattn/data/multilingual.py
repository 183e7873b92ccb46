"""Cross-lingual data from the Debian Administrator's Handbook: the same pages in many languages,
block by block (handbook.py), turned into zero-shot tasks whose labels come from English only.

Alignment: block i of a page in one language translates block i of that page in English; a
page whose block count differs from the English one is skipped for that language.

Untranslated blocks (a partly translated language leaves the English text in place, or keeps
most of it) are dropped, per language (`untranslated`):
- identical to the English block, spaces aside;
- mostly English words: at least `MAX_SHARED_WORDS` of its words occur in the English block
  (commands, file names and tables are dropped with them: nothing to transfer);
- in the wrong script: a language written in another script (`SCRIPTS`) whose block has fewer
  than `MIN_SCRIPT_SHARE` of its letters in that script.

Splits are by page, stratified by chapter (`page_splits`): every block, pair and corpus line of a
page, in every language, lies in that page's split, so no test page is seen in training (the
multilingual MLM corpus included).

Tasks (labels fixed on the English structure, identical in every language):
- next-block (pair): is B the block that follows A on the same page (`follows`), or a block of
  another page of the same split (`elsewhere`)? One negative per positive.
- chapter (single): which chapter of the handbook a block comes from, among the chapters with at
  least `MIN_CHAPTER_PAGES` pages.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass

ENGLISH = "en-US"
# Unicode ranges of the languages not written in Latin letters.
SCRIPTS = {
    "ru-RU": ((0x0400, 0x04FF),),
    "el-GR": ((0x0370, 0x03FF),),
    "ja-JP": ((0x3040, 0x30FF), (0x4E00, 0x9FFF)),
    "zh-CN": ((0x4E00, 0x9FFF),),
    "zh-TW": ((0x4E00, 0x9FFF),),
    "ko-KR": ((0xAC00, 0xD7AF), (0x1100, 0x11FF)),
    "ar-MA": ((0x0600, 0x06FF),),
    "fa-IR": ((0x0600, 0x06FF), (0xFB50, 0xFDFF)),
}
MAX_SHARED_WORDS = 0.7
MIN_SCRIPT_SHARE = 0.25
MIN_TASK_WORDS = 6  # English words in a block used by a task
MIN_CHAPTER_PAGES = 6
TEST_SHARE, DEV_SHARE = 0.2, 0.1
SPLIT_ORDER = ("train", "dev", "test")
LABELS_NEXT = ("elsewhere", "follows")
WORD = re.compile(r"\w+")

Key = tuple[str, int]  # (page, block index)


@dataclass(frozen=True)
class Handbook:
    """Blocks per language and page (`blocks[lang][page]`, English first) and each page's
    chapter (the page itself for a chapter page)."""

    blocks: dict[str, dict[str, list[str]]]
    chapters: dict[str, str]


def words(text: str) -> list[str]:
    return [w for w in WORD.findall(text.lower()) if not w.isdigit()]


def script_share(text: str, ranges: Iterable[tuple[int, int]]) -> float:
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    inside = sum(any(low <= ord(c) <= high for low, high in ranges) for c in letters)
    return inside / len(letters)


def untranslated(english: str, text: str, language: str) -> bool:
    """True for a block left in English (see the module docstring for the three rules)."""
    if " ".join(text.split()) == " ".join(english.split()):
        return True
    found, known = words(text), set(words(english))
    if found and sum(w in known for w in found) / len(found) >= MAX_SHARED_WORDS:
        return True
    ranges = SCRIPTS.get(language)
    return ranges is not None and script_share(text, ranges) < MIN_SCRIPT_SHARE


def translated_blocks(handbook: Handbook, language: str) -> dict[Key, str]:
    """The blocks of `language` that translate their English block (all English blocks for
    English itself), keyed by (page, index); pages of another block count are left out."""
    english = handbook.blocks[ENGLISH]
    kept = {}
    for page, blocks in handbook.blocks.get(language, {}).items():
        source = english.get(page)
        if source is None or len(source) != len(blocks):
            continue
        for index, (en, text) in enumerate(zip(source, blocks, strict=True)):
            if not text.strip():
                continue
            if language == ENGLISH or not untranslated(en, text, language):
                kept[page, index] = text
    return kept


def rank_key(page: str, salt: str = "posattn-xlingual") -> str:
    return hashlib.sha256(f"{salt}/{page}".encode()).hexdigest()


def page_splits(chapters: dict[str, str]) -> dict[str, str]:
    """Each page's split: within a chapter, pages in hash order; the k-th of n takes the split
    whose share holds (k + 1/2) / n (test first, then dev, the rest train), so every chapter of
    five pages or more has pages in train and in test."""
    by_chapter: dict[str, list[str]] = {}
    for page, chapter in chapters.items():
        by_chapter.setdefault(chapter, []).append(page)
    splits = {}
    for pages in by_chapter.values():
        ordered = sorted(pages, key=rank_key)
        for k, page in enumerate(ordered):
            u = (k + 0.5) / len(ordered)
            splits[page] = (
                "test" if u < TEST_SHARE else "dev" if u < TEST_SHARE + DEV_SHARE else "train"
            )
    return splits


def task_keys(handbook: Handbook) -> list[Key]:
    """English blocks long enough for a task, in page order."""
    return [
        (page, index)
        for page, blocks in sorted(handbook.blocks[ENGLISH].items())
        for index, text in enumerate(blocks)
        if len(text.split()) >= MIN_TASK_WORDS
    ]


def label_chapters(chapters: dict[str, str]) -> list[str]:
    counts: dict[str, int] = {}
    for chapter in chapters.values():
        counts[chapter] = counts.get(chapter, 0) + 1
    return sorted(c for c, n in counts.items() if n >= MIN_CHAPTER_PAGES)


def next_block_pairs(handbook: Handbook, splits: dict[str, str]) -> list[dict]:
    """(A, B, label) as block keys: every two consecutive task blocks of a page (`follows`) and,
    for each, A with a block of another page of the same split (`elsewhere`), drawn with a
    fixed seed."""
    keys = task_keys(handbook)
    usable = set(keys)
    by_split: dict[str, list[Key]] = {}
    for key in keys:
        by_split.setdefault(splits[key[0]], []).append(key)
    rng = random.Random(17)
    pairs = []
    for page, index in keys:
        after = (page, index + 1)
        if after not in usable:
            continue
        pool = by_split[splits[page]]
        other = pool[rng.randrange(len(pool))]
        while other[0] == page and any(k[0] != page for k in pool):
            other = pool[rng.randrange(len(pool))]
        if other[0] == page:
            continue  # a split of one page has nowhere else to draw from
        pairs.append({"a": (page, index), "b": after, "label": "follows"})
        pairs.append({"a": (page, index), "b": other, "label": "elsewhere"})
    return pairs


def chapter_items(handbook: Handbook) -> list[dict]:
    labels = set(label_chapters(handbook.chapters))
    return [
        {"a": key, "label": handbook.chapters[key[0]]}
        for key in task_keys(handbook)
        if handbook.chapters[key[0]] in labels
    ]


def realise(items: list[dict], texts: dict[Key, str], language: str, pair: bool) -> list[dict]:
    """The items whose blocks `language` translates, as task rows (text, text_pair, label),
    with an id naming the blocks, the same in every language."""
    rows = []
    for item in items:
        keys = (item["a"], item["b"]) if pair else (item["a"],)
        if not all(key in texts for key in keys):
            continue
        row = {"id": " ".join(f"{p}/{i}" for p, i in keys), "text": texts[keys[0]]}
        if pair:
            row["text_pair"] = texts[keys[1]]
        rows.append({**row, "label": item["label"]})
    return rows


def balanced_sample(lines_by_language: dict[str, list[str]], seed: int = 0) -> list[str]:
    """As many lines of every language as the smallest one has, drawn with a fixed seed: a
    tokenizer trained on it gives every language the same weight."""
    size = min(len(lines) for lines in lines_by_language.values())
    rng = random.Random(seed)
    sample = []
    for language in sorted(lines_by_language):
        sample += rng.sample(lines_by_language[language], size)
    return sample
