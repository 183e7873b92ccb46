"""`posattn translate combine`: runs trained apart, read back as one comparison - the arms'
setting differences found, every pair tested, runs scored on other sentences refused."""

from __future__ import annotations

import json
import shutil

import pytest

from posattn.cli import main
from posattn.errors import PosAttnConfigError
from posattn.lab.translation.combine import combine_runs
from posattn.lab.translation.scoring import corpus_scores

REFERENCES = ["the cat sat on the mat", "a dog ran under the tree", "the red bird sat"]
SETTINGS = {
    "posattn": "0.1.1",
    "model": {"encoding": "sinusoidal", "d_model": 16},
    "train": {"seed": 0, "steps": 10},
    "decode": {"beam_size": 4, "length_penalty": 0.6},
}


DIGESTS = {"translation/toy": "0123456789ab" + "c" * 52}


def write_run(root, encoding, seed, hypotheses, references=REFERENCES, data=DIGESTS, **changes):
    """A finished run as `compare --task translation` leaves it: metrics.json, stage.json
    (with the digests of the data it read; data=None: a run from before they were recorded)."""
    folder = root / encoding / f"seed{seed}"
    folder.mkdir(parents=True)
    scores = corpus_scores(hypotheses, references)
    test = {
        "pairs": len(references),
        "references": references,
        "beam": {**scores, "hypotheses": hypotheses},
        "greedy": scores,
        "copy_source": {"bleu": 0.5, "chrf": 10.0},
    }
    metrics = {"encoding": encoding, "seed": seed, "pairs": "toy", "reversed": False,
               "final_dev_loss": 2.0, "parameters": 1000, "train_seconds": 60.0,
               "machine": "CPU (test)", "evaluation": {"test": test}}  # fmt: skip
    (folder / "metrics.json").write_text(json.dumps(metrics))
    settings = json.loads(json.dumps(SETTINGS))
    settings["model"]["encoding"], settings["train"]["seed"] = encoding, seed
    for section, values in changes.items():
        settings.setdefault(section, {}).update(values)
    record = {"fingerprint": "x", "settings": settings}
    if data is not None:
        record["data"] = data
    (folder / "stage.json").write_text(json.dumps(record))
    return root


GOOD = ["the cat sat on the mat", "a dog ran under the tree", "the red bird sat"]
HALF = ["the cat sat on a mat", "a dog ran under the tree", "bird red the sat"]
POOR = ["cat the mat", "tree dog", "sat"]


def test_arms_trained_apart_are_compared_pair_by_pair_with_their_setting_differences(tmp_path):
    write_run(tmp_path / "a", "sinusoidal", 0, POOR)
    write_run(tmp_path / "a1", "sinusoidal", 1, POOR)  # a seed trained in its own output
    write_run(tmp_path / "b", "diet-rel", 0, HALF)
    write_run(tmp_path / "b", "diet-rel", 1, HALF)
    write_run(tmp_path / "c", "diet-rel", 0, GOOD, trainer={"positional_lr_scale": 10.0})
    (tmp_path / "c" / "diet-rel" / "seed1" / "checkpoints").mkdir(parents=True)  # still training
    output = tmp_path / "combined"
    summary = combine_runs(
        [
            str(tmp_path / "a"),
            f"rel={tmp_path / 'b'}",
            f"rel-x10={tmp_path / 'c' / 'diet-rel'}",
            f"sinusoidal={tmp_path / 'a1'}",  # the arm's second seed
        ],
        output,
        all_pairs=True,
    )
    assert list(summary["results"]) == ["sinusoidal", "rel", "rel-x10"]
    assert summary["setting_differences"] == {
        "rel-x10": ['trainer: (absent) -> {"positional_lr_scale": 10.0}']
    }
    # Seeds both arms ran, stacked: rel-x10 has seed 0 only.
    pairs = {(t["system"], t["against"]): t for t in summary["pairwise"]}
    assert set(pairs) == {("rel", "sinusoidal"), ("rel-x10", "sinusoidal"), ("rel-x10", "rel")}
    assert pairs["rel", "sinusoidal"]["seeds"] == [0, 1]
    assert pairs["rel-x10", "rel"]["seeds"] == [0]
    expected = corpus_scores(GOOD, REFERENCES)["bleu"] - corpus_scores(HALF, REFERENCES)["bleu"]
    assert pairs["rel-x10", "rel"]["bleu"]["difference"] == pytest.approx(expected)
    both = corpus_scores(HALF * 2, REFERENCES * 2)["chrf"]
    both -= corpus_scores(POOR * 2, REFERENCES * 2)["chrf"]
    assert pairs["rel", "sinusoidal"]["chrf"]["difference"] == pytest.approx(both)
    assert summary["significance"]["rel-x10"]["against"] == "sinusoidal"
    assert summary["context"]["train_seconds"] == 300.0
    assert summary["context"]["machine"] == "CPU (test)"
    markdown = (output / "results.md").read_text()
    assert markdown.startswith("# posattn translate combine")
    assert '- `rel-x10`: trainer: (absent) -> {"positional_lr_scale": 10.0}' in markdown
    assert "| `rel-x10` - `rel` | 0 |" in markdown
    assert "One seed for some encoding" in markdown
    assert "first digits): translation/toy 0123456789ab." in markdown  # every run's data
    assert summary["context"]["sources"]["sinusoidal"] == [
        str(tmp_path / "a"),
        str(tmp_path / "a1"),
    ]
    unfinished = str(tmp_path / "c" / "diet-rel" / "seed1")
    assert summary["unfinished"] == {"rel-x10": [unfinished]}
    assert f"Not finished, so left out: `rel-x10` {unfinished}." in markdown
    assert json.loads((output / "results.json").read_text())["pairwise"] == summary["pairwise"]
    # Over training seeds, the same pairs: each seed's score of one arm minus the other's.
    over_seeds = {(c["system"], c["against"]): c for c in summary["over_seeds"]}
    assert set(over_seeds) == set(pairs)
    per_seed = corpus_scores(HALF, REFERENCES)["bleu"] - corpus_scores(POOR, REFERENCES)["bleu"]
    assert over_seeds["rel", "sinusoidal"]["bleu"]["difference"] == pytest.approx(per_seed)
    assert over_seeds["rel", "sinusoidal"]["bleu"]["interval"] == pytest.approx([per_seed] * 2)
    assert over_seeds["rel", "sinusoidal"]["bleu"]["p_value"] == pytest.approx(0.5)
    assert over_seeds["rel-x10", "rel"]["bleu"]["interval"] is None  # one seed in common
    assert markdown.index("Every pair of arms") < markdown.index("## Over training seeds")


def test_runs_that_cannot_be_paired_are_refused(tmp_path):
    write_run(tmp_path / "a", "sinusoidal", 0, POOR)
    write_run(tmp_path / "a", "t5", 0, HALF)
    with pytest.raises(PosAttnConfigError, match=r"runs=.*this one holds sinusoidal, t5"):
        combine_runs([str(tmp_path / "a")], tmp_path / "out")
    with pytest.raises(PosAttnConfigError, match=r"'x' seed 0 is also in .*t5"):
        combine_runs([f"x={tmp_path / 'a' / 't5'}", f"x={tmp_path / 'a' / 'sinusoidal'}"],
                     tmp_path / "out")  # fmt: skip
    other = ["the cat sat", "a dog ran", "the bird"]
    write_run(tmp_path / "b", "t5", 0, HALF, references=other)
    with pytest.raises(PosAttnConfigError, match="other test sentences than sinusoidal"):
        combine_runs([str(tmp_path / "a" / "sinusoidal"), str(tmp_path / "b")], tmp_path / "out")
    shutil.copytree(tmp_path / "a" / "t5", tmp_path / "c" / "t5")
    (tmp_path / "c" / "t5" / "seed0" / "stage.json").unlink()
    with pytest.raises(PosAttnConfigError, match=r"stage\.json"):
        combine_runs([str(tmp_path / "c")], tmp_path / "out")
    untested = tmp_path / "c" / "t5" / "seed0"
    shutil.copy(tmp_path / "a" / "t5" / "seed0" / "stage.json", untested)
    metrics = json.loads((untested / "metrics.json").read_text())
    (untested / "metrics.json").write_text(json.dumps({**metrics, "evaluation": {}}))
    with pytest.raises(PosAttnConfigError, match="scored on the test pairs"):
        combine_runs([str(tmp_path / "c")], tmp_path / "out")
    with pytest.raises(PosAttnConfigError, match="an existing run directory"):
        combine_runs([str(tmp_path / "missing")], tmp_path / "out")
    with pytest.raises(PosAttnConfigError, match=r"--confidence=1\.5 is not allowed: a level in"):
        combine_runs([str(tmp_path / "a" / "t5")], tmp_path / "out", confidence=1.5)
    assert not (tmp_path / "out").exists()


def test_the_command_sets_the_level_of_the_intervals_over_seeds(tmp_path):
    for seed, outputs in enumerate((POOR, HALF, POOR)):
        write_run(tmp_path / "a", "sinusoidal", seed, POOR)
        write_run(tmp_path / "b", "t5", seed, outputs)
    runs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert main(["translate", "combine", *runs, "--output", str(tmp_path / "95")]) == 0
    wide = tmp_path / "97.5"
    command = ["translate", "combine", *runs, "--output", str(wide), "--confidence", "0.975"]
    assert main(command) == 0
    at = {
        level: json.loads((tmp_path / level / "results.json").read_text())["over_seeds"][0]
        for level in ("95", "97.5")
    }
    assert (at["95"]["confidence"], at["97.5"]["confidence"]) == (0.95, 0.975)
    gain = corpus_scores(HALF, REFERENCES)["bleu"] - corpus_scores(POOR, REFERENCES)["bleu"]
    assert at["97.5"]["bleu"]["per_seed"] == pytest.approx([0.0, gain, 0.0])
    low95, high95 = at["95"]["bleu"]["interval"]
    low, high = at["97.5"]["bleu"]["interval"]
    assert low < low95 < high95 < high
    assert "| BLEU diff [97.5%] | p |" in (wide / "results.md").read_text()


def test_runs_on_other_data_show_it_among_the_setting_differences(tmp_path):
    write_run(tmp_path / "a", "sinusoidal", 0, POOR)
    rebuilt = {"translation/toy": "fedcba987654" + "0" * 52}
    write_run(tmp_path / "b", "t5", 0, HALF, data=rebuilt)
    write_run(tmp_path / "c", "alibi", 0, GOOD, data=None)
    summary = combine_runs([str(tmp_path / p) for p in "abc"], tmp_path / "out")
    assert summary["setting_differences"] == {
        "t5": ['data_digests.translation/toy: "0123456789ab" -> "fedcba987654"'],
        "alibi": ['data_digests: {"translation/toy": "0123456789ab"} -> (absent)'],
    }
    # no one data line for runs of other data, and the report says why
    assert summary["context"]["data"] == "not recorded by every run"
    summary = combine_runs([str(tmp_path / p) for p in "ab"], tmp_path / "out")
    assert summary["context"]["data"] == "differs between runs (see the settings that differ)"
    markdown = (tmp_path / "out" / "results.md").read_text()
    assert "Data: differs between runs (see the settings that differ)." in markdown
