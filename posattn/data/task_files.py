"""The task file format: JSON Lines, one example per line.

Each line is an object with
  "text"       the (first) segment, a non-empty string
  "text_pair"  the second segment: required in pair tasks, absent in single-segment tasks
  "label"      the label's name, one of the task's labels
  "id"         optional: a stable identifier (default: "line N")
  "split"      optional, in a user's file: "train", "dev" or "test"; rows without it are
               split deterministically (80/10/10, by a hash of the text)
Blank lines are skipped. posattn writes `tasks/NAME/{train,dev,test}.jsonl` in this format,
without "split", plus `task.json` with the labels in order (a label's index is its id).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import invalid, require
from .layout import SPLITS
from .manifest import write_atomic

FIELDS = ("id", "text", "text_pair", "label", "split")


def write_examples(path: Path, examples: Sequence[dict[str, Any]]) -> None:
    lines = (json.dumps(example, ensure_ascii=False) for example in examples)
    write_atomic(path, "".join(line + "\n" for line in lines))


def read_examples(
    path: Path,
    labels: Sequence[str] | None = None,
    pair: bool | None = None,
    allow_split: bool = False,
) -> list[dict[str, Any]]:
    """Read and check a task file. `labels` None accepts any label; `pair` None infers it from
    the first row, after which every row must agree. Errors name the file and line."""
    if not path.is_file():
        raise invalid("task file", str(path), "an existing JSON Lines file")
    examples = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            example = parse_row(f"{path}:{number}", line, labels, pair, allow_split)
            pair = "text_pair" in example
            example.setdefault("id", f"line {number}")
            examples.append(example)
    return examples


def parse_row(
    where: str, line: str, labels: Sequence[str] | None, pair: bool | None, allow_split: bool
) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise invalid(f"{where} row", line.strip()[:80], f"a JSON object ({error.msg})") from None
    require(isinstance(row, dict), f"{where} row", row, "a JSON object")
    allowed = FIELDS if allow_split else tuple(f for f in FIELDS if f != "split")
    for field in row:
        require(field in allowed, f"{where} field", field, f"one of {', '.join(allowed)}")
    for field in ("text", "label"):
        require_text(f"{where} {field}", row.get(field))
    if pair is not None:
        expected = "present (a pair task)" if pair else "absent (a single-segment task)"
        require(("text_pair" in row) == pair, f"{where} text_pair", row.get("text_pair"), expected)
    if "text_pair" in row:
        require_text(f"{where} text_pair", row["text_pair"])
    if labels is not None:
        allowed_labels = f"one of {', '.join(map(repr, labels))}"
        require(row["label"] in labels, f"{where} label", row["label"], allowed_labels)
    if "split" in row:
        allowed_splits = f"one of {', '.join(map(repr, SPLITS))}"
        require(row["split"] in SPLITS, f"{where} split", row["split"], allowed_splits)
    return row


def require_text(parameter: str, value: Any) -> None:
    require(isinstance(value, str) and bool(value.strip()), parameter, value, "a non-empty string")
