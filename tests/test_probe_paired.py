"""`posattn probe`'s encodings paired by seed against reference encodings: the differences and
intervals from their definition, what has no difference, the references a run picks, and that
the pairing only re-summarises stored cells (a run's own pairings: tests/test_probe_run.py)."""

from __future__ import annotations

import math

import pytest

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.probe.cell import PAST_MAX_LEN
from posattn.lab.probe.paired import paired_results
from posattn.lab.probe.report import results_markdown
from posattn.lab.probe.settings import preset

# Student's t at 0.975 with 2 degrees of freedom (three seeds)
T_975_2 = 4.302652729911275


def accuracies(token: list[float], exact: list[float], past: bool = False) -> dict:
    """One encoding's aggregated result at lengths 16 and 32, by seed."""
    at_16 = {
        "token": {"by_seed": token, "mean": sum(token) / 3, "std": 0.0},
        "exact": {"by_seed": exact, "mean": sum(exact) / 3, "std": 0.0},
    }
    at_32 = {"status": PAST_MAX_LEN} if past else at_16
    return {"status": "ok", "lengths": {"16": at_16, "32": at_32}}


@pytest.fixture
def three_seeds():
    settings = preset(
        "smoke", tasks=["relative"], encodings=["learned", "diet-rel", "xpos"], seeds=3
    )
    results = {
        "relative": {
            "learned": accuracies([0.10, 0.20, 0.15], [0.0, 0.0, 0.5], past=True),
            "diet-rel": accuracies([0.90, 1.00, 0.70], [0.5, 1.0, 0.5]),
            "xpos": {"status": "unsupported", "reason": "causal attention only"},
        }
    }
    return settings, results


def test_differences_and_intervals_follow_their_definition(three_seeds):
    settings, results = three_seeds
    paired = paired_results(results, settings)
    assert list(paired) == ["learned"]  # `none` is not in the run
    token = paired["learned"]["relative"]["diet-rel"]["16"]["token"]
    differences = [80.0, 80.0, 55.0]  # points, seed by seed
    mean = sum(differences) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / 2)
    half = T_975_2 * sd / math.sqrt(3)
    assert token["difference"] == pytest.approx(mean)
    assert mean + half > 100  # the t-interval passes what a difference can be: cut there
    assert token["interval"] == pytest.approx([mean - half, 100.0])
    assert token["runs"] == 3
    # every sign vector of three same-sign differences: 2 of 8 as extreme
    assert token["p_value"] == pytest.approx(0.25)
    exact = paired["learned"]["relative"]["diet-rel"]["16"]["exact"]
    assert exact["difference"] == pytest.approx(100 * (2.0 - 0.5) / 3)


def test_a_length_or_encoding_without_accuracy_has_no_difference(three_seeds):
    settings, results = three_seeds
    by_encoding = paired_results(results, settings)["learned"]["relative"]
    assert by_encoding["diet-rel"]["32"]["token"] == {"status": PAST_MAX_LEN}
    assert by_encoding["xpos"]["16"]["token"] == {"status": "unsupported"}
    assert "learned" not in by_encoding  # no encoding is paired with itself
    text = results_markdown(results, settings, paired_results(results, settings))
    assert "## Paired against `learned` (token accuracy, points)" in text
    line = next(row for row in text.splitlines() if row.startswith("| `diet-rel`") and "[" in row)
    assert line == f"| `diet-rel` | +71.7 [+35.8, +100.0] | {PAST_MAX_LEN} |"
    assert "| `xpos` | n/a | n/a |" in text
    # diet-rel at 16 has a difference; at 32 it is past learned's table, xpos has none
    assert "The run's pairings hold 1 difference of token accuracy" in text


def test_the_references_a_run_picks_and_refuses():
    # the default grid has both: BERT-A and the model without positions, its control
    assert preset("default").references() == ["learned", "none"]
    assert preset("smoke").references() == ["learned"]
    both = preset("smoke", encodings=["none", "rope", "learned"])
    assert both.references() == ["learned", "none"]
    assert preset("smoke", encodings=["rope", "alibi"]).references() == []
    assert preset("smoke", paired_with=["diet-rel"]).references() == ["diet-rel"]
    assert preset("smoke", paired_with=[]).references() == []
    with pytest.raises(PosAttnConfigError, match="paired_with='rope'"):
        preset("smoke", paired_with=["rope"])
    with pytest.raises(PosAttnConfigError, match="none repeated"):
        preset("smoke", paired_with=["learned", "learned"])
    with pytest.raises(PosAttnConfigError, match=r"^--paired-with='nope'"):
        main(["probe", "--preset", "smoke", "--paired-with", "nope"])


def test_pairing_is_a_summary_of_the_cells_a_run_keeps():
    assert (
        preset("smoke").cell_fingerprint()
        == preset("smoke", paired_with=["diet-rel"]).cell_fingerprint()
    )
