"""`posattn probe --option ENCODING.KEY=VALUE`: the option reaches that encoding's model, enters
its cells' fingerprint alone, is named in the report, and bad ones are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.probe import grid
from posattn.lab.probe.cell import build_model, encoding_of
from posattn.lab.probe.report import results_markdown
from posattn.lab.probe.settings import ProbeSettings, preset
from posattn.lab.probe.tasks import probe_task

RANK_TWO = {"diet-abs": {"rank": 2}}


def test_an_option_reaches_its_encodings_model_alone():
    settings = preset("smoke", encodings=["diet-abs", "rope"], encoding_options=RANK_TWO)
    diet_abs = encoding_of(build_model(probe_task("relative"), "diet-abs", settings))
    assert diet_abs.query.shape[-1] == diet_abs.key.shape[-1] == 2  # d_p = 2, not d_h = 16
    default = encoding_of(build_model(probe_task("relative"), "diet-abs", preset("smoke")))
    assert default.query.shape[-1] == 16
    # the probe's own option stays where none is given for that encoding
    assert settings.options_of("rope") == {"layout": "half"}


def test_only_that_encodings_cells_change_fingerprint():
    plain = preset("smoke", encodings=["diet-abs", "learned"])
    ranked = preset("smoke", encodings=["diet-abs", "learned"], encoding_options=RANK_TWO)
    assert ranked.cell_fingerprint("learned") == plain.cell_fingerprint("learned")
    assert ranked.cell_fingerprint("diet-abs") != plain.cell_fingerprint("diet-abs")
    # cells run before the option existed keep theirs
    assert plain.cell_fingerprint("diet-abs") == plain.cell_fingerprint()


def test_a_stored_cell_of_other_options_is_trained_again(tmp_path, monkeypatch):
    trained = []

    def recording(task, encoding, seed, scale, settings, path, device):
        """compute_cell without the training: the cell it stores carries its fingerprint."""
        trained.append((encoding, settings["encoding_options"]))
        fingerprint = ProbeSettings(**settings).cell_fingerprint(encoding, scale)
        cell = {"task": task, "encoding": encoding, "seed": seed, "status": "unsupported",
                "reason": "recorded", "fingerprint": fingerprint,
                "position_lr_scale": scale}  # fmt: skip
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(cell))
        return cell

    monkeypatch.setattr(grid, "compute_cell", recording)
    quiet = Console(quiet=True)
    encodings = ["diet-abs", "learned"]
    grid.run_cells(preset("smoke", tasks=["majority"], encodings=encodings), tmp_path, quiet)
    assert [name for name, _ in trained] == encodings
    trained.clear()
    ranked = preset("smoke", tasks=["majority"], encodings=encodings, encoding_options=RANK_TWO)
    grid.run_cells(ranked, tmp_path, quiet)
    assert trained == [("diet-abs", RANK_TWO)]


def test_the_report_names_the_options_given():
    settings = preset("smoke", encodings=["diet-abs"], encoding_options=RANK_TWO)
    cell = {"task": "relative", "encoding": "diet-abs", "seed": 0, "status": "unsupported",
            "reason": "x"}  # fmt: skip
    results = grid.aggregate([cell, {**cell, "task": "majority"}], settings)
    assert "Encoding options given: `diet-abs` rank=2." in results_markdown(results, settings)
    plain = preset("smoke", encodings=["diet-abs"])
    assert "Encoding options given" not in results_markdown(results, plain)


def test_bad_options_are_refused_by_name():
    with pytest.raises(PosAttnConfigError, match="--option's encoding='t5'"):
        preset("smoke", encoding_options={"t5": {"num_buckets": 8}})
    with pytest.raises(PosAttnConfigError, match=r"unknown option.*bucketz"):
        preset("smoke", encodings=["t5"], encoding_options={"t5": {"bucketz": 8}})
    with pytest.raises(PosAttnConfigError, match="--option='diet-abs'"):
        main(["probe", "--preset", "smoke", "--encodings", "diet-abs", "--option", "diet-abs"])
    with pytest.raises(PosAttnConfigError, match="rank"):
        main(["probe", "--preset", "smoke", "--encodings", "diet-abs", "--option",
              "diet-abs.rank=0"])  # fmt: skip


def test_word_scale_reaches_the_probe_model_and_its_cells_fingerprints_when_set():
    """--word-scale multiplies the probe model's word vectors; at its default the cells keep
    the fingerprints they had before the setting existed."""
    plain, scaled = preset("smoke"), preset("smoke", word_scale=50.0)
    for settings, scale in ((scaled, 50.0), (plain, 1.0)):
        model = build_model(probe_task("majority"), "sinusoidal", settings)
        assert model.get_input_embeddings().scale == scale
    assert "word_scale" not in plain.cell_settings("learned")["probe"]
    assert scaled.cell_settings("learned")["probe"]["word_scale"] == 50.0
    assert scaled.cell_fingerprint("learned") != plain.cell_fingerprint("learned")
    cell = {"task": "relative", "encoding": "learned", "seed": 0, "status": "unsupported",
            "reason": "x"}  # fmt: skip
    one = preset("smoke", encodings=["learned"], word_scale=50.0)
    results = grid.aggregate([cell, {**cell, "task": "majority"}], one)
    assert "Word vectors multiplied by 50 (`--word-scale`)." in results_markdown(results, one)
    assert "Word vectors" not in results_markdown(results, preset("smoke", encodings=["learned"]))
    with pytest.raises(PosAttnConfigError, match=r"^--word-scale=0\.0 is not allowed"):
        main(["probe", "--preset", "smoke", "--word-scale", "0", "--output", "unused"])
