"""A toy translation set in the layout `posattn data prepare --translation` writes: the target
translates every source word through a fixed dictionary ("the cat sat" -> "el gato sentó"), so
copying the source scores zero BLEU while a model that learns the word map scores high."""

from __future__ import annotations

import json
import random
from pathlib import Path

from posattn.data.parallel_files import write_parallel
from posattn.data.translation_tokenizer import save_translation_tokenizer, train_shared_bpe

DICTIONARY = {
    "the": "el",
    "cat": "gato",
    "dog": "perro",
    "bird": "ave",
    "sat": "sentó",
    "ran": "corrió",
    "on": "sobre",
    "under": "bajo",
    "mat": "estera",
    "tree": "árbol",
    "red": "rojo",
    "big": "grande",
}


def toy_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = [rng.choice(list(DICTIONARY)) for _ in range(rng.randint(3, 6))]
        pairs.append((" ".join(words), " ".join(DICTIONARY[w] for w in words)))
    return pairs


def build_toy_translation(root: Path, name: str = "toy") -> Path:
    folder = root / "translation" / name
    splits = {"train": toy_pairs(1200, 0), "dev": toy_pairs(24, 1), "test": toy_pairs(24, 2)}
    for split, pairs in splits.items():
        write_parallel(folder / f"{split}.src", folder / f"{split}.tgt", pairs)
    texts = [text for pair in splits["train"] for text in pair]
    save_translation_tokenizer(train_shared_bpe(texts, vocab_size=120), folder / "tokenizer")
    info = {"name": name, "pairs": {split: len(pairs) for split, pairs in splits.items()}}
    (folder / "pairs.json").write_text(json.dumps(info))
    return root
