"""Models saved by posattn before the package moved into `models/` still load, through the
Auto classes, with every weight and the same logits (fixtures written by main at f116cc9)."""

import json
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)

import posattn  # noqa: F401 - registers the Auto classes

SAVED = Path(__file__).parent / "fixtures" / "saved_before_layout"
EXPECTED = json.loads((SAVED / "expected_logits.json").read_text())
IDS = torch.tensor([[2, 5, 7, 9, 11, 3]])

CASES = {
    "masked-lm-tupe-r": (AutoModelForMaskedLM, {"input_ids": IDS}),
    "classification-diet-abs": (AutoModelForSequenceClassification, {"input_ids": IDS}),
    "causal-lm-t5": (AutoModelForCausalLM, {"input_ids": IDS}),
    "seq2seq-shaw": (AutoModelForSeq2SeqLM, {"input_ids": IDS, "decoder_input_ids": IDS[:, :4]}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_checkpoint_saved_before_the_move_loads_with_the_same_logits(name):
    auto, inputs = CASES[name]
    model, info = auto.from_pretrained(SAVED / name, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        logits = model.eval()(**inputs).logits.flatten()[:12]
    torch.testing.assert_close(
        logits, torch.tensor(EXPECTED[name], dtype=torch.float32), rtol=1e-5, atol=1e-6
    )
