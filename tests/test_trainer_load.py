"""Resuming from a checkpoint warns about the keys that are really absent, not about the tied
output matrix that every checkpoint of a tied model leaves out by design."""

from __future__ import annotations

import pytest
import torch
import transformers.trainer
from conftest import tiny_config
from safetensors.torch import load_file, save_file
from transformers import Trainer, TrainingArguments

from posattn import PosAttnForMaskedLM
from posattn.lab.runs.trainer import AtomicCheckpointTrainer


@pytest.fixture
def warnings_logged(monkeypatch) -> list[str]:
    logged: list[str] = []
    monkeypatch.setattr(transformers.trainer.logger, "warning", lambda msg, *a: logged.append(msg))
    return logged


def resume_load(trainer_class, model, checkpoint) -> None:
    args = TrainingArguments(
        output_dir=str(checkpoint.parent / "run"), report_to="none", use_cpu=True
    )
    trainer_class(model=model, args=args)._load_from_checkpoint(str(checkpoint))


def saved(model, path):
    model.save_pretrained(path)
    return path


def test_the_tied_decoder_is_not_reported_missing(tmp_path, warnings_logged):
    torch.manual_seed(0)
    checkpoint = saved(PosAttnForMaskedLM(tiny_config("t5")), tmp_path / "checkpoint-1")
    assert "head.decoder.weight" not in load_file(checkpoint / "model.safetensors")
    resume_load(Trainer, PosAttnForMaskedLM(tiny_config("t5")), checkpoint)
    assert any("head.decoder.weight" in w for w in warnings_logged)  # the stock warning
    warnings_logged.clear()
    model = PosAttnForMaskedLM(tiny_config("t5"))
    resume_load(AtomicCheckpointTrainer, model, checkpoint)
    assert warnings_logged == []
    assert model.head.decoder.weight is model.posattn.encoder.embeddings.word.weight
    written = load_file(checkpoint / "model.safetensors")["posattn.encoder.embeddings.word.weight"]
    assert torch.equal(model.head.decoder.weight.detach(), written)


def test_a_key_really_absent_is_still_reported(tmp_path, warnings_logged):
    checkpoint = saved(PosAttnForMaskedLM(tiny_config("t5")), tmp_path / "checkpoint-1")
    weights = load_file(checkpoint / "model.safetensors")
    del weights["head.dense.bias"]
    save_file(weights, checkpoint / "model.safetensors", metadata={"format": "pt"})
    resume_load(AtomicCheckpointTrainer, PosAttnForMaskedLM(tiny_config("t5")), checkpoint)
    assert len(warnings_logged) == 1 and "['head.dense.bias']" in warnings_logged[0]


def test_an_untied_decoder_missing_from_the_checkpoint_is_reported(tmp_path, warnings_logged):
    untied = tiny_config("t5", tie_word_embeddings=False)
    checkpoint = saved(PosAttnForMaskedLM(untied), tmp_path / "checkpoint-1")
    weights = load_file(checkpoint / "model.safetensors")
    assert "head.decoder.weight" in weights  # its own matrix is saved
    del weights["head.decoder.weight"]
    save_file(weights, checkpoint / "model.safetensors", metadata={"format": "pt"})
    resume_load(AtomicCheckpointTrainer, PosAttnForMaskedLM(untied), checkpoint)
    assert len(warnings_logged) == 1 and "head.decoder.weight" in warnings_logged[0]
