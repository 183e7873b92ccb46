"""The WordPiece tokenizer on a tiny corpus: special tokens, determinism, round trips, and
loading through transformers (no download)."""

from __future__ import annotations

import random

import pytest
import torch

from posattn import PosAttnConfigError
from posattn.data.tokenizer import SPECIAL_TOKENS, save_tokenizer, train_wordpiece

WORDS = (
    "the", "a", "whale", "ship", "sea", "captain", "harpoon", "sailed", "over", "under",
    "quietly", "loudly", "white", "great", "old", "men", "boats", "rope", "deck", "mast",
    "storm", "wind", "wave", "island", "morning", "evening", "pequod", "ahab", "starbuck",
)  # fmt: skip


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 15))) for _ in range(400)]
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    path.write_text("\n".join(lines).capitalize() + "\n")
    return path


@pytest.fixture(scope="module")
def trained(corpus_file):
    return train_wordpiece([corpus_file], vocab_size=120)


@pytest.fixture(scope="module")
def saved(trained, tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    save_tokenizer(trained, root / "tokenizer")
    return root


def test_special_tokens_come_first(trained):
    assert [trained.token_to_id(token) for token in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert trained.get_vocab_size() <= 120


def test_ids_are_canonical(trained, corpus_file):
    """Specials first, the rest sorted: one set of tokens always gets the same ids. (Which
    tokens are learned can vary on a corpus this small: the trainer breaks ties between
    equally frequent pairs in hash order.)"""
    vocab = sorted(trained.get_vocab(), key=trained.token_to_id)
    assert vocab[5:] == sorted(vocab[5:])
    again = train_wordpiece([corpus_file], vocab_size=120)
    if set(again.get_vocab()) == set(vocab):
        assert again.to_str() == trained.to_str()


def test_round_trip_lowercases_and_marks_pairs(trained):
    encoding = trained.encode("The WHALE sailed over the sea", "Ahab")
    assert encoding.tokens[0] == "[CLS]" and encoding.tokens.count("[SEP]") == 2
    assert encoding.type_ids[-2:] == [1, 1] and encoding.type_ids[0] == 0
    assert trained.decode(encoding.ids) == "the whale sailed over the sea ahab"


def test_loads_through_transformers(saved):
    from transformers import AutoTokenizer, BertTokenizerFast

    from posattn.data import load_tokenizer

    ours = load_tokenizer(saved)
    text, pair = "The captain sailed", "the white whale"
    expected = ours(text, pair)
    assert expected["token_type_ids"][-1] == 1
    for cls in (BertTokenizerFast, AutoTokenizer):
        other = cls.from_pretrained(str(saved / "tokenizer"))
        assert other(text, pair)["input_ids"] == expected["input_ids"]
    assert (ours.pad_token_id, ours.mask_token_id, ours.cls_token_id) == (0, 4, 2)
    vocab = (saved / "tokenizer" / "vocab.txt").read_text().splitlines()
    assert vocab[:5] == list(SPECIAL_TOKENS) and len(vocab) == len(ours)


def test_fill_mask_pipeline_runs_with_it(saved):
    from transformers import BertConfig, BertForMaskedLM, pipeline

    from posattn.data import load_tokenizer

    tokenizer = load_tokenizer(saved)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    model = BertForMaskedLM(config).float().eval()
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")
    predictions = fill("the captain [MASK] the whale", top_k=3)
    assert len(predictions) == 3 and all("token_str" in p for p in predictions)


def test_vocab_size_must_exceed_the_special_tokens(corpus_file):
    with pytest.raises(PosAttnConfigError, match="vocab_size=3"):
        train_wordpiece([corpus_file], vocab_size=3)


def test_load_tokenizer_says_what_to_run(tmp_path):
    from posattn.data import load_tokenizer

    with pytest.raises(PosAttnConfigError, match="posattn data prepare"):
        load_tokenizer(tmp_path)
