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


def test_an_old_causal_checkpoint_is_saved_again_under_todays_names(tmp_path):
    from safetensors.torch import load_file

    model = AutoModelForCausalLM.from_pretrained(SAVED / "causal-lm-t5")
    model.save_pretrained(tmp_path)
    names = set(load_file(tmp_path / "model.safetensors"))
    assert "posattn.encoder.embeddings.word.weight" in names
    assert not any(n.startswith("posattn.") and not n.startswith("posattn.encoder.") for n in names)
    again, info = AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        logits = again.eval()(input_ids=IDS).logits.flatten()[:12]
    expected = torch.tensor(EXPECTED["causal-lm-t5"], dtype=torch.float32)
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-6)
