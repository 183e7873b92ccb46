"""The learning curve of a translation run: points at every curve step and the last, each equal
to scoring that step's checkpoint directly, kept (not recomputed) across a kill and resume;
compare's curve figure and report; bad settings refused by name; the presets load."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import TrainerCallback
from translation_fixtures import DICTIONARY, build_toy_translation

from posattn.errors import PosAttnConfigError
from posattn.lab.translation import curve as curve_module
from posattn.lab.translation.runconfig import TRANSLATION_PRESETS, load_translation_config

CURVE_RUN = ["train.steps=13", "train.curve_steps=3", "train.save_steps=6",
             "train.eval_steps=6", "decode.splits=[dev]", "model.dropout=0.0"]  # fmt: skip


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return build_toy_translation(tmp_path_factory.mktemp("toy-data"))


def smoke_config(toy, *overrides):
    return load_translation_config(
        "smoke", overrides=[f"data.data_dir={toy}", "data.pairs=toy", *CURVE_RUN, *overrides]
    )


class Kill(Exception):
    pass


class KillAfter(TrainerCallback):
    """Stops the run as a kill would, after `step` steps (no save, no metrics.json)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Kill


def recording_scores(monkeypatch) -> list[int]:
    """Counts the curve's scorings (one per point it computes)."""
    calls: list[int] = []
    original = curve_module.greedy_scores

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(curve_module, "greedy_scores", counted)
    return calls


def test_curve_points_are_the_checkpoints_scores_and_survive_a_kill(toy, tmp_path, monkeypatch):
    from posattn.data.translation_tokenizer import load_translation_tokenizer
    from posattn.lab.translation.curve import curve_points, greedy_scores
    from posattn.lab.translation.train import load_pairs, train_translation
    from posattn.models.seq2seq import PosAttnForSeq2SeqLM

    torch.set_num_threads(1)
    config = smoke_config(toy)
    with torch.random.fork_rng():
        whole = train_translation(config, tmp_path / "whole")
    curve = whole["curve"]
    steps = [p["step"] for p in curve["points"]]
    assert steps == [3, 6, 9, 12, 13]  # every 3 steps, and the last
    assert curve["pairs"] == 24 and curve["every"] == 3  # the whole toy dev set
    dev = whole["evaluation"]["dev"]
    assert curve["copy_source"]["bleu"] == pytest.approx(dev["copy_source"]["bleu"])
    # The last point is the final model's greedy dev score on the same pairs.
    assert curve["points"][-1]["bleu"] == pytest.approx(dev["greedy"]["bleu"], abs=1e-9)
    assert curve["points"][-1]["chrf"] == pytest.approx(dev["greedy"]["chrf"], abs=1e-9)
    # A point is the score of that step's checkpoint, loaded and scored directly.
    tokenizer = load_translation_tokenizer(toy / "translation/toy/tokenizer")
    model = PosAttnForSeq2SeqLM.from_pretrained(tmp_path / "whole/checkpoints/checkpoint-12")
    direct = greedy_scores(model, tokenizer, load_pairs(config, "dev"), config.decode)
    assert curve["points"][3]["bleu"] == pytest.approx(direct["bleu"], abs=1e-9)
    assert curve["points"][3]["chrf"] == pytest.approx(direct["chrf"], abs=1e-9)

    # Killed after step 10: points 3, 6, 9 made, checkpoint-6 holds 3 and 6.
    killed = tmp_path / "killed"
    calls = recording_scores(monkeypatch)
    with torch.random.fork_rng(), pytest.raises(Kill):
        train_translation(config, killed, callbacks=[KillAfter(10)])
    assert len(calls) == 3 and not (killed / "metrics.json").exists()
    state = json.loads((killed / "checkpoints/checkpoint-6/trainer_state.json").read_text())
    saved = curve_points(state["log_history"])
    assert [p["step"] for p in saved] == [3, 6]
    calls.clear()
    with torch.random.fork_rng():
        resumed = train_translation(config, killed, resume=True)
    assert len(calls) == 3  # only the points after checkpoint-6: 9, 12 and 13
    points = resumed["curve"]["points"]
    assert points[:2] == saved  # kept as saved (their timings too), not recomputed
    assert [p["step"] for p in points] == steps
    for point, again in zip(whole["curve"]["points"], points, strict=True):
        assert again["bleu"] == pytest.approx(point["bleu"], abs=1e-6)
        assert again["chrf"] == pytest.approx(point["chrf"], abs=1e-6)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.curve_steps=0", r"train\.curve_steps=0 .*integer >= 1 or null"),
        ("train.curve_steps=-3", r"train\.curve_steps=-3 "),
        ("train.curve_steps=14", r"train\.curve_steps=14 .*at most train\.steps=13"),
        ("train.curve_pairs=0", r"train\.curve_pairs=0 .*integer >= 1"),
    ],
)
def test_bad_curve_settings_are_refused_by_name(toy, override, message):
    with pytest.raises(PosAttnConfigError, match=message):
        smoke_config(toy, override)


def test_a_non_integer_curve_step_is_refused_by_name(toy):
    with pytest.raises(PosAttnConfigError, match="curve_steps"):
        smoke_config(toy, "train.curve_steps=2.5")


def test_reverse_swaps_the_sides_of_every_split(toy):
    forward = load_translation_config(overrides=[f"data.data_dir={toy}", "data.pairs=toy"])
    backward = load_translation_config(
        overrides=[f"data.data_dir={toy}", "data.pairs=toy", "data.reverse=true"]
    )
    from posattn.lab.translation.train import load_pairs

    for split in ("train", "dev", "test"):
        pairs = load_pairs(forward, split)
        assert load_pairs(backward, split) == [(t, s) for s, t in pairs]
        assert set(pairs[0][1].split()) <= set(DICTIONARY.values())  # the Spanish side


@pytest.mark.parametrize("name", ["cpu", "curve", "table4"])
def test_cpu_curve_and_table4_presets_load_and_build_every_encoding(name):
    from posattn.data.translation_tokenizer import train_shared_bpe
    from posattn.lab.translation.compare import with_encoding
    from posattn.lab.translation.train import seq2seq_config
    from posattn.models.seq2seq import PosAttnSeq2SeqConfig

    assert name in TRANSLATION_PRESETS
    config = load_translation_config(name)
    assert config.data.pairs == "en-es" and config.data.reverse  # Spanish -> English
    assert config.train.curve_steps is not None and "test" in config.decode.splits
    table4 = {"sinusoidal", "shaw", "diet-rel", "t5", "tupe-r", "diet-abs", "rope"}
    if name == "cpu":  # DIET Table 4's rows only
        table4 = {"sinusoidal", "shaw", "diet-rel"}
    assert set(config.encodings) == table4 and len(config.seeds) >= 2
    tokenizer = train_shared_bpe(["el gato", "the cat"] * 4, vocab_size=40)
    for encoding in config.encodings:
        built = seq2seq_config(with_encoding(config, encoding), tokenizer)
        assert isinstance(built, PosAttnSeq2SeqConfig) and built.encoding == encoding
    if name == "table4":  # DIET Table 4's scale: 6 + 6 layers, d = 512
        assert (config.model.num_layers, config.model.num_decoder_layers) == (6, 6)
        assert config.model.d_model == 512


def synthetic_results(curves: dict[str, dict[int, list[float]]]) -> dict:
    """{encoding: {seed: run}} with curve points {step: [BLEU of seed 0, seed 1, ...]}."""
    results: dict = {}
    for encoding, by_step in curves.items():
        seeds = len(next(iter(by_step.values())))
        for seed in range(seeds):
            points = [
                {"step": step, "bleu": values[seed], "chrf": 2 * values[seed]}
                for step, values in by_step.items()
            ]
            curve = {"pairs": 200, "copy_source": {"bleu": 1.0, "chrf": 20.0}, "points": points}
            results.setdefault(encoding, {})[seed] = {"curve": curve}
    return results


def test_curve_summary_reads_when_each_encoding_translates_and_when_they_separate(tmp_path):
    from posattn.lab.translation.curve_report import curve_markdown, curve_summary, plot_curves

    results = synthetic_results(
        {
            # copy + 5 = 6 BLEU: a reaches it on both seeds at step 200, b at 300, c never
            "a": {100: [2.0, 7.0], 200: [6.0, 8.0], 300: [12.0, 13.0], 400: [15.0, 16.0]},
            "b": {100: [3.0, 4.0], 200: [5.9, 9.0], 300: [7.0, 12.5], 400: [9.0, 10.0]},
            "c": {100: [1.0, 1.5], 200: [2.0, 2.5], 300: [3.0, 3.5], 400: [4.0, 5.9]},
        }
    )
    summary = curve_summary(results)
    assert summary["first_beats_copy"] == {"a": 200, "b": 300, "c": None}
    # a is clearly best at 400 only: at 300 its 12-13 overlaps b's 7-12.5
    assert summary["clearly_best"] == {"100": None, "200": None, "300": None, "400": "a"}
    assert summary["separated_from"] == 400 and summary["steps"] == [100, 200, 300, 400]
    lines = "\n".join(curve_markdown(results, summary, "curve.png"))
    assert "- `a` beats copy + 5 BLEU: step 200." in lines
    assert "- `c` beats copy + 5 BLEU: never within the budget." in lines
    assert "From step 400 to the end" in lines and "| 300 | 12.50 | 9.75 | 3.25 |" in lines
    assert plot_curves(results, summary, tmp_path / "curve.png").stat().st_size > 1000
    # a clear best that does not last to the end is no separation
    results["b"][1]["curve"]["points"][-1]["bleu"] = 15.5
    assert curve_summary(results)["separated_from"] is None
