"""`posattn paired` (lab/pretraining/paired.py, run_values.py): arms of runs trained apart, each
run one number read from the file it finished with, every arm against the first pair by pair:
the mean difference, its Student-t interval over the pairs and the exact sign-flip p-value."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from scipy import stats
from test_translation_seed_pairs import sign_flip_p

from posattn.cli import main
from posattn.errors import PosAttnConfigError
from posattn.lab.pretraining.paired import paired_lines, paired_runs


def write(directory, name: str, content: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps(content))


def fine_tuning(directory, tests: list[float], seeds: list[int], task: str = "word-order"):
    """A `posattn finetune` output: test accuracies (fractions) in the seeds' order."""
    write(directory, "finetune.json", {task: {"test_by_seed": tests, "test_median": 0.5}})
    write(directory, "stage.json", {"settings": {"finetune": {"seeds": seeds}}})
    return directory


def pretraining(directory, loss: float, seed: int):
    write(directory, "metrics.json", {"final_eval_loss": loss, "steps": 1000})
    write(directory, "stage.json", {"settings": {"pretrain": {"seed": seed}}})
    return directory


def zero_shot(directory, score: float):
    write(directory, "zero_shot.json", {"word-order": {"score": score}})
    return directory


def t_interval(differences: list[float], confidence: float) -> list[float]:
    mean, n = statistics.fmean(differences), len(differences)
    half = stats.t.ppf((1 + confidence) / 2, n - 1) * statistics.stdev(differences) / math.sqrt(n)
    return [mean - half, mean + half]


def test_fine_tunings_paired_by_position_on_the_chosen_fine_tuning_seed(tmp_path):
    base = [[0.50, 0.40], [0.45, 0.55], [0.52, 0.48]]  # per run: fine-tuning seeds 0 and 1
    other = [[0.75, 0.70], [0.58, 0.50], [0.77, 0.80]]
    specs = [f"learned={fine_tuning(tmp_path / f'a{i}', t, [0, 1])}" for i, t in enumerate(base)]
    specs += [f"bert-r={fine_tuning(tmp_path / f'b{i}', t, [0, 1])}" for i, t in enumerate(other)]
    result = paired_runs(specs, finetune_seeds=[0], confidence=0.975)
    differences = [25.0, 13.0, 25.0]  # points, fine-tuning seed 0
    [comparison] = result["comparisons"]
    assert (comparison["system"], comparison["against"]) == ("bert-r", "learned")
    assert comparison["per_pair"] == pytest.approx(differences)
    assert comparison["difference"] == pytest.approx(21.0)
    assert comparison["interval"] == pytest.approx(t_interval(differences, 0.975))
    assert comparison["p_value"] == pytest.approx(0.25)  # all three above 0: 2 / 2^3
    assert result["arms"]["learned"]["values"] == pytest.approx([50.0, 45.0, 52.0])
    # Every fine-tuning seed of the first run by default: each run's mean over them.
    mean_of_both = paired_runs(specs)
    assert mean_of_both["measure"]["finetune_seeds"] == [0, 1]
    assert mean_of_both["arms"]["bert-r"]["values"] == pytest.approx([72.5, 54.0, 78.5])
    assert mean_of_both["comparisons"][0]["per_pair"] == pytest.approx([27.5, 4.0, 28.5])
    lines = "\n".join(paired_lines(result))
    assert "| `bert-r` - `learned` | +25.0 | +13.0 | +25.0 | +21.0 [" in lines
    assert "| `learned` | 50.0 | 45.0 | 52.0 | 49.0 |  |" in lines
    assert "at 97.5% over 3 pairs: the interval contains 0" in lines
    assert "fine-tuning seed(s) 0" in lines


def test_seed_order_read_from_the_stage_and_several_arms_against_the_first(tmp_path):
    first = fine_tuning(tmp_path / "a", [0.6, 0.5], [3, 0])  # seed 0 is listed second
    second = fine_tuning(tmp_path / "b", [0.7, 0.9], [0, 3])
    other = fine_tuning(tmp_path / "c", [0.4, 0.2], [0, 3])
    result = paired_runs([f"x={first}", f"y={second}", f"z={other}"], finetune_seeds=[0])
    assert result["arms"]["x"]["values"] == pytest.approx([50.0])
    found = {c["system"]: c for c in result["comparisons"]}
    assert set(found) == {"y", "z"} and {c["against"] for c in found.values()} == {"x"}
    assert found["y"]["difference"] == pytest.approx(20.0)
    assert found["z"]["difference"] == pytest.approx(-10.0)
    assert found["z"]["interval"] is None and found["z"]["p_value"] == 1.0  # one pair


def test_pretraining_losses_and_zero_shot_scores(tmp_path):
    base = [pretraining(tmp_path / f"a{s}", loss, s) for s, loss in enumerate((5.7, 5.69, 5.72))]
    other = [pretraining(tmp_path / f"b{s}", loss, s) for s, loss in enumerate((4.0, 4.1, 3.95))]
    specs = [f"learned={d}" for d in base] + [f"tupe-a={d}" for d in other]
    [comparison] = paired_runs(specs)["comparisons"]
    differences = [-1.7, -1.59, -1.77]
    assert comparison["per_pair"] == pytest.approx(differences)
    assert comparison["interval"] == pytest.approx(t_interval(differences, 0.95))
    assert "the interval lies below 0" in "\n".join(paired_lines(paired_runs(specs)))
    scores = [zero_shot(tmp_path / f"z{i}", s) for i, s in enumerate((50.0, 53.4, 98.6, 97.9))]
    specs = [f"a={scores[0]}", f"a={scores[1]}", f"b={scores[2]}", f"b={scores[3]}"]
    [comparison] = paired_runs(specs)["comparisons"]
    assert comparison["per_pair"] == pytest.approx([48.6, 44.5])
    assert comparison["p_value"] == pytest.approx(sign_flip_p([48.6, 44.5]))


def test_runs_that_record_their_model_pair_only_with_its_pretraining_seed(tmp_path):
    def tuned_from(directory, seed: int | None):
        """A fine-tuning of a model pretrained with `seed` (None: one that does not say)."""
        run = fine_tuning(directory, [0.5], [0])
        record = {"settings": {"finetune": {"seeds": [0]}, "pretrain": {"seed": seed or 0}}}
        if seed is not None:
            record["data"] = {"pretrained": "digest-of-the-model"}
        (run / "stage.json").write_text(json.dumps(record))
        return run

    a = [tuned_from(tmp_path / f"a{s}", s) for s in (0, 1)]
    b = [tuned_from(tmp_path / f"b{s}", s) for s in (0, 1)]
    assert len(paired_runs([f"x={a[0]}", f"x={a[1]}", f"y={b[0]}", f"y={b[1]}"])["arms"]) == 2
    with pytest.raises(PosAttnConfigError, match=r"seed 0\); this run's model has seed 1"):
        paired_runs([f"x={a[0]}", f"x={a[1]}", f"y={b[1]}", f"y={b[0]}"])
    # a run that does not record its model (a comparison's cell, an older fine-tuning, whose
    # recorded seed is a preset's) is paired as given
    silent = [tuned_from(tmp_path / f"c{i}", None) for i in (0, 1)]
    specs = [f"x={a[0]}", f"x={a[1]}", f"y={silent[0]}", f"y={silent[1]}"]
    assert paired_runs(specs)["comparisons"][0]["runs"] == 2
    scores = [zero_shot(tmp_path / f"z{i}", 60.0) for i in (0, 1)]
    for i, score in enumerate(scores):
        record = {"settings": {"pretrain": {"seed": 3 + i}}, "data": {"pretrained": "d"}}
        (score / "stage.json").write_text(json.dumps(record))
    with pytest.raises(PosAttnConfigError, match="this run's model has seed 4"):
        paired_runs([f"x={scores[0]}", f"y={scores[1]}"])


def test_the_command_prints_and_writes_json(tmp_path, capsys):
    a = [fine_tuning(tmp_path / f"a{i}", [v], [0]) for i, v in enumerate((0.5, 0.46, 0.51))]
    b = [fine_tuning(tmp_path / f"b{i}", [v], [0]) for i, v in enumerate((0.74, 0.58, 0.52))]
    out = tmp_path / "paired.json"
    specs = [f"learned={d}" for d in a] + [f"bert-r={d}" for d in b]
    assert main(["paired", *specs, "--confidence", "0.975", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| `bert-r` - `learned` | +24.0 | +12.0 | +1.0 | +12.3 [" in printed
    written = json.loads(out.read_text())
    assert written["confidence"] == 0.975
    assert written["comparisons"][0]["per_pair"] == pytest.approx([24.0, 12.0, 1.0])
    assert written["comparisons"][0]["p_value"] == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("arms", "options", "parameter", "says"),
    [
        ({"a": ["f"], "b": ["f", "f"]}, {}, "runs", "as many runs as the first arm 'a' (1)"),
        ({"a": ["f"]}, {}, "runs", "runs of two arms or more"),
        ({"a": ["f"], "b": ["z"]}, {}, "runs", "a run of the first one's kind (fine-tuning"),
        ({"a": ["f"], "b": ["f"]}, {"finetune_seeds": [2]}, "--finetune-seeds", "ran (0, 1)"),
        ({"a": ["p0"], "b": ["p1"]}, {}, "runs", "this run's model has seed 1"),
        ({"a": ["p0"], "b": ["p0"]}, {"task": "topic"}, "--task", "no task for pretraining"),
        ({"a": ["z"], "b": ["z"]}, {"finetune_seeds": [0]}, "--finetune-seeds", "zero-shot"),
        ({"a": ["z"], "b": ["z"]}, {"task": "topic"}, "--task", "a task"),
        ({"a": ["e"], "b": ["e"]}, {}, "runs", "a finished run of posattn pretrain"),
        ({"a": ["f"], "b": ["f"]}, {"confidence": 1.5}, "--confidence", "a level in (0, 1)"),
    ],
)
def test_refusals_name_the_parameter(tmp_path, arms, options, parameter, says):
    made = {
        "f": lambda d: fine_tuning(d, [0.5, 0.6], [0, 1]),
        "z": lambda d: zero_shot(d, 60.0),
        "p0": lambda d: pretraining(d, 5.0, 0),
        "p1": lambda d: pretraining(d, 5.0, 1),
        "e": lambda d: d.mkdir() or d,
    }
    specs = []
    for name, kinds in arms.items():
        for i, kind in enumerate(kinds):
            specs.append(f"{name}={made[kind](tmp_path / f'{name}{i}')}")
    with pytest.raises(PosAttnConfigError) as error:
        paired_runs(specs, **options)
    assert error.value.parameter == parameter
    assert says in str(error.value)


def test_a_spec_without_a_name_or_a_directory_is_refused(tmp_path):
    run = fine_tuning(tmp_path / "a", [0.5], [0])
    for spec in (str(run), f"={run}", "a=", f"a={tmp_path / 'missing'}"):
        with pytest.raises(PosAttnConfigError, match="runs="):
            paired_runs([spec, f"b={run}"])
    with pytest.raises(PosAttnConfigError, match="already one of 'a'"):
        paired_runs([f"a={run}", f"a={run}", f"b={run}"])
    with pytest.raises(PosAttnConfigError, match="--finetune-seeds"):
        main(["paired", f"a={run}", f"b={run}", "--finetune-seeds", "0,0"])
    translation = tmp_path / "translation"
    write(translation, "metrics.json", {"final_dev_loss": 3.0, "evaluation": {}})
    with pytest.raises(PosAttnConfigError, match="posattn translate combine"):
        paired_runs([f"a={translation}", f"b={translation}"])
