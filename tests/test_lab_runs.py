"""The lab end to end on a small prepared data directory: compare, distributed training,
killing and resuming a real run, and errors raised before any training."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.pretraining.failed_runs import not_above_majority


@pytest.fixture
def data_dir(tiny_data_dir) -> Path:
    return tiny_data_dir


@pytest.fixture(autouse=True)
def float32(float32_default):
    yield


def posattn_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "posattn.cli", *args]


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def tensorboard_scalars(run_dir: Path, tag: str = "train/loss") -> list[tuple[int, float]]:
    """(step, value) of one tag over every TensorBoard event file of a run directory."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = []
    for events in sorted((run_dir / "tensorboard").glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        if tag in accumulator.Tags()["scalars"]:
            found += [(e.step, e.value) for e in accumulator.Scalars(tag)]
    return found


def test_compare_smoke_writes_table_results_claims_and_plots(data_dir, tmp_path):
    output = tmp_path / "compare"
    assert main(["compare", "--preset", "smoke", "--data-dir", str(data_dir),
                 "--output", str(output), "compare.paired_with=[tupe-r]"]) == 0  # fmt: skip
    summary = json.loads((output / "results.json").read_text())
    results = summary["results"]
    assert list(results) == ["learned", "tupe-r", "random-init"]
    for arm, r in results.items():
        pretrained = r["pretrain"]["0"]
        if arm == "random-init":
            assert pretrained["steps"] == 0 and pretrained["final_eval_loss"] is None
        else:
            assert 0 < pretrained["final_eval_loss"] < 10 and pretrained["steps"] == 12
        for task in ("sentiment", "paraphrase"):
            scores = r["finetune"][task]["0"]["test_by_seed"]
            assert len(scores) == 2 and all(0 <= s <= 1 for s in scores)
            runs = r["finetune"][task]["0"]["runs"]
            for run in next(iter(runs.values())):  # which test examples each run got right
                correct = run["test_correct"]
                assert correct and set(correct) <= {0, 1}
                assert sum(correct) / len(correct) == pytest.approx(run["test"])
                assert -1 <= run["test_matthews"] <= 1 and 0 <= run["test_f1_macro"] <= 1
        model = output / arm / "seed0" / "pretrain" / "model" / "model.safetensors"
        assert model.is_file()
        card = ModelCard.load(model.parent / "README.md")
        encoding = "learned" if arm == "random-init" else arm.split("/")[0]
        assert encoding in card.data.tags and card.data.library_name == "posattn"
        if arm != "random-init":
            assert f"| final_eval_loss | {pretrained['final_eval_loss']} |" in card.text
    for task in ("sentiment", "paraphrase"):
        # one pretrained model, its two fine-tuning runs pooled: one run, no interval over it
        downstream = summary["downstream"][task]["tupe-r"]
        tests = results["tupe-r"]["finetune"][task]["0"]["test_by_seed"]
        assert downstream["runs"] == 1 and downstream["interval"] is None
        assert downstream["mean"] == pytest.approx(100 * sum(tests) / len(tests))
        baselines = summary["baselines"][task]
        assert 0 <= baselines["majority"] <= 100 and 0 <= baselines["bag_of_words"] <= 100
        assert baselines["random_init"] == summary["downstream"][task]["random-init"]["mean"]
        # every fine-tuning run not above the majority class is listed, and only those
        expected = []
        for arm, r in results.items():
            tuned = r["finetune"][task]["0"]
            best = tuned["runs"][str(tuned["learning_rate"])]
            for seed, run in zip((0, 1), best, strict=True):
                if not_above_majority(run["test_correct"], baselines["majority"] / 100):
                    expected.append((arm, seed))
        listed = summary["failed_finetuning"][task]
        assert [(r["arm"], r["finetune_seed"]) for r in listed] == expected
    paired = summary["paired_with_learned"]["tupe-r"]
    losses = [
        r["pretrain"]["0"]["final_eval_loss"] for r in (results["tupe-r"], results["learned"])
    ]
    assert paired["mlm_loss"]["difference"] == pytest.approx(losses[0] - losses[1])
    for task in ("sentiment", "paraphrase"):
        means = [summary["downstream"][task][arm]["mean"] for arm in ("tupe-r", "learned")]
        assert paired["tasks"][task]["difference"] == pytest.approx(means[0] - means[1])
    # compare.paired_with: every other arm against tupe-r, the learned pairing turned round
    against = summary["paired_with_arms"]["tupe-r"]["learned"]
    assert against["mlm_loss"]["difference"] == pytest.approx(-paired["mlm_loss"]["difference"])
    for task in ("sentiment", "paraphrase"):
        turned = -paired["tasks"][task]["difference"]
        assert against["tasks"][task]["difference"] == pytest.approx(turned)
    assert set(summary["paired_with_arms"]["tupe-r"]) == {"learned", "random-init"}
    verdicts = {claim["verdict"] for claim in summary["claims"]}
    assert verdicts <= {"holds", "does not hold", "inconclusive"} and summary["claims"]
    table = (output / "results.md").read_text()
    assert "| `tupe-r` |" in table and "claims" in table and "bag of words" in table
    assert "## Paired against `tupe-r`" in table and "| arm - `tupe-r` |" in table
    assert "## Fine-tuning runs not told from the majority class" in table
    assert (output / "validation_loss.png").stat().st_size > 1000
    # the Trainer's TensorBoard callback logged the same losses into the run directory
    pretrained = output / "learned" / "seed0" / "pretrain"
    logged = tensorboard_scalars(pretrained)
    expected = results["learned"]["pretrain"]["0"]["train_loss"]
    assert [s for s, _ in logged] == [s for s, _ in expected]
    assert [v for _, v in logged] == pytest.approx([v for _, v in expected], rel=1e-6)
    tuned = output / "learned" / "seed0" / "finetune" / "sentiment" / "runs" / "sentiment"
    assert tensorboard_scalars(next(tuned.iterdir()), "eval/dev_accuracy")
    # posattn report renders the run as one page: its table and figures, no checkpoint files
    assert main(["report", str(output)]) == 0
    page = (output / "report.html").read_text()
    assert "<td><code>tupe-r</code></td>" in page and 'src="validation_loss.png"' in page
    assert "checkpoint-" not in page and "tensorboard" not in page


def test_a_comparison_of_pretraining_alone_writes_its_losses_and_claims(data_dir, tmp_path):
    """finetune.tasks=[]: the MLM losses and the pretraining claims, no downstream figure
    (it raised "no downstream task to plot" once the pretraining was done)."""
    output = tmp_path / "compare"
    argv = ["compare", "--preset", "smoke", "--data-dir", str(data_dir), "--output",
            str(output), "--encodings", "learned,tupe-r", "finetune.tasks=[]"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((output / "results.json").read_text())
    assert summary["downstream"] == {}
    assert all(0 < r["pretrain"]["0"]["final_eval_loss"] < 10 for r in summary["results"].values())
    verdicts = {c["id"]: c for c in summary["claims"]}
    assert "needs downstream tasks" in verdicts["diet-abs>input"]["reason"]
    assert "final validation loss" in verdicts["tupe-lower-mlm-loss:tupe-r"]["reason"]
    assert (output / "validation_loss.png").is_file() and not (output / "downstream.png").exists()
    assert "(no fine-tuning tasks in this run)" in (output / "results.md").read_text()


def test_compare_cells_in_two_worker_processes_match_one_process(data_dir, tmp_path):
    base = ["compare", "--preset", "smoke", "--data-dir", str(data_dir), "--encodings",
            "learned", "finetune.tasks=[sentiment]", "finetune.seeds=[0]",
            "compare.pretrain_seeds=[0,1]"]  # fmt: skip
    assert main([*base, "--output", str(tmp_path / "one"), "compare.workers=1"]) == 0
    assert main([*base, "--output", str(tmp_path / "two"), "compare.workers=2"]) == 0
    one, two = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two"))
    for seed in ("0", "1"):
        first, second = (r["results"]["learned"]["pretrain"][seed] for r in (one, two))
        assert first["final_eval_loss"] == pytest.approx(second["final_eval_loss"], rel=1e-4)
    # one torch thread in a worker against this process's threads: sums in another order may
    # move a borderline test example, not more (scores in %)
    tested = len(
        one["results"]["learned"]["finetune"]["sentiment"]["0"]["runs"]["0.001"][0]["test_correct"]
    )
    first, second = (r["downstream"]["sentiment"]["learned"]["mean"] for r in (one, two))
    assert first == pytest.approx(second, abs=100 / tested + 1e-9)


def pretrain_args(data_dir: Path, output: Path, *overrides: str) -> list[str]:
    return ["pretrain", "--preset", "smoke", "--data-dir", str(data_dir), "--output",
            str(output), "pretrain.logging_steps=1", *overrides]  # fmt: skip


def test_two_processes_follow_the_single_process_loss_trajectory(data_dir, tmp_path):
    """torchrun with 2 CPU processes (gloo) and the same global batch follows the same loss
    curve: the same examples form each global batch (seeded order, per-example masks) and
    gradients are averaged, so only float32 summation order differs (about 1e-6 relative per
    step, grown by a dozen Adam steps): 1e-3 relative is a bound with room, while a wrong
    batch split changes the loss in the first digits."""
    overrides = ("model.encoding=diet-rel", "pretrain.batch_size=8")
    single, double = tmp_path / "single", tmp_path / "double"
    subprocess.run(posattn_command(*pretrain_args(data_dir, single, *overrides)),
                   check=True, env=environment(), capture_output=True)  # fmt: skip
    # --standalone: the agent binds a port of the system's choosing for its store
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", "2", "-m", "posattn.cli"]  # fmt: skip
    done = subprocess.run(torchrun + pretrain_args(data_dir, double, *overrides),
                          env=environment(), capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    one = json.loads((single / "metrics.json").read_text())["train_loss"]
    two = json.loads((double / "metrics.json").read_text())["train_loss"]
    assert [s for s, _ in one] == [s for s, _ in two] == list(range(1, 13))
    for (_, a), (_, b) in zip(one, two, strict=True):
        assert b == pytest.approx(a, rel=1e-3)


def test_a_killed_run_resumes_to_the_same_end(data_dir, tmp_path):
    overrides = ("model.encoding=tupe-a", "pretrain.steps=40", "pretrain.save_steps=5",
                 "pretrain.eval_steps=40")  # fmt: skip
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(posattn_command(*pretrain_args(data_dir, whole, *overrides)),
                   check=True, env=environment(), capture_output=True)  # fmt: skip
    process = subprocess.Popen(posattn_command(*pretrain_args(data_dir, killed, *overrides)),
                               env=environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    checkpoints = killed / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and not list(checkpoints.glob("checkpoint-1[05]")):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "metrics.json").exists(), "the run finished before it was killed"
    survived = sorted(p.name for p in checkpoints.glob("checkpoint-*"))
    assert survived and all((checkpoints / c / "trainer_state.json").is_file() for c in survived)
    subprocess.run(posattn_command(*pretrain_args(data_dir, killed, *overrides), "--resume"),
                   check=True, env=environment(), capture_output=True)  # fmt: skip
    a = load_file(whole / "model" / "model.safetensors")
    b = load_file(killed / "model" / "model.safetensors")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6)
    # TensorBoard: the killed process's events and the resumed one's cover every step
    assert {step for step, _ in tensorboard_scalars(killed)} == set(range(1, 41))
    end = json.loads((whole / "metrics.json").read_text())["final_eval_loss"]
    assert json.loads((killed / "metrics.json").read_text())["final_eval_loss"] == pytest.approx(
        end, rel=1e-5
    )


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (["pretrain", "--resume"], ["--resume", "none was found"]),
        (["compare", "finetune.tasks=[sentimnt]"], ["task='sentimnt'", "sentiment"]),
        (["compare", "pretrain.stpes=3"], ["pretrain.stpes", "pretrain.steps"]),
        (["compare", "--preset", "fast"], ["--preset='fast'", "smoke"]),
        (["compare", "finetune.max_len=64"], ["finetune.max_len=64", "model.max_len=32"]),
        (
            ["compare", "encodings=[learned,sinusoidal/positional-lr-x10]"],
            ["encodings='sinusoidal/positional-lr-x10'", "'sinusoidal' has none"],
        ),
    ],
)
def test_bad_runs_fail_before_training(data_dir, tmp_path, arguments, fragments):
    command, *rest = arguments
    preset = [] if "--preset" in rest else ["--preset", "smoke"]
    with pytest.raises(PosAttnConfigError) as error:
        main([command, *preset, "--data-dir", str(data_dir), "--output", str(tmp_path), *rest])
    for fragment in fragments:
        assert fragment in str(error.value)
    assert not (tmp_path / "learned").exists()


def test_missing_data_dir_says_how_to_prepare(tmp_path):
    with pytest.raises(PosAttnConfigError, match="posattn data prepare"):
        main(["pretrain", "--preset", "smoke", "--data-dir", str(tmp_path / "nothing")])
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_console_command_reports_bad_input_in_one_line(tmp_path, capsys):
    from posattn.cli import entry

    status = entry(["pretrain", "--preset", "smoke", "--data-dir", str(tmp_path / "nothing")])
    error = capsys.readouterr().err
    assert status == 2
    assert error.startswith("posattn: error:") and "posattn data prepare" in error
    assert "Traceback" not in error


def test_overrides_may_follow_options_after_a_positional():
    from posattn.cli import parse_arguments

    args = parse_arguments(["finetune", "run/model", "--preset", "smoke", "finetune.epochs=2"])
    assert (args.pretrained, args.preset, args.overrides) == (
        "run/model",
        "smoke",
        ["finetune.epochs=2"],
    )
    args = parse_arguments(["finetune", "run/model", "a=1", "--preset", "smoke", "b=2"])
    assert args.overrides == ["a=1", "b=2"]
    with pytest.raises(SystemExit):
        parse_arguments(["finetune", "run/model", "--preset", "smoke", "--nonsense"])


@pytest.mark.parametrize("command", ["finetune", "zero-shot"])
def test_a_missing_model_directory_is_the_only_argument_named(command, capsys):
    """Overrides are optional: argparse named KEY=VALUE as required beside the model directory
    (a positional of nargs="*" without a default)."""
    from posattn.cli import parse_arguments

    with pytest.raises(SystemExit):
        parse_arguments([command])
    assert (
        capsys.readouterr()
        .err.rstrip()
        .endswith("the following arguments are required: pretrained")
    )
    assert parse_arguments([command, "run/model"]).overrides == []


def test_compare_reuses_only_stages_of_the_same_settings(data_dir, tmp_path):
    output = tmp_path / "compare"
    base = ["compare", "--preset", "smoke", "--data-dir", str(data_dir), "--output",
            str(output), "--encodings", "learned", "finetune.tasks=[sentiment]",
            "finetune.seeds=[0]"]  # fmt: skip
    cell = output / "learned" / "seed0"
    outputs = [cell / "pretrain" / "metrics.json",
               cell / "pretrain" / "model" / "model.safetensors",
               cell / "finetune" / "sentiment" / "finetune.json"]  # fmt: skip

    def stamps() -> list[int]:
        return [path.stat().st_mtime_ns for path in outputs]

    assert main(base) == 0
    first = stamps()
    assert json.loads((output / "results.json").read_text())["context"]["cells"] == {
        "total": 2,
        "reused": 0,
    }
    assert "min on 1 worker.\n" in (output / "results.md").read_text()  # no reused cell
    stage = json.loads((cell / "pretrain" / "stage.json").read_text())
    assert stage["settings"]["pretrain"]["steps"] == 12 and len(stage["fingerprint"]) == 64
    assert main(base) == 0  # the same settings: both stages are read back, nothing trains
    assert stamps() == first
    assert (
        "for the 0 of 2 cells this invocation computed; reused"
        in (output / "results.md").read_text()
    )
    with pytest.raises(PosAttnConfigError) as error:
        main([*base, "pretrain.steps=6"])
    assert "pretrain.steps: 12 -> 6" in str(error.value) and "--overwrite" in str(error.value)
    assert stamps() == first  # refused before anything was touched
    assert main([*base, "pretrain.steps=6", "--overwrite"]) == 0
    assert all(after != before for after, before in zip(stamps(), first, strict=True))
    results = json.loads((output / "results.json").read_text())["results"]
    assert results["learned"]["pretrain"]["0"]["steps"] == 6
