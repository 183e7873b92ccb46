"""`compare --adopt RUN_DIR`: a finished standalone pretraining taken in as the cell of the same
settings (linked, not retrained), and every run that is not that refused before anything is
linked."""

from __future__ import annotations

import json
import os

import pytest

from posattn import PosAttnConfigError
from posattn.cli import main


@pytest.fixture(autouse=True)
def float32(float32_default):
    yield


def pretrain(data_dir, output, *overrides):
    args = ["pretrain", "--preset", "smoke", "--data-dir", str(data_dir), "--output",
            str(output), *overrides]  # fmt: skip
    assert main(args) == 0
    return output


def compare_args(data_dir, output, *extra):
    return ["compare", "--preset", "smoke", "--data-dir", str(data_dir), "--output",
            str(output), "--encodings", "learned,t5", "finetune.tasks=[sentiment]",
            "finetune.seeds=[0]", *extra]  # fmt: skip


def test_a_finished_run_becomes_its_cell_and_is_not_trained_again(tiny_data_dir, tmp_path):
    run = pretrain(tiny_data_dir, tmp_path / "t5-run", "model.encoding=t5")
    output = tmp_path / "compare"
    assert main(compare_args(tiny_data_dir, output, "--adopt", str(run))) == 0
    cell = output / "t5" / "seed0" / "pretrain"
    for name in ("metrics.json", "stage.json", "model/model.safetensors"):
        assert os.path.samefile(run / name, cell / name)  # the run's very files
    results = json.loads((output / "results.json").read_text())
    # 4 cells (2 arms x pretrain + finetune), the adopted one counted as reused
    assert results["context"]["cells"] == {"total": 4, "reused": 1}
    metrics = json.loads((run / "metrics.json").read_text())
    assert (
        results["results"]["t5"]["pretrain"]["0"]["final_eval_loss"] == (metrics["final_eval_loss"])
    )
    # Adopting again is a no-op; the comparison reruns nothing.
    stamp = (cell / "metrics.json").stat().st_mtime_ns
    assert main(compare_args(tiny_data_dir, output, "--adopt", str(run))) == 0
    assert (cell / "metrics.json").stat().st_mtime_ns == stamp
    assert not list(output.glob("t5/seed0/.*adopting"))


def test_runs_that_are_not_a_cell_are_refused_before_anything_is_linked(tiny_data_dir, tmp_path):
    output = tmp_path / "compare"
    other = pretrain(tiny_data_dir, tmp_path / "other", "model.encoding=t5", "pretrain.steps=6")
    with pytest.raises(PosAttnConfigError) as error:
        main(compare_args(tiny_data_dir, output, "--adopt", str(other)))
    message = str(error.value)
    assert str(other) in message and "pretrain.steps: 6 -> 12" in message
    assert "t5" in message and "seed0" in message  # the nearest cell is named
    assert not (output / "t5").exists()
    # a run of seed 1 where the comparison runs seed 0 only
    seed1 = pretrain(tiny_data_dir, tmp_path / "seed1", "model.encoding=t5", "pretrain.seed=1")
    with pytest.raises(PosAttnConfigError, match=r"pretrain\.seed: 1 -> 0"):
        main(compare_args(tiny_data_dir, output, "--adopt", str(seed1)))
    # an unfinished run: the right settings, no metrics.json yet
    run = pretrain(tiny_data_dir, tmp_path / "t5-run", "model.encoding=t5")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "stage.json").write_text((run / "stage.json").read_text())
    with pytest.raises(PosAttnConfigError, match="not finished"):
        main(compare_args(tiny_data_dir, output, "--adopt", str(unfinished)))
    # two runs of one cell
    twin = tmp_path / "twin"
    os.symlink(run, twin)
    with pytest.raises(PosAttnConfigError, match="are all runs of the cell"):
        main(compare_args(tiny_data_dir, output, "--adopt", str(run), "--adopt", str(twin)))
    # not a run directory
    with pytest.raises(PosAttnConfigError, match=r"no stage\.json"):
        main(compare_args(tiny_data_dir, output, "--adopt", str(tmp_path)))
    assert not (output / "t5").exists()
    # a cell that holds something else is not replaced
    cell = output / "t5" / "seed0" / "pretrain"
    cell.mkdir(parents=True)
    (cell / "notes.txt").write_text("mine")
    with pytest.raises(PosAttnConfigError, match="already holds other or unfinished"):
        main(compare_args(tiny_data_dir, output, "--adopt", str(run)))
    assert (cell / "notes.txt").read_text() == "mine"


def test_adopt_is_refused_where_the_task_has_no_pretraining_cells(tmp_path):
    with pytest.raises(PosAttnConfigError, match=r"--adopt=.*translate combine"):
        main(["compare", "--task", "translation", "--adopt", str(tmp_path)])
