"""A small prepared data directory in the layout `posattn data prepare` writes, built from
generated text so that the lab's tests run in seconds without the real packages."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import BertWordPieceTokenizer
from transformers import PreTrainedTokenizerFast

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "bird",
    "sat",
    "ran",
    "flew",
    "on",
    "under",
    "over",
    "mat",
    "tree",
    "river",
    "house",
    "king",
    "queen",
    "said",
    "went",
    "saw",
    "small",
    "big",
    "red",
    "blue",
    "green",
    "quickly",
    "slowly",
    "and",
    "but",
    "then",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def sentence(rng: random.Random, low: int = 6, high: int = 30) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_tiny_data(root: Path) -> Path:
    rng = random.Random(0)
    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    paragraphs = [sentence(rng) for _ in range(2400)]
    (corpus / "train.txt").write_text("\n".join(paragraphs[:2000]) + "\n")
    (corpus / "validation.txt").write_text("\n".join(paragraphs[2000:]) + "\n")
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(paragraphs, vocab_size=120, special_tokens=SPECIALS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=trainer._tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    tokenizer.save_pretrained(str(root / "tokenizer"))
    for name, labels, pair in (
        ("sentiment", ["negative", "positive"], False),
        ("paraphrase", ["different", "same"], True),
    ):
        task = root / "tasks" / name
        task.mkdir(parents=True)
        (task / "task.json").write_text(json.dumps({"name": name, "labels": labels, "pair": pair}))
        for split, size in (("train", 96), ("dev", 48), ("test", 48)):
            rows = []
            for _ in range(size):
                text = sentence(rng, 5, 12)
                if pair:
                    same = rng.random() < 0.5
                    rows.append({"text": text, "text_pair": text if same else sentence(rng, 5, 12),
                                 "label": labels[same]})  # fmt: skip
                else:
                    rows.append({"text": text, "label": labels["cat" in text.split()]})
            write_jsonl(task / f"{split}.jsonl", rows)
    return root


WORD_ORDER_LABELS = ["reordered", "original"]


def word_order_rows(count: int, seed: int) -> list[dict]:
    """Sentences of distinct words (so every swap changes the text), labels alternating."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        words = rng.sample(WORDS, rng.randint(8, 12))
        label = WORD_ORDER_LABELS[index % 2]
        rows.append({"id": f"s{seed}:{index}", "text": " ".join(words), "label": label})
    return rows


def add_word_order_task(root: Path) -> Path:
    """A `word-order` task of generated sentences in the prepared data directory `root`."""
    task = root / "tasks" / "word-order"
    task.mkdir(parents=True)
    (task / "task.json").write_text(
        json.dumps({"name": "word-order", "labels": WORD_ORDER_LABELS, "pair": False})
    )
    for split, size in (("train", 32), ("dev", 16), ("test", 24)):
        write_jsonl(task / f"{split}.jsonl", word_order_rows(size, seed=len(split)))
    return root
