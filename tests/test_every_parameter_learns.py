"""One training step gives every parameter a gradient, for every encoding and the papers'
ablations: what DistributedDataParallel needs under its default find_unused_parameters=False,
where a parameter no forward reads fails the next step. BERT-Ad's empty [CLS] untie rows,
read by no forward, did so."""

from __future__ import annotations

import pytest
import torch
from conftest import settings_of, tiny_config, tiny_seq2seq_config
from safetensors.torch import load_file, save_file

from posattn import (
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnForSequenceClassification,
)
from posattn.encodings import ENCODINGS

# Options that add, drop or share parameters, each beside the encoding's defaults.
OPTION_CASES = [
    ("tupe-a", {"untie_cls": False}),
    ("tupe-r", {"untie_cls": False}),
    ("bert-ad", {"scale_multiple": 2.0}),
    ("deberta", {"terms": ("c2p",)}),
    ("deberta", {"terms": ("p2c",)}),
    ("deberta", {"share_att_key": False}),
    ("shaw", {"values": True}),
    ("diet-abs", {"sharing": "none"}),
    ("diet-abs", {"sharing": "head"}),
    ("diet-rel", {"sharing": "layer"}),
    ("diet-rel", {"sharing": "head"}),
    ("linformer", {"share_kv": True}),
    ("linformer", {"input_positions": False}),
    ("diet-abs-lin", {"share_kv": True}),
]
# Each with every (causal, segments) setting its encoding supports.
CASES = [
    (name, options, causal, segments)
    for name, options in [(name, {}) for name in ENCODINGS] + OPTION_CASES
    for causal, segments in settings_of(name)
]


def batch():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 30, (2, 10), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    segments = (torch.arange(10) >= 5).long().expand(2, 10)
    return ids, mask, segments


def without_gradient(model, **inputs) -> list[str]:
    model.train()
    model(**inputs).loss.backward()
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]


@pytest.mark.parametrize(("encoding", "options", "causal", "segments"), CASES, ids=str)
def test_a_training_step_gives_every_parameter_a_gradient(encoding, options, causal, segments):
    torch.manual_seed(0)
    config = tiny_config(encoding, causal=causal, segments=segments, encoding_options=options)
    model = (PosAttnForCausalLM if causal else PosAttnForMaskedLM)(config)
    ids, mask, segment_ids = batch()
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segment_ids}
    assert without_gradient(model, labels=ids, **inputs) == []


@pytest.mark.parametrize("encoding", ["bert-ad", "tupe-a", "t5"])
def test_the_other_model_classes_give_every_parameter_a_gradient(encoding):
    ids, mask, _ = batch()
    torch.manual_seed(0)
    classifier = PosAttnForSequenceClassification(tiny_config(encoding, num_labels=3))
    labels = torch.tensor([0, 2])
    assert without_gradient(classifier, input_ids=ids, attention_mask=mask, labels=labels) == []
    causal = PosAttnForCausalLM(tiny_config(encoding, causal=True, segments="none"))
    assert without_gradient(causal, input_ids=ids, attention_mask=mask, labels=ids) == []
    seq2seq = PosAttnForSeq2SeqLM(tiny_seq2seq_config(encoding))
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": ids[:, :7]}
    assert without_gradient(seq2seq, **inputs) == []


WITHOUT_UNTIE_ROWS = [("bert-ad", {}), ("tupe-a", {"untie_cls": False})]


@pytest.mark.parametrize(("encoding", "options"), WITHOUT_UNTIE_ROWS)
def test_a_checkpoint_saved_with_empty_untie_rows_loads_with_its_values(
    encoding, options, tmp_path
):
    """Checkpoints from before held those rows as a [0, d] tensor: they load, the tensor
    reported unused, and the model gives the saved model's outputs."""
    torch.manual_seed(0)
    model = PosAttnForMaskedLM(tiny_config(encoding, encoding_options=options)).eval()
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    key = "posattn.encoder.encoding.positions.special"
    tensors[key] = torch.empty(0, model.config.d_model)
    save_file(tensors, weights, metadata={"format": "pt"})
    loaded, info = PosAttnForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]
    assert key in info["unexpected_keys"]
    ids, mask, segments = batch()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, token_type_ids=segments).logits
        got = loaded.eval()(ids, attention_mask=mask, token_type_ids=segments).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
