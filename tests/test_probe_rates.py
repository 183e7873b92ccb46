"""The probe's positional rates: every (task, encoding) trains at each candidate multiple of the
learning rate for the encoding's own parameters and reports the one whose final training loss
is lowest; cells of one rate keep the fingerprint they had when a run had one rate."""

from __future__ import annotations

import json
import statistics

import pytest
import torch
from rich.console import Console

from posattn.cli import main
from posattn.errors import PosAttnConfigError
from posattn.lab.probe import cell as probe_cell
from posattn.lab.probe import grid
from posattn.lab.probe.report import results_markdown
from posattn.lab.probe.settings import ProbeSettings, preset
from posattn.lab.probe.tasks import probe_task


def made_cell(seed: int, scale: float, loss: float, token: float) -> dict:
    return {
        "task": "majority",
        "encoding": "learned",
        "seed": seed,
        "position_lr_scale": scale,
        "status": "ok",
        "final_train_loss": loss,
        "lengths": {"16": {"token": token, "exact": token / 2}},
    }


def compute_without_training(trained: list):
    """A stand-in for `grid.compute_cell` that records (encoding, rate) and returns a cell of
    loss 0.5 with its fingerprint, nothing trained or stored."""

    def compute(task, encoding, seed, scale, settings, path, device):
        trained.append((encoding, scale))
        cell = {**made_cell(seed, scale, 0.5, 0.5), "encoding": encoding, "seconds": 0.0}
        return {**cell, "fingerprint": ProbeSettings(**settings).cell_fingerprint(encoding, scale)}

    return compute


TWO_RATES = preset(
    "smoke", tasks=["majority"], encodings=["learned"], seeds=2, test_lens=[16],
    position_lr_scales=[1.0, 10.0],
)  # fmt: skip


def test_the_rate_with_the_lowest_mean_loss_is_reported_at_every_seed():
    # rate 1: losses 0.5 / 0.9 (mean 0.7), rate 10: 0.6 / 0.7 (mean 0.65)
    cells = [
        made_cell(0, 1.0, 0.5, 0.9),
        made_cell(1, 1.0, 0.9, 0.3),
        made_cell(0, 10.0, 0.6, 0.8),
        made_cell(1, 10.0, 0.7, 0.6),
    ]
    result = grid.aggregate(cells, TWO_RATES)["majority"]["learned"]
    assert result["position_lr_scale"] == 10.0
    assert result["lengths"]["16"]["token"]["by_seed"] == [0.8, 0.6]
    assert result["final_train_loss"]["mean"] == pytest.approx(0.65)
    assert result["rates"] == {
        "1": {"final_train_loss": pytest.approx(0.7), "token": pytest.approx(0.6)},
        "10": {"final_train_loss": pytest.approx(0.65), "token": pytest.approx(0.7)},
    }
    markdown = results_markdown(grid.aggregate(cells, TWO_RATES), TWO_RATES)
    assert "## Positional rate" in markdown and "| `learned` | x10 |" in markdown


def test_a_tie_keeps_the_first_candidate_and_one_rate_adds_no_section():
    cells = [made_cell(0, 1.0, 0.5, 0.1), made_cell(0, 10.0, 0.5, 0.9)]
    settings = preset("smoke", tasks=["majority"], encodings=["learned"], seeds=1,
                      test_lens=[16], position_lr_scales=[1.0, 10.0])  # fmt: skip
    assert grid.aggregate(cells, settings)["majority"]["learned"]["position_lr_scale"] == 1.0
    one = preset("smoke", tasks=["majority"], encodings=["learned"], seeds=1, test_lens=[16])
    results = grid.aggregate([made_cell(0, 10.0, 0.5, 0.9)], one)
    assert results["majority"]["learned"]["position_lr_scale"] == 10.0
    assert "Positional rate" not in results_markdown(results, one)


def test_a_rates_cells_keep_the_fingerprint_of_a_run_of_that_rate_alone():
    both, alone = preset("smoke", position_lr_scales=[1.0, 10.0]), preset("smoke")
    assert alone.position_lr_scales == [10.0]
    assert both.cell_fingerprint("learned", 10.0) == alone.cell_fingerprint("learned")
    assert both.cell_fingerprint("learned", 1.0) != both.cell_fingerprint("learned", 10.0)
    probe = both.cell_settings("learned", 1.0)["probe"]
    assert probe["position_lr_scale"] == 1.0 and "position_lr_scales" not in probe


def test_a_cell_of_a_one_rate_run_is_reused_and_the_other_rate_trained(tmp_path, monkeypatch):
    trained = []

    one_rate = preset("smoke", tasks=["majority"], encodings=["learned"], seeds=1)
    stored = {**made_cell(0, 10.0, 0.4, 0.7), "fingerprint": one_rate.cell_fingerprint("learned")}
    del stored["position_lr_scale"]  # cells of one-rate runs did not record it
    path = grid.single_rate_path(tmp_path, "majority", "learned", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(stored))
    monkeypatch.setattr(grid, "compute_cell", compute_without_training(trained))
    both = preset("smoke", tasks=["majority"], encodings=["learned"], seeds=1,
                  position_lr_scales=[1.0, 10.0])  # fmt: skip
    cells = grid.run_cells(both, tmp_path, Console(quiet=True))
    assert trained == [("learned", 1.0)]
    assert [(c["position_lr_scale"], c["final_train_loss"]) for c in cells] == [
        (1.0, 0.5),
        (10.0, 0.4),
    ]


def test_an_encoding_without_parameters_trains_at_the_first_rate_alone(tmp_path, monkeypatch):
    trained = []

    monkeypatch.setattr(grid, "compute_cell", compute_without_training(trained))
    encodings = ["none", "alibi", "rope", "learned"]
    settings = preset("smoke", tasks=["majority"], encodings=encodings, seeds=1,
                      test_lens=[16], position_lr_scales=[1.0, 10.0])  # fmt: skip
    cells = grid.run_cells(settings, tmp_path, Console(quiet=True))
    assert trained == [("none", 1.0), ("alibi", 1.0), ("rope", 1.0), ("learned", 1.0),
                       ("learned", 10.0)]  # fmt: skip
    results = grid.aggregate(cells, settings)["majority"]
    assert list(results["none"]["rates"]) == ["1"] and list(results["learned"]["rates"]) == [
        "1",
        "10",
    ]
    assert "| `none` | - |" in results_markdown(grid.aggregate(cells, settings), settings)


def test_the_encodings_parameters_train_at_the_cells_rate(monkeypatch):
    rates = []

    def recorded(groups, **kwargs):
        rates.append([group.get("lr", kwargs["lr"]) for group in groups])
        raise SystemExit  # the optimizer's groups are all this test reads

    monkeypatch.setattr(torch.optim, "AdamW", recorded)
    settings = preset("smoke", position_lr_scales=[1.0, 10.0])
    for scale in (None, 10.0):
        with pytest.raises(SystemExit):
            probe_cell.run_cell(probe_task("majority"), "diet-rel", 0, settings, "cpu", scale)
    base = settings.learning_rate
    assert rates == [[base * 1.0, base], [base * 10.0, base]]


def test_a_two_rate_run_reports_the_rate_of_its_lower_loss(tmp_path):
    run = tmp_path / "run"
    args = ["probe", "--preset", "smoke", "--output", str(run), "--tasks", "majority"]
    main([*args, "--encodings", "diet-rel", "--steps", "30", "--position-lr-scales", "1,10"])
    output = json.loads((run / "results.json").read_text())
    assert output["settings"]["position_lr_scales"] == [1.0, 10.0]
    result = output["results"]["majority"]["diet-rel"]
    losses = {
        scale: json.loads(grid.cell_path(run, "majority", "diet-rel", 0, scale).read_text())[
            "final_train_loss"
        ]
        for scale in (1.0, 10.0)
    }
    assert result["position_lr_scale"] == min(losses, key=losses.get)
    assert result["rates"]["1"]["final_train_loss"] == pytest.approx(losses[1.0])
    assert result["final_train_loss"]["mean"] == statistics.fmean([min(losses.values())])
    assert "| `diet-rel` | x" in (run / "results.md").read_text()


@pytest.mark.parametrize("value", ["0", "1,1", "fast", "", "-1", "inf"])
def test_bad_rates_are_refused_by_name(value, tmp_path):
    with pytest.raises(PosAttnConfigError, match="--position-lr-scales"):
        main(["probe", "--preset", "smoke", "--output", str(tmp_path), "--position-lr-scales",
              value])  # fmt: skip


def test_settings_refuse_an_empty_or_repeated_list():
    for scales in ([], [1.0, 1.0], [0.0]):
        with pytest.raises(PosAttnConfigError, match="position_lr_scales"):
            preset("smoke", position_lr_scales=scales)


def test_linformers_sequence_projections_keep_the_shared_rate(monkeypatch):
    """As in `posattn pretrain`: the rate reaches the position terms alone, and the cells of
    an encoding that holds other parameters say so in their fingerprint (cells from before
    trained E and F at the positional rate)."""
    groups_seen = []

    def recorded(groups, **kwargs):
        groups_seen.append([len(group["params"]) for group in groups])
        raise SystemExit

    monkeypatch.setattr(torch.optim, "AdamW", recorded)
    settings = preset("smoke")
    with pytest.raises(SystemExit):
        probe_cell.run_cell(probe_task("majority"), "linformer", 0, settings)
    model = probe_cell.build_model(probe_task("majority"), "linformer", settings)
    encoding = probe_cell.encoding_of(model)
    positional = encoding.positional_parameters()
    assert 0 < len(positional) < len(list(encoding.parameters()))  # E and F left out
    assert groups_seen == [[len(positional), len(list(model.parameters())) - len(positional)]]
    assert settings.cell_settings("linformer")["probe"]["rate_reaches"] == "positional parameters"
    assert "rate_reaches" not in settings.cell_settings("learned")["probe"]
