"""posattn in the transformers ecosystem: save / load through the Auto classes, the Trainer and
the fill-mask pipeline, with every encoding."""

from __future__ import annotations

import pytest
import torch
from conftest import CAUSAL_ONLY, settings_of, tiny_config, word_level_tokenizer
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    Trainer,
    TrainingArguments,
    pipeline,
)

from posattn import (
    ENCODINGS,
    PosAttnConfig,
    PosAttnForMaskedLM,
    PosAttnForSequenceClassification,
    PosAttnModel,
)

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "."]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tokenizer():
    return word_level_tokenizer(WORDS)


def config_for(encoding: str, **overrides) -> PosAttnConfig:
    return tiny_config(encoding, vocab_size=len(SPECIALS) + len(WORDS), **overrides)


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize(
    ("model_class", "auto_class"),
    [
        (PosAttnModel, AutoModel),
        (PosAttnForMaskedLM, AutoModelForMaskedLM),
        (PosAttnForSequenceClassification, AutoModelForSequenceClassification),
    ],
)
def test_save_and_load_give_identical_outputs(tmp_path, encoding, model_class, auto_class):
    torch.manual_seed(0)
    segments = settings_of(encoding)[-1][1]  # in attention wherever the encoding allows it
    causal = settings_of(encoding)[-1][0]
    model = model_class(config_for(encoding, segments=segments, causal=causal, num_labels=3))
    model.eval()
    with torch.no_grad():  # every parameter away from its initial value
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    model.save_pretrained(tmp_path)
    loaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(loaded) is model_class
    assert AutoConfig.from_pretrained(tmp_path).encoding == encoding
    ids = torch.randint(0, 16, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    segments = (torch.arange(9) > 4).long().expand(2, 9)
    with torch.no_grad():
        expected = model(ids, mask, segments)[0]
        # the same weights; only the memory layout of the loaded tensors may differ
        torch.testing.assert_close(loaded(ids, mask, segments)[0], expected, rtol=0, atol=1e-12)
    for (name, a), (_, b) in zip(
        model.state_dict().items(), loaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_mlm_loss_is_cross_entropy_over_labelled_tokens():
    torch.manual_seed(1)
    model = PosAttnForMaskedLM(config_for("diet-rel")).eval()
    ids = torch.randint(5, 16, (2, 8))
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5] = 7, 9
    with torch.no_grad():
        out = model(ids, labels=labels)
        logp = model(ids).logits.log_softmax(-1)  # every position when there are no labels
        expected = -(logp[0, 2, 7] + logp[1, 5, 9]) / 2
    torch.testing.assert_close(out.loss, expected)
    # with labels, the head ran on the two labelled positions only
    torch.testing.assert_close(out.logits.log_softmax(-1), logp[[0, 1], [2, 5]])


@pytest.mark.parametrize("encoding", [e for e in ENCODINGS if e not in CAUSAL_ONLY])
def test_fill_mask_pipeline_answers_with_the_model_probabilities(tokenizer, encoding):
    torch.manual_seed(2)
    model = PosAttnForMaskedLM(config_for(encoding)).eval()
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=3)
    answers = fill("the cat [MASK] on the mat .")
    encoded = tokenizer("the cat [MASK] on the mat .", return_tensors="pt")
    with torch.no_grad():
        logits = model(encoded["input_ids"], encoded["attention_mask"]).logits
    position = encoded["input_ids"][0].tolist().index(tokenizer.mask_token_id)
    probs = logits[0, position].softmax(-1)
    top = probs.topk(3)
    assert [a["token"] for a in answers] == top.indices.tolist()
    for answer, p in zip(answers, top.values.tolist(), strict=True):
        assert answer["score"] == pytest.approx(p, rel=1e-5)


def test_trainer_fits_a_classifier(tmp_path):
    """The transformers Trainer drives a posattn model: the training loss of a two-class task
    (does the sentence mention a cat or a dog) falls from chance to near zero."""
    torch.manual_seed(3)
    torch.set_default_dtype(torch.float32)
    try:
        model = PosAttnForSequenceClassification(
            config_for("tupe-r", num_labels=2, dropout=0.0, attention_dropout=0.0)
        )
        rows = [{"input_ids": [2, 5, 6 if i % 2 else 11, 7, 3], "labels": i % 2} for i in range(64)]
        args = TrainingArguments(
            output_dir=str(tmp_path),
            per_device_train_batch_size=16,
            num_train_epochs=10,
            lr_scheduler_type="constant",
            learning_rate=1e-2,
            logging_steps=2,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=rows)
        trainer.train()
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        assert losses[0] > 0.5 and losses[-1] < 0.05
    finally:
        torch.set_default_dtype(torch.float64)


def test_loss_divides_by_the_trainers_item_count():
    """With num_items_in_batch (the Trainer's count over accumulated and distributed batches)
    the loss is the summed cross-entropy divided by that count."""
    torch.manual_seed(4)
    model = PosAttnForMaskedLM(config_for("t5")).eval()
    ids = torch.randint(5, 16, (2, 8))
    labels = torch.full_like(ids, -100)
    labels[0, 1], labels[1, 3], labels[1, 4] = 7, 8, 9
    with torch.no_grad():
        mean = model(ids, labels=labels).loss
        scaled = model(ids, labels=labels, num_items_in_batch=6).loss
    torch.testing.assert_close(scaled, mean * 3 / 6)
