"""The WordPiece tokenizer on a tiny corpus: special tokens, determinism, round trips, and
loading through transformers (no download)."""

from __future__ import annotations

import random

import pytest
import torch
from tokenizers import models

from posattn import PosAttnConfigError
from posattn.data.tokenizer import (
    SPECIAL_TOKENS,
    bert_pipeline,
    save_tokenizer,
    symbols_in_order,
    train_wordpiece,
)

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


def test_ids_are_canonical(trained):
    """Specials first, the rest sorted: one set of tokens always gets the same ids."""
    vocab = sorted(trained.get_vocab(), key=trained.token_to_id)
    assert vocab[:5] == list(SPECIAL_TOKENS) and vocab[5:] == sorted(vocab[5:])


def test_the_same_files_give_the_same_tokenizer_on_every_run(trained, corpus_file):
    """On this corpus the trainer alone (each '##c' piece numbered in hash order, ties broken
    by number) learned 17 different vocabularies in 20 runs; with every symbol numbered before
    training, one."""
    again = [train_wordpiece([corpus_file], vocab_size=120).to_str() for _ in range(8)]
    assert set(again) == {trained.to_str()}


def test_the_trainers_symbols_are_the_alphabet_by_code_point_then_the_inner_pieces(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("Zebra ab, éa!\nba\n")
    learner = bert_pipeline(models.WordPiece(unk_token="[UNK]"), keep_accents=True)
    # words (lowercased, punctuation split off): zebra ab , éa ! ba
    assert symbols_in_order(learner, [corpus]) == [
        "!", ",", "a", "b", "e", "r", "z", "é", "##a", "##b", "##e", "##r",
    ]  # fmt: skip
    # the symbols are not the trained tokenizer's special tokens: only the five are
    tokenizer = train_wordpiece([corpus], vocab_size=40)
    assert sorted(tokenizer.get_added_tokens_decoder()) == [0, 1, 2, 3, 4]
    assert tokenizer.encode("ab", add_special_tokens=False).tokens == ["a", "##b"]


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
    text = "the captain [MASK] the whale"
    predictions = fill(text, top_k=3)
    # The pipeline's three are the model's own top three at the [MASK], with its probabilities.
    encoded = tokenizer(text, return_tensors="pt")
    at_mask = encoded["input_ids"][0] == tokenizer.mask_token_id
    assert int(at_mask.sum()) == 1
    with torch.no_grad():
        probabilities = model(**encoded).logits[0, at_mask][0].softmax(-1)
    top = probabilities.topk(3)
    assert [p["token"] for p in predictions] == top.indices.tolist()
    expected_scores = torch.tensor([p["score"] for p in predictions], dtype=torch.float32)
    torch.testing.assert_close(expected_scores, top.values, rtol=1e-5, atol=1e-7)
    for prediction in predictions:
        assert prediction["token_str"] == tokenizer.decode([prediction["token"]])


def test_vocab_size_must_exceed_the_special_tokens(corpus_file):
    with pytest.raises(PosAttnConfigError, match="vocab_size=3"):
        train_wordpiece([corpus_file], vocab_size=3)


def test_load_tokenizer_says_what_to_run(tmp_path):
    from posattn.data import load_tokenizer

    with pytest.raises(PosAttnConfigError, match="posattn data prepare"):
        load_tokenizer(tmp_path)
