"""Word order without fine-tuning (lab/pretraining/zero_shot.py): the minimal pairs, the
pseudo-log-likelihood against a hand computation, the preference rule, a position-free model's
exact ties, and the zero-shot cells of `posattn compare` (written, summarised, reused)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from lab_fixtures import WORD_ORDER_LABELS, word_order_rows
from transformers import AutoTokenizer

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.pretraining.zero_shot import (
    minimal_pairs,
    preference,
    pseudo_log_likelihood,
    score_pairs,
)
from posattn.models import PosAttnConfig, PosAttnForMaskedLM

LABELS = WORD_ORDER_LABELS


@pytest.fixture(autouse=True)
def float32(float32_default):
    yield


def indexed(rows: list[dict]) -> list[dict]:
    return [{**row, "label": LABELS.index(row["label"])} for row in rows]


def test_minimal_pairs_reorder_the_originals_the_fine_tuning_scores():
    rows = indexed(word_order_rows(40, seed=1))
    pairs = minimal_pairs(rows, LABELS, limit=None)
    originals = [r for r in rows if r["label"] == 1]
    assert [p["id"] for p in pairs] == [r["id"] for r in originals]
    for pair, row in zip(pairs, originals, strict=True):
        assert pair["original"] == row["text"]
        assert pair["reordered"] != row["text"]
        before, after = row["text"].split(), pair["reordered"].split()
        assert Counter(before) == Counter(after)  # the same words
        moved = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
        assert len(moved) == 4 and 0 not in moved and len(before) - 1 not in moved
    # A cap keeps the originals among the same fixed subset that fine-tuning tests on.
    capped = minimal_pairs(rows, LABELS, limit=10)
    assert {p["id"] for p in capped} <= {p["id"] for p in pairs}
    assert len(capped) < len(pairs)


def test_a_task_without_an_original_label_is_refused_naming_the_labels():
    with pytest.raises(PosAttnConfigError, match=r"labels=.*'original' among them"):
        minimal_pairs(indexed(word_order_rows(4, seed=1)), ["a", "b"], None)


def test_a_model_directory_without_the_masked_lm_head_is_refused(tiny_data_dir, tmp_path):
    from posattn.lab.pretraining.zero_shot import load_masked_lm
    from posattn.models import PosAttnForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_data_dir / "tokenizer"))
    classifier = PosAttnForSequenceClassification(tiny_model("learned", len(tokenizer)).config)
    classifier.save_pretrained(tmp_path / "classifier")
    with pytest.raises(PosAttnConfigError, match=r"pretrained=.*lacks head\.decoder\.bias"):
        load_masked_lm(tmp_path / "classifier")
    tiny_model("learned", len(tokenizer)).save_pretrained(tmp_path / "mlm")
    assert isinstance(load_masked_lm(tmp_path / "mlm"), PosAttnForMaskedLM)


def test_preference_counts_a_tie_half():
    assert preference(-10.0, -12.0) == 100.0
    assert preference(-12.0, -10.0) == 0.0
    assert preference(-10.0, -10.0 + 5e-5) == 50.0


def tiny_model(encoding: str, vocab_size: int) -> PosAttnForMaskedLM:
    torch.manual_seed(0)
    config = PosAttnConfig(
        vocab_size=vocab_size, d_model=16, num_layers=2, num_heads=2, ffn_dim=32, max_len=32,
        encoding=encoding, dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    return PosAttnForMaskedLM(config).eval()


def test_pseudo_log_likelihood_is_the_sum_of_each_masked_tokens_log_probability(
    tiny_data_dir,
):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_data_dir / "tokenizer"))
    model = tiny_model("learned", len(tokenizer))
    text = "the cat sat on the red mat"
    ids = tokenizer(text)["input_ids"]
    expected = 0.0
    with torch.no_grad():  # one copy at a time, through the full-logits path
        for position in range(1, len(ids) - 1):
            masked = list(ids)
            masked[position] = tokenizer.mask_token_id
            logits = model(input_ids=torch.tensor([masked])).logits[0, position]
            expected += torch.log_softmax(logits.double(), -1)[ids[position]].item()
    assert pseudo_log_likelihood(model, tokenizer, text, max_len=32) == pytest.approx(
        expected, abs=1e-5
    )


def test_a_model_without_positions_ties_every_pair_and_one_with_positions_does_not(
    tiny_data_dir,
):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_data_dir / "tokenizer"))
    pairs = minimal_pairs(indexed(word_order_rows(12, seed=2)), LABELS, None)
    none = score_pairs(tiny_model("none", len(tokenizer)), tokenizer, pairs, max_len=32)
    assert none["per_pair"] == [50.0] * len(pairs) and none["score"] == 50.0
    learned = score_pairs(tiny_model("learned", len(tokenizer)), tokenizer, pairs, max_len=32)
    assert 50.0 not in learned["per_pair"]
    assert learned["score"] == pytest.approx(sum(learned["per_pair"]) / len(pairs))


def test_compare_scores_each_pretrained_model_on_word_order_and_reuses_the_cells(
    data_with_word_order, tmp_path
):
    output = tmp_path / "compare"
    args = [
        "compare", "--preset", "smoke", "--data-dir", str(data_with_word_order),
        "--output", str(output), "--encodings", "learned,none",
        "finetune.tasks=[word-order]", "finetune.seeds=[0]", "finetune.epochs=1",
        "compare.pretrain_seeds=[0]",
    ]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((output / "results.json").read_text())
    cell = output / "none" / "seed0" / "zero-shot" / "word-order"
    scored = json.loads((cell / "zero_shot.json").read_text())["word-order"]
    assert len(scored["pairs"]) == 12  # the test split's originals
    assert scored["score"] == 50.0  # no positions: every pair ties
    assert summary["zero_shot"]["word-order"]["none"]["mean"] == 50.0
    learned = summary["results"]["learned"]["zero_shot"]["word-order"]["0"]
    assert learned["score"] == pytest.approx(sum(learned["per_pair"]) / 12)
    paired = summary["zero_shot_paired_with_learned"]["word-order"]["none"]
    assert paired["difference"] == pytest.approx(50.0 - learned["score"])
    assert "## `word-order` without fine-tuning" in (output / "results.md").read_text()
    # Every arm against the model without positions, the control, as against BERT-A.
    control = summary["paired_with_none"]["learned"]
    losses = [
        summary["results"][arm]["pretrain"]["0"]["final_eval_loss"] for arm in ("learned", "none")
    ]
    assert control["mlm_loss"]["difference"] == pytest.approx(losses[0] - losses[1])
    means = [summary["downstream"]["word-order"][arm]["mean"] for arm in ("learned", "none")]
    assert control["tasks"]["word-order"]["difference"] == pytest.approx(means[0] - means[1])
    against = summary["paired_with_learned"]["none"]["tasks"]["word-order"]["difference"]
    assert against == pytest.approx(-control["tasks"]["word-order"]["difference"])
    assert "| arm - `none` | MLM val loss | word-order |" in (output / "results.md").read_text()
    # A rerun reuses the zero-shot cell as it is.
    before = (cell / "zero_shot.json").stat().st_mtime_ns
    assert main(args) == 0
    assert (cell / "zero_shot.json").stat().st_mtime_ns == before
    # `posattn zero-shot` scores one model directory the same way.
    model = output / "learned" / "seed0" / "pretrain" / "model"
    alone = tmp_path / "alone"
    assert main([
        "zero-shot", str(model), "--preset", "smoke", "--data-dir", str(data_with_word_order),
        "--output", str(alone), "finetune.tasks=[word-order]",
    ]) == 0  # fmt: skip
    scored_alone = json.loads((alone / "zero_shot.json").read_text())["word-order"]
    assert scored_alone["per_pair"] == learned["per_pair"]
