"""`posattn translate rescore`: each finished run decoded again with the length penalty of the
highest dev BLEU, its test scores those of that penalty, written as a run `translate combine`
reads; checked against `translate eval` of the same model at each penalty."""

from __future__ import annotations

import json

import pytest
import torch
from translation_fixtures import build_toy_translation

from posattn.cli import entry, main
from posattn.errors import PosAttnConfigError
from posattn.lab.translation.rescore import parse_penalties

PENALTIES = [0.0, 0.6, 3.0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A smoke comparison of one encoding, long enough for beams of several lengths."""
    toy = build_toy_translation(tmp_path_factory.mktemp("toy-data"))
    output = tmp_path_factory.mktemp("runs") / "compare"
    torch.set_num_threads(1)
    with torch.random.fork_rng():
        assert main(compare_args(toy, output)) == 0
    return toy, output


def compare_args(toy, output) -> list[str]:
    return ["compare", "--task", "translation", "--preset", "smoke", "--data-dir", str(toy),
            "--output", str(output), "--encodings", "sinusoidal", "data.pairs=toy",
            "train.steps=300", "train.learning_rate=3e-3", "model.d_model=48",
            "model.ffn_dim=96", "train.batch_size=32", "train.curve_steps=null",
            "train.eval_steps=150", "train.save_steps=150"]  # fmt: skip


def original_alpha(run) -> float:
    return json.loads((run / "stage.json").read_text())["settings"]["decode"]["length_penalty"]


def evaluated(toy, model, split, alpha, path):
    """`translate eval` of one model at one penalty: the independent reading."""
    assert entry(["translate", "eval", "--model", str(model), "--preset", "smoke",
                  "--data-dir", str(toy), "data.pairs=toy", "--split", split,
                  f"decode.length_penalty={alpha}", "--output", str(path)]) == 0  # fmt: skip
    return json.loads(path.read_text())["beam"]


def test_the_dev_best_penalty_decodes_the_test_pairs(trained, tmp_path, capsys):
    toy, runs = trained
    out = tmp_path / "rescored"
    args = ["translate", "rescore", str(runs), "--output", str(out), "--data-dir", str(toy),
            "--length-penalties", ",".join(map(str, PENALTIES))]  # fmt: skip
    with torch.random.fork_rng():
        assert entry(args) == 0
    printed = capsys.readouterr().out
    run = runs / "sinusoidal" / "seed0"
    metrics = json.loads((out / "sinusoidal/seed0/metrics.json").read_text())
    tuning = metrics["length_penalty_tuning"]
    dev = {a: evaluated(toy, run / "model", "dev", a, tmp_path / f"dev{a}.json") for a in PENALTIES}
    for alpha in PENALTIES:
        assert tuning["candidates"][str(alpha)]["bleu"] == pytest.approx(dev[alpha]["bleu"])
    best = max(PENALTIES, key=lambda a: dev[a]["bleu"])  # the first listed among equals
    assert tuning["chosen"] == best and f"chosen {best}" in printed
    assert len({round(d["bleu"], 6) for d in dev.values()}) > 1  # the penalties decode apart
    test = evaluated(toy, run / "model", "test", best, tmp_path / "test.json")
    assert metrics["evaluation"]["test"]["beam"]["hypotheses"] == test["hypotheses"]
    original = json.loads((run / "metrics.json").read_text())
    assert metrics["final_dev_loss"] == original["final_dev_loss"]  # training record kept
    stage = json.loads((out / "sinusoidal/seed0/stage.json").read_text())
    assert stage["settings"]["decode"]["length_penalty"] == best
    # combine reads it beside the original, naming the penalty as what differs
    assert entry(["translate", "combine", "--output", str(tmp_path / "both"),
                  f"plain={runs}", f"tuned={out}"]) == 0  # fmt: skip
    combined = json.loads((tmp_path / "both/results.json").read_text())
    assert any("length_penalty" in line for line in combined["setting_differences"]["tuned"])
    alphas = sorted({original_alpha(run), best})
    header = " / ".join(map(str, alphas)) + " (per run)" if len(alphas) > 1 else str(best)
    assert f"length penalty {header} (and greedy)" in (tmp_path / "both/results.md").read_text()
    # the same candidates again: reused, not decoded again
    written = (out / "sinusoidal/seed0/metrics.json").stat().st_mtime_ns
    assert entry(args) == 0
    assert (out / "sinusoidal/seed0/metrics.json").stat().st_mtime_ns == written


def test_bad_candidates_and_an_output_over_the_runs_are_refused(trained, capsys):
    _, runs = trained
    for text in ("", "0.6,x", "-1", "0.6,0.6"):
        with pytest.raises(PosAttnConfigError, match="--length-penalties"):
            parse_penalties(text)
    assert parse_penalties("0.6, 1") == [0.6, 1.0]
    args = ["translate", "rescore", str(runs), "--output", str(runs), "--length-penalties", "1"]
    assert entry(args) == 2
    assert "--output=" in capsys.readouterr().err


def test_compare_tunes_the_length_on_dev_as_rescore_does_and_reuses_its_runs(trained, tmp_path):
    """`tune_length_penalties` lies outside the runs' settings: a finished comparison is
    reused as it is, and its runs decoded again exactly as `translate rescore` decodes them."""
    toy, runs = trained
    run_metrics = runs / "sinusoidal/seed0/metrics.json"
    trained_at = run_metrics.stat().st_mtime_ns
    candidates = "[" + ",".join(map(str, PENALTIES)) + "]"
    with torch.random.fork_rng():
        assert main([*compare_args(toy, runs), f"tune_length_penalties={candidates}"]) == 0
    assert run_metrics.stat().st_mtime_ns == trained_at  # reused, not trained again
    rescored = tmp_path / "rescored"
    args = ["translate", "rescore", str(runs), "--output", str(rescored), "--data-dir", str(toy),
            "--length-penalties", ",".join(map(str, PENALTIES))]  # fmt: skip
    with torch.random.fork_rng():
        assert entry(args) == 0
    by_rescore = json.loads((rescored / "sinusoidal/seed0/metrics.json").read_text())
    tuned_run = json.loads((runs / "length-tuned/sinusoidal/seed0/metrics.json").read_text())

    def hypotheses(run):
        return run["evaluation"]["test"]["beam"]["hypotheses"]

    assert hypotheses(tuned_run) == hypotheses(by_rescore)
    assert tuned_run["length_penalty_tuning"] == by_rescore["length_penalty_tuning"]
    summary = json.loads((runs / "results.json").read_text())
    chosen = by_rescore["length_penalty_tuning"]["chosen"]
    assert summary["length_tuned"]["chosen"] == {"sinusoidal": {"0": chosen}}
    assert f"seed 0: {chosen}" in (runs / "results.md").read_text()
    combined = json.loads((runs / "length-tuned/results.json").read_text())
    assert hypotheses(combined["results"]["sinusoidal"]["0"]) == hypotheses(by_rescore)


def test_a_failed_tuning_leaves_the_main_report_of_the_finished_runs(
    trained, tmp_path, monkeypatch
):
    """Tuning decodes every run again after they finish: stopped there, the comparison's
    report at the run's own penalty is already written (and names no tuning)."""
    toy, runs = trained
    output = tmp_path / "compare"
    output.mkdir()
    (output / "sinusoidal").symlink_to(runs / "sinusoidal", target_is_directory=True)

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("stopped while decoding")

    monkeypatch.setattr("posattn.lab.translation.rescore.rescore_runs", stopped)
    with pytest.raises(KeyboardInterrupt), torch.random.fork_rng():
        main([*compare_args(toy, output), "tune_length_penalties=[0.6,1.0]"])
    summary = json.loads((output / "results.json").read_text())
    finished = json.loads((runs / "sinusoidal/seed0/metrics.json").read_text())
    test_bleu = finished["evaluation"]["test"]["beam"]["bleu"]
    assert summary["results"]["sinusoidal"]["0"]["evaluation"]["test"]["beam"]["bleu"] == test_bleu
    assert "length_tuned" not in summary
    assert (output / "results.md").exists()


@pytest.mark.parametrize("value", ["[-1]", "[0.6,0.6]"])
def test_bad_tuning_penalties_are_refused_before_training(value, tmp_path):
    with pytest.raises(PosAttnConfigError, match="tune_length_penalties"):
        main(["compare", "--task", "translation", "--preset", "smoke", "--output",
              str(tmp_path), f"tune_length_penalties={value}"])  # fmt: skip
