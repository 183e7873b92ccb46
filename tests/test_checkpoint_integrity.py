"""Checkpoints carry the sha256 of their files; a resume skips a damaged checkpoint, naming
the file, and goes on from the newest intact one, or stops with a clear error."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.runs.integrity import CHECKSUMS, checkpoint_problems, safetensors_problem
from posattn.lab.runs.trainer import checkpoints, last_intact_checkpoint


@pytest.fixture
def data_dir(tiny_data_dir) -> Path:
    return tiny_data_dir


@pytest.fixture(autouse=True)
def float32(float32_default):
    yield


def pretrain(data_dir: Path, output: Path, *extra: str) -> None:
    # smoke preset: 12 steps, a checkpoint every 6, the last two kept
    main(["pretrain", "--preset", "smoke", "--data-dir", str(data_dir), "--output", str(output),
          "pretrain.eval_steps=12", *extra])  # fmt: skip


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_damaged_newest_checkpoint_is_skipped_on_resume(data_dir, tmp_path):
    output = tmp_path / "run"
    pretrain(data_dir, output)
    older, newest = checkpoints(output / "checkpoints")
    assert (older.name, newest.name) == ("checkpoint-6", "checkpoint-12")
    manifest = json.loads((newest / CHECKSUMS).read_text())["files"]
    assert {"model.safetensors", "optimizer.pt", "trainer_state.json"} <= set(manifest)
    assert checkpoint_problems(newest) == []

    (output / "metrics.json").unlink()  # killed after its last checkpoint: not finished
    truncate(newest / "model.safetensors")
    with pytest.warns(UserWarning) as caught:
        pretrain(data_dir, output, "--resume")
    messages = [str(w.message) for w in caught]
    assert any(f"{newest / 'model.safetensors'}" in m and "bytes" in m for m in messages)
    assert f"resuming from {older}" in messages
    # the run went on from step 6 and wrote an intact checkpoint-12 again
    assert checkpoint_problems(newest) == []
    state = json.loads((newest / "trainer_state.json").read_text())
    assert state["global_step"] == 12

    (output / "metrics.json").unlink()
    for checkpoint in checkpoints(output / "checkpoints"):
        truncate(checkpoint / "model.safetensors")
    with warnings.catch_warnings(record=True), pytest.raises(PosAttnConfigError) as error:
        pretrain(data_dir, output, "--resume")
    message = str(error.value)
    assert "no intact checkpoint" in message and str(older / "model.safetensors") in message


def test_checkpoints_without_checksums_are_checked_by_their_safetensors_header(tmp_path):
    checkpoint = tmp_path / "checkpoints" / "checkpoint-3"
    checkpoint.mkdir(parents=True)
    save_file({"w": torch.ones(16, 16)}, checkpoint / "model.safetensors")
    assert safetensors_problem(checkpoint / "model.safetensors") is None
    assert last_intact_checkpoint(tmp_path / "checkpoints") == checkpoint
    truncate(checkpoint / "model.safetensors")
    assert "header needs" in safetensors_problem(checkpoint / "model.safetensors")
    (checkpoint / "model.safetensors").write_bytes(b"\x05")
    assert "unreadable" in safetensors_problem(checkpoint / "model.safetensors")
    refused = pytest.raises(PosAttnConfigError, match=r"checkpoint-3/model\.safetensors")
    with pytest.warns(UserWarning, match="damaged checkpoint"), refused:
        last_intact_checkpoint(tmp_path / "checkpoints")


def test_a_changed_or_missing_file_does_not_match_its_checksum(tmp_path):
    from posattn.lab.runs.integrity import write_checksums

    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    (checkpoint / "a.json").write_text("{}")
    (checkpoint / "b.bin").write_bytes(b"1234")
    write_checksums(checkpoint)
    assert checkpoint_problems(checkpoint) == []
    (checkpoint / "b.bin").write_bytes(b"1235")
    (checkpoint / "a.json").unlink()
    problems = dict((p.name, why) for p, why in checkpoint_problems(checkpoint))
    assert problems == {"a.json": "missing", "b.bin": problems["b.bin"]}
    assert "sha256" in problems["b.bin"]
