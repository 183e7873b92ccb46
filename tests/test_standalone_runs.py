"""`posattn pretrain | finetune | zero-shot --output DIR` on a directory that holds outputs
already (lab/runs/standalone.py): a finished run of the same settings is reused, one of other
settings or of another model refused naming what differs, checkpoints are continued only with
--resume, --overwrite starts afresh; a fine-tuning computes only the runs it lacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import counted_fine_tunings

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.pretraining import finetune as finetune_module
from posattn.lab.pretraining.paired import paired_runs
from posattn.lab.pretraining.run_values import FINE_TUNING, pretraining_seed
from posattn.lab.runs.lock import LOCK_FILE


@pytest.fixture(autouse=True)
def float32(float32_default):
    yield


def pretrain_args(data_dir: Path, output: Path, *more: str) -> list[str]:
    return ["pretrain", "--preset", "smoke", "--data-dir", str(data_dir), "--output",
            str(output), *more]  # fmt: skip


def finetune_args(data_dir: Path, model: Path, output: Path, *more: str) -> list[str]:
    return ["finetune", str(model), "--preset", "smoke", "--data-dir", str(data_dir),
            "--output", str(output), "finetune.tasks=[sentiment]", *more]  # fmt: skip


@pytest.fixture(scope="module")
def pretrained(tiny_data_dir, tmp_path_factory) -> Path:
    """A finished smoke pretraining (its directory), made once for the module."""
    import torch

    torch.set_default_dtype(torch.float32)
    output = tmp_path_factory.mktemp("standalone") / "run"
    try:
        assert main(pretrain_args(tiny_data_dir, output)) == 0
    finally:
        torch.set_default_dtype(torch.float64)
    return output


def copy_run(run: Path, where: Path) -> Path:
    shutil.copytree(run, where)
    return where


@pytest.fixture
def tuned_runs(monkeypatch) -> list[tuple[float, int]]:
    """The (rate, seed) of every fine-tuning run computed (not reused) while a test runs."""
    return counted_fine_tunings(monkeypatch, finetune_module)


def test_a_finished_pretraining_is_reused_and_others_refused(
    pretrained, tiny_data_dir, tmp_path, capsys
):
    run = copy_run(pretrained, tmp_path / "run")
    weights = run / "model" / "model.safetensors"
    before = (weights.read_bytes(), weights.stat().st_mtime_ns)
    capsys.readouterr()

    assert main(pretrain_args(tiny_data_dir, run)) == 0
    assert "finished before with these settings and data" in capsys.readouterr().out
    assert (weights.read_bytes(), weights.stat().st_mtime_ns) == before  # not trained again
    assert not (run / LOCK_FILE).exists()

    with pytest.raises(PosAttnConfigError) as error:
        main(pretrain_args(tiny_data_dir, run, "pretrain.seed=7"))
    assert "pretrain.seed: 0 -> 7" in str(error.value) and "--overwrite" in str(error.value)
    assert weights.read_bytes() == before[0]

    assert main(pretrain_args(tiny_data_dir, run, "pretrain.seed=7", "--overwrite")) == 0
    stage = json.loads((run / "stage.json").read_text())
    assert stage["settings"]["pretrain"]["seed"] == 7
    assert weights.read_bytes() != before[0]

    # its fine-tuning records the model's seed, so `posattn paired` pairs it with seed 7 alone
    tuned = [tmp_path / "tuned7", tmp_path / "tuned0"]
    for model, output in zip((run / "model", pretrained / "model"), tuned, strict=True):
        assert main(finetune_args(tiny_data_dir, model, output, "finetune.seeds=[0]")) == 0
    assert [pretraining_seed(t, FINE_TUNING) for t in tuned] == [7, 0]
    with pytest.raises(PosAttnConfigError, match="this run's model has seed 0"):
        paired_runs([f"a={tuned[0]}", f"b={tuned[1]}"])


def test_checkpoints_without_a_result_are_continued_only_with_resume(
    pretrained, tiny_data_dir, tmp_path
):
    run = copy_run(pretrained, tmp_path / "run")
    (run / "metrics.json").unlink()  # a run killed after its last checkpoint
    with pytest.raises(PosAttnConfigError) as error:
        main(pretrain_args(tiny_data_dir, run))
    message = str(error.value)
    assert "checkpoint-12" in message and "--resume" in message and "--overwrite" in message

    with pytest.raises(PosAttnConfigError) as error:
        main(pretrain_args(tiny_data_dir, run, "--resume", "--overwrite"))
    assert "--overwrite=True" in str(error.value) and "--resume" in str(error.value)

    assert main(pretrain_args(tiny_data_dir, run, "--resume")) == 0
    assert (run / "metrics.json").is_file()


def test_a_killed_run_of_other_settings_is_not_resumed_by_another(
    pretrained, tiny_data_dir, tmp_path
):
    """Before, the second command trained beside the first one's checkpoints; a --resume
    after it was killed would have taken the first run's newest."""
    run = copy_run(pretrained, tmp_path / "run")
    (run / "metrics.json").unlink()
    with pytest.raises(PosAttnConfigError, match=r"pretrain\.seed: 0 -> 3"):
        main(pretrain_args(tiny_data_dir, run, "pretrain.seed=3", "--resume"))
    with pytest.raises(PosAttnConfigError, match=r"pretrain\.seed: 0 -> 3"):
        main(pretrain_args(tiny_data_dir, run, "pretrain.seed=3"))


def test_a_fine_tuning_given_more_seeds_runs_only_the_new_ones(
    pretrained, tiny_data_dir, tmp_path, tuned_runs, capsys
):
    model, output = pretrained / "model", tmp_path / "tuned"
    assert main(finetune_args(tiny_data_dir, model, output, "finetune.seeds=[0]")) == 0
    assert tuned_runs == [(1e-3, 0)]
    first = json.loads((output / "finetune.json").read_text())["sentiment"]["runs"]["0.001"][0]

    assert main(finetune_args(tiny_data_dir, model, output, "finetune.seeds=[0]")) == 0
    assert "finished before" in capsys.readouterr().out and tuned_runs == [(1e-3, 0)]

    assert main(finetune_args(tiny_data_dir, model, output, "finetune.seeds=[0,1]")) == 0
    assert tuned_runs == [(1e-3, 0), (1e-3, 1)]  # seed 0 kept
    result = json.loads((output / "finetune.json").read_text())["sentiment"]
    assert result["runs"]["0.001"][0] == first
    assert len(result["test_by_seed"]) == 2
    stage = json.loads((output / "stage.json").read_text())
    assert stage["settings"]["finetune"]["seeds"] == [0, 1]

    # killed after its first run: the rerun computes the second alone
    (output / "finetune.json").unlink()
    shutil.rmtree(output / "runs" / "sentiment" / "lr0.001-seed1")
    assert main(finetune_args(tiny_data_dir, model, output, "finetune.seeds=[0,1]")) == 0
    assert tuned_runs[2:] == [(1e-3, 1)]

    # a run's result of another identity (written by other settings) is computed again
    kept = output / "runs" / "sentiment" / "lr0.001-seed0" / "result.json"
    record = json.loads(kept.read_text())
    kept.write_text(json.dumps({**record, "identity": "other"}))
    (output / "finetune.json").unlink()
    assert main(finetune_args(tiny_data_dir, model, output, "finetune.seeds=[0,1]")) == 0
    assert tuned_runs[3:] == [(1e-3, 0)]


def test_a_fine_tuning_of_other_settings_or_another_model_is_refused(
    pretrained, tiny_data_dir, tmp_path, tuned_runs
):
    model, output = pretrained / "model", tmp_path / "tuned"
    assert main(finetune_args(tiny_data_dir, model, output, "finetune.seeds=[0]")) == 0
    with pytest.raises(PosAttnConfigError, match=r"finetune\.epochs: 1 -> 2"):
        main(finetune_args(tiny_data_dir, model, output, "finetune.seeds=[0,1]",
                           "finetune.epochs=2"))  # fmt: skip

    # the same settings, another model: told apart by the model's digest alone
    other = copy_run(pretrained / "model", tmp_path / "other-model")
    (other / "README.md").write_text("changed\n")
    with pytest.raises(PosAttnConfigError) as error:
        main(finetune_args(tiny_data_dir, other, output, "finetune.seeds=[0]"))
    assert "data.pretrained" in str(error.value) and "another pretrained model" in str(error.value)
    assert tuned_runs == [(1e-3, 0)]

    assert main(finetune_args(tiny_data_dir, other, output, "finetune.seeds=[0]",
                              "--overwrite")) == 0  # fmt: skip
    assert tuned_runs == [(1e-3, 0), (1e-3, 0)]


def test_a_zero_shot_score_is_reused_and_another_models_refused(
    pretrained, data_with_word_order, tmp_path, capsys, monkeypatch
):
    from posattn.lab.pretraining import zero_shot

    scored = []
    original = zero_shot.score_model
    monkeypatch.setattr(
        zero_shot, "score_model", lambda *args: scored.append(args[1]) or original(*args)
    )
    model, output = pretrained / "model", tmp_path / "zero-shot"
    argv = ["zero-shot", str(model), "--preset", "smoke", "--data-dir",
            str(data_with_word_order), "--output", str(output)]  # fmt: skip
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert scored == ["word-order"] and "word-order: the written order preferred" in first

    assert main(argv) == 0
    again = capsys.readouterr().out
    assert scored == ["word-order"] and "finished before" in again
    assert first.splitlines()[-1] == again.splitlines()[-1]  # the same score, read back

    other = copy_run(model, tmp_path / "other-model")
    (other / "README.md").write_text("changed\n")
    with pytest.raises(PosAttnConfigError, match=r"data\.pretrained"):
        main([argv[0], str(other), *argv[2:]])


def test_a_finished_translation_run_is_reused_and_others_refused(tmp_path, capsys):
    from translation_fixtures import build_toy_translation

    data = build_toy_translation(tmp_path / "data")
    output = tmp_path / "run"
    argv = ["translate", "train", "--preset", "smoke", "--data-dir", str(data), "--output",
            str(output), "data.pairs=toy", "train.steps=4", "train.eval_steps=4",
            "train.save_steps=4", "decode.splits=[dev]"]  # fmt: skip
    assert main(argv) == 0
    first = capsys.readouterr().out
    weights = output / "model" / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert "finished before with these settings and data" in again
    assert weights.stat().st_mtime_ns == before
    assert first.splitlines()[-1] == again.splitlines()[-1]  # the same scores, read back
    with pytest.raises(PosAttnConfigError, match=r"train\.seed: 0 -> 1"):
        main([*argv, "train.seed=1"])


def test_a_comparisons_fine_tuning_cell_given_more_seeds_runs_only_the_new_ones(
    tiny_data_dir, tmp_path, tuned_runs
):
    output = tmp_path / "compare"
    base = ["compare", "--preset", "smoke", "--data-dir", str(tiny_data_dir), "--output",
            str(output), "--encodings", "learned", "finetune.tasks=[sentiment]"]  # fmt: skip
    assert main([*base, "finetune.seeds=[0]"]) == 0
    cell = output / "learned" / "seed0"
    weights = cell / "pretrain" / "model" / "model.safetensors"
    trained = weights.stat().st_mtime_ns
    assert tuned_runs == [(1e-3, 0)]

    assert main([*base, "finetune.seeds=[0,1]"]) == 0
    assert tuned_runs == [(1e-3, 0), (1e-3, 1)]
    assert weights.stat().st_mtime_ns == trained
    tuned = cell / "finetune" / "sentiment"
    assert json.loads((tuned / "stage.json").read_text())["settings"]["finetune"]["seeds"] == [0, 1]
    result = json.loads((tuned / "finetune.json").read_text())["sentiment"]
    assert len(result["test_by_seed"]) == 2
    # another setting than the lists is still refused
    with pytest.raises(PosAttnConfigError, match=r"finetune\.epochs: 1 -> 2"):
        main([*base, "finetune.seeds=[0,1]", "finetune.epochs=2"])


def test_a_directory_that_is_not_a_run_is_neither_written_nor_deleted(tiny_data_dir, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    with pytest.raises(PosAttnConfigError, match=r"without a stage\.json"):
        main(pretrain_args(tiny_data_dir, folder))
    with pytest.raises(PosAttnConfigError, match="not known to be a posattn run"):
        main(pretrain_args(tiny_data_dir, folder, "--overwrite"))
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
