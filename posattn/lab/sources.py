"""What the lab reads from a prepared data directory (`posattn data prepare`): the tokenizer,
the corpus paragraphs and the fine-tuning tasks, with labels turned into ids."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from ..data.layout import DataPaths, paths
from ..data.task_files import read_examples
from ..errors import invalid


@dataclass(frozen=True)
class TaskSpec:
    name: str
    labels: list[str]
    pair: bool

    @property
    def num_labels(self) -> int:
        return len(self.labels)


class PreparedData:
    def __init__(self, data_dir: str | Path | None = None) -> None:
        self.paths: DataPaths = paths(data_dir)
        if not self.paths.corpus("train").is_file():
            raise invalid(
                "data_dir",
                str(self.paths.root),
                "a prepared data directory: run `posattn data prepare` first "
                "(or set data.data_dir / POSATTN_DATA_DIR)",
            )

    def tokenizer(self) -> PreTrainedTokenizerFast:
        return PreTrainedTokenizerFast.from_pretrained(str(self.paths.tokenizer))

    def paragraphs(self, split: str, limit: int | None = None):
        with open(self.paths.corpus(split), encoding="utf-8") as handle:
            lines = (line.rstrip("\n") for line in handle)
            yield from islice((line for line in lines if line), limit)

    def available_tasks(self) -> list[str]:
        root = self.paths.tasks_dir
        return sorted(p.parent.name for p in root.glob("*/task.json")) if root.is_dir() else []

    def spec(self, name: str) -> TaskSpec:
        info = self.paths.task_info(name)
        if not info.is_file():
            raise invalid(
                "task", name, f"one of {', '.join(self.available_tasks()) or '(none prepared)'}"
            )
        meta = json.loads(info.read_text())
        return TaskSpec(name=name, labels=list(meta["labels"]), pair=bool(meta.get("pair")))

    def records(self, name: str, split: str) -> list[dict]:
        spec = self.spec(name)
        examples = read_examples(self.paths.task_split(name, split), spec.labels, spec.pair)
        index = {label: i for i, label in enumerate(spec.labels)}
        return [{**e, "label": index[e["label"]]} for e in examples]
