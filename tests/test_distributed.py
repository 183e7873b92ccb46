"""Runs over two CPU processes joined by gloo (marked `multiprocess`): `compare` with one
writer and its fine-tuning runs shared out over the ranks; FSDP2 sharding that follows the
data-parallel loss, with each positional encoding a sharding unit of its own."""

from __future__ import annotations

import json

import pytest
import torch
from distributed_fixtures import (
    compare_worker,
    launch,
    sharded_training_worker,
    written,
    zero_shot_compare_worker,
)

from posattn.cli import main

pytestmark = pytest.mark.multiprocess

# one per way the layers read an encoding: input rows (learned), a bias (diet-rel), a key
# embedding read inside each layer (shaw), a q/k transform (rope)
SHARDED = ["learned", "diet-rel", "shaw", "rope"]


def test_fsdp_follows_the_data_parallel_loss_with_encodings_sharded_on_their_own(tmp_path):
    """Sharding changes where parameters live, not what is computed: the FSDP2 run follows the
    DDP run to float32 summation order (measured: equal to the last bit on this machine;
    1e-5 relative leaves room, a wrong gather fails in the first digits or raises)."""
    result = tmp_path / "losses.json"
    launch(2, sharded_training_worker, SHARDED, 3, str(result))
    found = json.loads(result.read_text())
    assert list(found) == SHARDED
    for encoding, losses in found.items():
        assert len(losses["fsdp"]) == 3, encoding
        assert losses["fsdp"] == pytest.approx(losses["ddp"], rel=1e-5), encoding
        assert losses["fsdp"][-1] < losses["fsdp"][0], encoding  # it trains


def test_compare_on_two_ranks_writes_once_and_shares_the_fine_tuning_runs(
    tiny_data_dir, tmp_path, float32_default
):
    """Pretraining is data-parallel over both ranks; the fine-tuning runs (one task, two
    seeds) run one per rank, each alone, and give what one process gives; only rank 0
    writes result files."""
    output, logs = tmp_path / "two", tmp_path / "logs"
    logs.mkdir()
    arguments = ["compare", "--preset", "smoke", "--data-dir", str(tiny_data_dir), "--output",
                 str(output), "--encodings", "learned", "finetune.tasks=[sentiment]",
                 "finetune.seeds=[0,1]", "trainer.report_to=[]"]  # fmt: skip
    launch(2, compare_worker, arguments, str(logs))
    assert written(logs / "writes-1.jsonl") == []  # rank 1 writes no file
    names = {path.rsplit("/", 1)[-1] for path in written(logs / "writes-0.jsonl")}
    assert {"results.json", "results.md", "finetune.json", "metrics.json", "config.yaml"} <= names
    runs = {rank: written(logs / f"runs-{rank}.jsonl") for rank in (0, 1)}
    assert runs == {0: [[["sentiment"], 0.001, 0]], 1: [[["sentiment"], 0.001, 1]]}
    # each run trained alone: one process fine-tuning the same model gives the same numbers
    cell = output / "learned" / "seed0"
    two = json.loads((cell / "finetune" / "sentiment" / "finetune.json").read_text())
    torch.set_num_threads(1)
    single = tmp_path / "single"
    assert main(["finetune", str(cell / "pretrain" / "model"), "--preset", "smoke", "--data-dir",
                 str(tiny_data_dir), "--output", str(single), "finetune.tasks=[sentiment]",
                 "finetune.seeds=[0,1]", "trainer.report_to=[]"]) == 0  # fmt: skip
    one = json.loads((single / "finetune.json").read_text())
    assert one == two


def test_zero_shot_cells_are_scored_once_on_two_ranks(
    data_with_word_order, tmp_path, float32_default
):
    """Under a launcher every rank reaches each zero-shot cell; rank 0 alone scores it and
    writes zero_shot.json, rank 1 waits and reads it (it used to score every cell in full)."""
    output, logs = tmp_path / "two", tmp_path / "logs"
    logs.mkdir()
    arguments = ["compare", "--preset", "smoke", "--data-dir", str(data_with_word_order),
                 "--output", str(output), "--encodings", "learned",
                 "finetune.tasks=[word-order]", "finetune.seeds=[0]", "finetune.epochs=1",
                 "trainer.report_to=[]"]  # fmt: skip
    launch(2, zero_shot_compare_worker, arguments, str(logs))
    model = str(output / "learned" / "seed0" / "pretrain" / "model")
    assert written(logs / "scored-0.jsonl") == [[model, "word-order"]]
    assert written(logs / "scored-1.jsonl") == []
    assert written(logs / "writes-1.jsonl") == []
    cell = output / "learned" / "seed0" / "zero-shot" / "word-order" / "zero_shot.json"
    scored = json.loads(cell.read_text())["word-order"]
    assert 0 <= scored["score"] <= 100 and len(scored["per_pair"]) > 0
