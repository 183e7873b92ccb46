"""The cross-lingual set: written by `posattn data prepare --xlingual LANGS` from the handbook
(multilingual.py has the rules), read back by the lab's `compare --task xlingual`.

    xlingual/info.json                       languages, page splits, counts, dropped blocks
    xlingual/corpus/{train,validation}.txt   every language's kept blocks of train / dev pages
    xlingual/tokenizer/                      WordPiece on a language-balanced sample, accents kept
    xlingual/tasks/NAME/task.json            name, labels, pair
    xlingual/tasks/NAME/{train,dev}.jsonl    English only (zero-shot: no target labels)
    xlingual/tasks/NAME/test.LANG.jsonl      every language, the same items where translated
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from ..errors import invalid, require, require_choice
from . import handbook
from .identity import DataFolders, xlingual_folders
from .layout import paths
from .manifest import write_atomic
from .multilingual import (
    ENGLISH,
    LABELS_NEXT,
    SPLIT_ORDER,
    Handbook,
    balanced_sample,
    chapter_items,
    label_chapters,
    next_block_pairs,
    page_splits,
    realise,
    translated_blocks,
)
from .task_files import read_examples, write_examples
from .tasks import TaskSpec
from .tokenizer import save_tokenizer, train_wordpiece

# Bump when a rule of multilingual.py changes what is written: prepare rebuilds the set.
# 3: the tokenizer is trained the same on every run (tokenizer.train_wordpiece); before, each
# prepare drew one of several vocabularies.
XLINGUAL_VERSION = 3
DEFAULT_LANGUAGES = (
    "en-US",
    "de-DE",
    "es-ES",
    "fr-FR",
    "pt-BR",
    "it-IT",
    "ru-RU",
    "ja-JP",
    "zh-CN",
)
XLINGUAL_VOCAB = 12000
TASK_DESCRIPTIONS = {
    "next-block": "is block B the one that follows block A on the same handbook page?",
    "chapter": "which chapter of the Debian Administrator's Handbook a block comes from",
}


def read_handbook(root: Path, languages: list[str]) -> Handbook:
    available = sorted(p.name for p in (root / handbook.HTML_DIR).iterdir() if "-" in p.name)
    for language in languages:
        require_choice("xlingual language", language, tuple(available))
    blocks = {language: handbook.language_pages(root, language) for language in languages}
    return Handbook(blocks, handbook.chapters(root, ENGLISH))


def task_specs(book: Handbook) -> dict[str, TaskSpec]:
    return {
        "next-block": TaskSpec("next-block", LABELS_NEXT, True, TASK_DESCRIPTIONS["next-block"]),
        "chapter": TaskSpec(
            "chapter", tuple(label_chapters(book.chapters)), False, TASK_DESCRIPTIONS["chapter"]
        ),
    }


def write_xlingual(book: Handbook, folder: Path, vocab_size: int = XLINGUAL_VOCAB) -> dict:
    """Every file of the set into `folder`; returns info.json's content. English must be among
    the languages (its blocks carry the labels)."""
    languages = list(book.blocks)
    require(ENGLISH in languages, "xlingual languages", languages, f"a list with {ENGLISH}")
    languages = [ENGLISH, *(x for x in languages if x != ENGLISH)]
    splits = page_splits(book.chapters)
    kept = {language: translated_blocks(book, language) for language in languages}
    corpus: dict[str, list[str]] = {"train": [], "validation": []}
    for language in languages:
        for (page, _), text in sorted(kept[language].items()):
            split = splits.get(page, "train")
            if split != "test":
                corpus["train" if split == "train" else "validation"].append(text)
    for lines in corpus.values():
        random.Random(0).shuffle(lines)  # a capped corpus still holds every language
    for split, lines in corpus.items():
        write_atomic(folder / "corpus" / f"{split}.txt", "".join(line + "\n" for line in lines))
    train_lines = {
        language: [text for (page, _), text in kept[language].items() if splits[page] == "train"]
        for language in languages
    }
    with tempfile.TemporaryDirectory() as scratch:
        sample = Path(scratch) / "sample.txt"
        sample.write_text("".join(line + "\n" for line in balanced_sample(train_lines)), "utf-8")
        tokenizer = train_wordpiece([sample], vocab_size, keep_accents=True)
        save_tokenizer(tokenizer, folder / "tokenizer")
    items = {"next-block": next_block_pairs(book, splits), "chapter": chapter_items(book)}
    examples: dict[str, dict[str, int]] = {}
    for name, spec in task_specs(book).items():
        task_dir = folder / "tasks" / name
        write_atomic(task_dir / "task.json", json.dumps(spec.to_json(), indent=2) + "\n")
        by_split = {s: [i for i in items[name] if splits[i["a"][0]] == s] for s in SPLIT_ORDER}
        counts = {}
        for split in ("train", "dev"):
            rows = realise(by_split[split], kept[ENGLISH], ENGLISH, spec.pair)
            write_examples(task_dir / f"{split}.jsonl", rows)
            counts[split] = len(rows)
        for language in languages:
            rows = realise(by_split["test"], kept[language], language, spec.pair)
            write_examples(task_dir / f"test.{language}.jsonl", rows)
            counts[f"test.{language}"] = len(rows)
        examples[name] = counts
    english_blocks = sum(len(b) for b in book.blocks[ENGLISH].values())
    info = {
        "languages": languages,
        "blocks_kept": {language: len(kept[language]) for language in languages},
        "blocks_dropped": {
            language: english_blocks - len(kept[language]) for language in languages
        },
        "page_splits": dict(sorted(splits.items())),
        "corpus_lines": {split: len(lines) for split, lines in corpus.items()},
        "examples": examples,
        "vocab_size": vocab_size,
    }
    write_atomic(folder / "info.json", json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return info


def written_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".partial"))


class XlingualData:
    """A prepared cross-lingual set: the corpus, tokenizer and tasks the lab reads, in the
    shape of the lab's PreparedData (paragraphs, tokenizer, spec, records)."""

    def __init__(self, data_dir: str | os.PathLike | None = None) -> None:
        self.data_dir = data_dir
        self.folder = paths(data_dir).xlingual_dir
        if not (self.folder / "info.json").is_file():
            raise invalid(
                "data_dir",
                str(paths(data_dir).root),
                "a data directory with the cross-lingual set: run "
                "`posattn data prepare --xlingual en-US,de-DE,...` first",
            )
        self.info: dict[str, Any] = json.loads((self.folder / "info.json").read_text("utf-8"))

    @property
    def languages(self) -> list[str]:
        return list(self.info["languages"])

    def folders(self, tasks=()) -> DataFolders:
        """The folder every stage of the set reads (its corpus, tokenizer and `tasks`)."""
        return xlingual_folders(self.data_dir)

    def tokenizer(self):
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(self.folder / "tokenizer"))

    def paragraphs(self, split: str, limit: int | None = None):
        with open(self.folder / "corpus" / f"{split}.txt", encoding="utf-8") as handle:
            count = 0
            for line in handle:
                if limit is not None and count >= limit:
                    return
                if line.strip():
                    count += 1
                    yield line.rstrip("\n")

    def spec(self, name: str) -> TaskSpec:
        require_choice("xlingual task", name, tuple(self.info["examples"]))
        path = self.folder / "tasks" / name / "task.json"
        return TaskSpec.from_json(json.loads(path.read_text("utf-8")))

    def records(self, name: str, split: str, language: str = ENGLISH) -> list[dict]:
        """train / dev: English; test: `language`'s test file."""
        spec = self.spec(name)
        require_choice("split", split, ("train", "dev", "test"))
        require_choice("language", language, tuple(self.languages))
        if split != "test":
            require(language == ENGLISH, "language", language, f"{ENGLISH} for {split} (zero-shot)")
        file = f"test.{language}.jsonl" if split == "test" else f"{split}.jsonl"
        examples = read_examples(self.folder / "tasks" / name / file, spec.labels, spec.pair)
        return [{**e, "label": spec.labels.index(e["label"])} for e in examples]
