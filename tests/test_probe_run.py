"""`posattn probe` in the smoke setting: outputs, the learning sanity check, position tables
that stop at max_len, the pairings against reference encodings, unsupported pairs, metrics,
resuming a killed run, bad input."""

from __future__ import annotations

import json
import random
import shutil
from types import SimpleNamespace

import pytest
import torch

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.probe import grid
from posattn.lab.probe.cell import PAST_MAX_LEN, evaluate, run_cell
from posattn.lab.probe.report import results_markdown
from posattn.lab.probe.settings import preset
from posattn.lab.probe.tasks import IGNORE, probe_task


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """relative + majority x diet-rel + learned, one seed, train_len 16, tests at 16 and 32."""
    output = tmp_path_factory.mktemp("probe") / "run"
    assert main(["probe", "--preset", "smoke", "--output", str(output)]) == 0
    return output


def test_outputs_of_a_run(smoke_run):
    for name in ("config.yaml", "results.json", "results.md"):
        assert (smoke_run / name).is_file()
    for task in ("relative", "majority"):
        assert (smoke_run / f"accuracy-{task}.png").stat().st_size > 1000
    assert len(list((smoke_run / "cells").glob("*.json"))) == 4
    table = (smoke_run / "results.md").read_text()
    assert "| encoding | relative @16 | relative @32 | majority @16 | majority @32 |" in table
    assert "`learned` |" in table and "`diet-rel` |" in table
    assert "(causal-lm)" in table and "(encoder-tagging)" in table


def test_a_relative_encoding_learns_the_relative_offset_task(smoke_run):
    """The learning sanity check: DIET-REL on "the token 2 places back" at the training length."""
    results = json.loads((smoke_run / "results.json").read_text())["results"]
    at_train_len = results["relative"]["diet-rel"]["lengths"]["16"]
    assert at_train_len["token"]["mean"] >= 0.9
    assert at_train_len["exact"]["mean"] >= 0.5


def test_position_tables_stop_at_max_len(smoke_run):
    results = json.loads((smoke_run / "results.json").read_text())["results"]
    learned = results["relative"]["learned"]["lengths"]
    assert "token" in learned["16"] and learned["32"] == {"status": PAST_MAX_LEN}
    assert "token" in results["relative"]["diet-rel"]["lengths"]["32"]  # any length
    assert f"| {PAST_MAX_LEN} |" in (smoke_run / "results.md").read_text()


def test_a_killed_run_redoes_only_its_unfinished_cells(smoke_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    before = json.loads((run / "results.json").read_text())["results"]
    # the kill: one cell never finished (only its partial file exists), results not written
    lost = run / "cells" / "majority__learned__lr10__seed0.json"
    lost.rename(lost.with_name(lost.name + ".partial"))
    (run / "results.json").unlink()
    computed = []
    real_compute = grid.compute_cell

    def counting_compute(task, encoding, seed, scale, settings, path, device):
        computed.append((task, encoding, seed))
        return real_compute(task, encoding, seed, scale, settings, path, device)

    monkeypatch.setattr(grid, "compute_cell", counting_compute)
    main(["probe", "--preset", "smoke", "--output", str(run)])
    assert computed == [("majority", "learned", 0)]
    after = json.loads((run / "results.json").read_text())["results"]
    assert after == before  # the same seed gives the same cell
    # other settings do not reuse the stored cells
    computed.clear()
    main(
        ["probe", "--preset", "smoke", "--output", str(run), "--steps", "1", "--tasks", "majority"]
    )
    assert len(computed) == 2


def test_a_run_writes_its_pairings_and_resummarises_without_training(
    tmp_path, monkeypatch, smoke_run
):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    output = json.loads((run / "results.json").read_text())
    one_seed = output["paired"]["learned"]["relative"]["diet-rel"]["16"]["token"]
    results = output["results"]["relative"]
    mine, theirs = (results[e]["lengths"]["16"]["token"]["mean"] for e in ("diet-rel", "learned"))
    assert one_seed["difference"] == pytest.approx(100 * (mine - theirs))
    assert one_seed["interval"] is None and one_seed["runs"] == 1
    assert "(one seed)" in (run / "results.md").read_text()

    def no_training(*args):
        raise AssertionError("a stored cell was trained again")

    monkeypatch.setattr(grid, "compute_cell", no_training)
    main(["probe", "--preset", "smoke", "--output", str(run), "--paired-with", "diet-rel"])
    again = json.loads((run / "results.json").read_text())
    assert list(again["paired"]) == ["diet-rel"]
    flipped = again["paired"]["diet-rel"]["relative"]["learned"]["16"]["token"]
    assert flipped["difference"] == pytest.approx(-one_seed["difference"])
    main(["probe", "--preset", "smoke", "--output", str(run), "--paired-with", ""])
    assert json.loads((run / "results.json").read_text())["paired"] == {}
    assert "Paired against" not in (run / "results.md").read_text()


def test_unsupported_pairs_are_reported_not_raised():
    settings = preset("smoke")
    encoder_task = run_cell(probe_task("majority"), "xpos", 0, settings)
    assert encoder_task["status"] == "unsupported" and "causal" in encoder_task["reason"]
    causal_task = run_cell(probe_task("relative"), "linformer", 0, settings)
    assert causal_task["status"] == "unsupported" and "bidirectional" in causal_task["reason"]
    settings = preset("smoke", encodings=["xpos"], tasks=["majority"])
    results = grid.aggregate([{**encoder_task, "seed": 0}], settings)
    assert "n/a: causal only" in results_markdown(results, settings)


class ScriptedModel:
    """Returns logits that pick the target everywhere, except a wrong answer at the first
    scored position of the examples listed in `wrong`."""

    config = SimpleNamespace(segments="input")  # a model that reads segment ids

    def __init__(self, wrong: set[int]) -> None:
        self.wrong, self.seen = wrong, 0

    def eval(self):
        return self

    def parameters(self):
        yield torch.zeros(())  # on the CPU, where evaluate then puts the batches

    def __call__(self, input_ids, attention_mask, token_type_ids):
        targets = self.batches.pop(0)["targets"]
        picks = targets.clamp(min=0).clone()
        for row in range(targets.shape[0]):
            if self.seen + row in self.wrong:
                first = int((targets[row] != IGNORE).nonzero()[0])
                picks[row, first] = (picks[row, first] + 1) % 10
        self.seen += targets.shape[0]
        return SimpleNamespace(logits=torch.nn.functional.one_hot(picks, 200).double())


def test_metrics_are_token_accuracy_and_exact_match(monkeypatch):
    """Against counts made by hand: 3 of 20 examples get one scored token wrong."""
    task = probe_task("relative")
    model = ScriptedModel(wrong={0, 7, 19})
    recorded = []
    real_batch = type(task).batch

    def recording_batch(self, rng, size, length):
        batch = real_batch(self, rng, size, length)
        recorded.append(batch)
        return batch

    monkeypatch.setattr(type(task), "batch", recording_batch)
    model.batches = recorded
    metrics = evaluate(model, task, 16, 20, seed=0)
    scored = 20 * (16 - 3)  # relative: positions 3..15 of every example
    assert metrics == {"token": (scored - 3) / scored, "exact": 17 / 20}


def test_bad_settings_name_the_parameter():
    with pytest.raises(PosAttnConfigError, match="test_lens"):
        preset("smoke", test_lens=[8])
    with pytest.raises(PosAttnConfigError, match=r"^encodings='nope'.* 'learned'"):
        preset("smoke", encodings=["nope"])
    with pytest.raises(PosAttnConfigError, match=r"^--encodings='nope'.* 'learned'"):
        main(["probe", "--preset", "smoke", "--encodings", "nope"])
    with pytest.raises(PosAttnConfigError, match="--test-lens"):
        main(["probe", "--preset", "smoke", "--test-lens", "16,x"])
    # the parser bench's lengths use: a length below 1 is named as the option given
    with pytest.raises(PosAttnConfigError, match=r"--test-lens='16,-8'.*positive integers"):
        main(["probe", "--preset", "smoke", "--test-lens", "16,-8"])
    with pytest.raises(PosAttnConfigError, match="--preset"):
        main(["probe", "--preset", "huge"])
    with pytest.raises(PosAttnConfigError, match="train_len"):
        preset("smoke", train_len=3, test_lens=[3])
    # a head size that does not divide the width is refused, not run as "unsupported" cells
    with pytest.raises(PosAttnConfigError, match=r"^--d-model=60 .*number of heads, 8,"):
        main(["probe", "--preset", "smoke", "--d-model", "60", "--num-heads", "8"])


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--seeds", "0"], "--seeds=0"),
        (["--train-len", "1"], "--train-len=1"),
        (["--steps", "0"], "--steps=0"),
        (["--workers", "0"], "--workers=0"),
        (["--segments", "inside"], "--segments='inside'"),
        (["--word-scale", "-1"], "--word-scale=-1.0"),
        (["--test-lens", "8"], "--test-lens=[8]"),
        (["--paired-with", "rope"], "--paired-with='rope'"),
    ],
)
def test_the_command_names_bad_settings_by_their_flags(flags, named):
    """The command line's bad values are named as typed (--train-len), not by the settings'
    Python names (train_len), which the API keeps."""
    with pytest.raises(PosAttnConfigError) as error:
        main(["probe", "--preset", "smoke", *flags])
    assert str(error.value).startswith(f"{named} is not allowed")


def test_the_model_size_options_reach_the_cells(tmp_path, monkeypatch):
    seen = []

    def recording(task, encoding, seed, scale, settings, path, device):
        seen.append((settings["d_model"], settings["num_heads"]))
        raise SystemExit(0)  # nothing needs training to see the settings

    monkeypatch.setattr(grid, "compute_cell", recording)
    args = ["probe", "--preset", "smoke", "--output", str(tmp_path / "run"), "--tasks", "majority"]
    with pytest.raises(SystemExit):
        main([*args, "--encodings", "learned", "--d-model", "32", "--num-heads", "2"])
    assert seen == [(32, 2)]


def test_training_is_deterministic_for_a_seed():
    settings = preset("smoke", steps=5, test_lens=[16])
    with grid.torch_threads(1):
        first = run_cell(probe_task("majority"), "diet-rel", 3, settings)
        again = run_cell(probe_task("majority"), "diet-rel", 3, settings)
        random.seed(0)  # the global random state plays no part
        third = run_cell(probe_task("majority"), "diet-rel", 3, settings)
    assert first["lengths"] == again["lengths"]
    assert first["final_train_loss"] == again["final_train_loss"]
    assert third["final_train_loss"] == first["final_train_loss"]


def test_a_failed_cell_ends_the_run_without_training_the_rest(tmp_path):
    """Two worker processes; the first cell cannot be stored (a folder stands at its path):
    the error comes back, and the cells not started by then are not trained."""
    run = tmp_path / "run"
    blocked = grid.cell_path(run, "majority", "learned", 0, 10.0)
    blocked.mkdir(parents=True)
    seeds = 12
    args = ["probe", "--preset", "smoke", "--output", str(run), "--tasks", "majority"]
    args += ["--encodings", "learned,none", "--seeds", str(seeds), "--steps", "20"]
    with pytest.raises(IsADirectoryError):
        main([*args, "--workers", "2"])
    stored = list((run / "cells").glob("*.json"))
    # those running or queued to a worker when it failed, not the other 23 of 2 x 12 cells
    assert len(stored) <= seeds, [path.name for path in stored]
