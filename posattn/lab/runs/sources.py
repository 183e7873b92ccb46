"""What the lab reads from a prepared data directory (`posattn data prepare`): the tokenizer,
the corpus paragraphs and the fine-tuning tasks."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

from ...data import load_task, load_tokenizer, paths, task_spec
from ...data.identity import DataFolders, english_folders
from ...data.tasks import TaskSpec
from ...errors import invalid


class PreparedData:
    def __init__(self, data_dir: str | Path | None = None) -> None:
        self.data_dir = data_dir
        self.paths = paths(data_dir)
        if not self.paths.corpus("train").is_file():
            raise invalid(
                "data_dir",
                str(self.paths.root),
                "a prepared data directory: run `posattn data prepare` first "
                "(or set data.data_dir / POSATTN_DATA_DIR)",
            )

    def folders(self, tasks=()) -> DataFolders:
        """The folders a stage reading the corpus, tokenizer and `tasks` reads."""
        return english_folders(self.data_dir, tasks)

    def tokenizer(self):
        return load_tokenizer(self.data_dir)

    def paragraphs(self, split: str, limit: int | None = None):
        with open(self.paths.corpus(split), encoding="utf-8") as handle:
            lines = (line.rstrip("\n") for line in handle)
            yield from islice((line for line in lines if line), limit)

    def spec(self, name: str) -> TaskSpec:
        return task_spec(self.data_dir, name)

    def records(self, name: str, split: str) -> list[dict]:
        return load_task(self.data_dir, name, split)
