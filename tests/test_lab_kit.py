"""The lab's shared kit (lab/runs/): markdown tables, the verdict rule, run fingerprints."""

from __future__ import annotations

import pytest

from posattn import PosAttnConfigError
from posattn.lab.pretraining.summary import (
    baselines_table,
    difference_text,
    loss_cell,
    score_cell,
)
from posattn.lab.probe.report import difference_text as probe_difference_text
from posattn.lab.runs.tables import estimate_text, markdown_table, table_lines
from posattn.lab.translation.seed_pairs import difference_cell


def test_markdown_table_writes_header_rule_and_rows():
    text = markdown_table(["encoding", "n"], [["`learned`", 3], ["`t5`", 1.5]])
    assert text == "| encoding | n |\n|---|---|\n| `learned` | 3 |\n| `t5` | 1.5 |"
    assert table_lines(["a"], []) == ["| a |", "|---|"]


def test_markdown_table_aligns_columns_and_rejects_ragged_rows():
    lines = table_lines(["a", "b", "c", "d"], [], align=[None, "left", "right", "center"])
    assert lines[1] == "|---|:---|---:|:---:|"
    with pytest.raises(ValueError, match="3 cells under 2 columns"):
        table_lines(["a", "b"], [[1, 2, 3]])
    with pytest.raises(ValueError, match="alignment"):
        table_lines(["a"], [], align=["middle"])


def test_estimate_text_writes_value_and_interval_alike():
    assert estimate_text(1.25, (-0.349, 2.71), signed=True) == "+1.2 [-0.3, +2.7]"
    assert estimate_text(0.5124, [0.4981, 0.5262], digits=3) == "0.512 [0.498, 0.526]"
    assert estimate_text(-0.0004, None, digits=3, signed=True) == "-0.000"
    assert estimate_text(7.0, None, without_interval=" (one seed)") == "7.0 (one seed)"


def test_every_report_writes_its_estimates_through_one_format():
    # pretraining, probes and translation read the same dicts of statistics.paired_permutation
    paired = {"difference": 2.345, "interval": [-1.05, 5.75]}
    alone = {"difference": -0.5, "interval": None}
    assert difference_text(paired) == "+2.3 [-1.1, +5.8]"
    assert difference_text(paired, digits=2) == difference_cell(paired, 2) == "+2.35 [-1.05, +5.75]"
    assert difference_text(alone) == "-0.5" and difference_text(None) == "-"
    assert probe_difference_text(paired) == "+2.3 [-1.1, +5.8]"
    assert probe_difference_text(alone) == "-0.5 (one seed)"
    assert probe_difference_text({"status": "unsupported"}) == "n/a"
    assert score_cell({"mean": 71.25, "interval": [65.0, 77.55]}) == "71.2 [65.0, 77.5]"
    assert score_cell({"mean": 71.25, "interval": None}) == "71.2" and score_cell(None) == "-"
    one = {"pretrain": {"0": {"final_eval_loss": 5.1234}}}
    assert loss_cell(one) == "5.123"
    two = {"pretrain": {"0": {"final_eval_loss": 5.0}, "1": {"final_eval_loss": 6.0}}}
    # mean 5.5, sd 0.7071, t(0.975, 1) = 12.706: half-width 6.353
    assert loss_cell(two) == "5.500 [-0.853, 11.853]"


def test_baselines_table_has_a_row_per_baseline_that_scored_somewhere():
    table = {
        "topic": {"majority": 25.0, "bag_of_words": 61.26, "word_overlap": None},
        "mnli": {"majority": 35.4, "bag_of_words": 40.0, "word_overlap": 41.04},
    }
    assert baselines_table(table, ["topic", "mnli"]).splitlines() == [
        "| baseline | topic | mnli |",
        "|---|---|---|",
        "| majority | 25.0 | 35.4 |",
        "| bag of words | 61.3 | 40.0 |",
        "| word overlap | - | 41.0 |",
    ]
    by_language = baselines_table({"de": {"majority": 50.0}}, ["de"], "baseline (on English)")
    assert by_language.splitlines()[0] == "| baseline (on English) | de |"
    assert by_language.splitlines()[2:] == ["| majority | 50.0 |"]


def test_verdict_names_a_clear_winner_only_without_overlap():
    from posattn.lab.runs.verdicts import Spread, clear_best, clear_worst, verdict_lines

    apart = {"a": Spread.of([80, 81, 82]), "b": Spread.of([70, 75, 79]), "c": Spread.of([60, 61])}
    assert clear_best(apart) == "a" and clear_worst(apart) == "c"
    assert verdict_lines("sentiment", apart, worst=True) == [
        "- sentiment: `a` is best on every seed (its spread overlaps no other).",
        "- sentiment: `c` is worst on every seed (its spread overlaps no other).",
    ]
    # b's best seed ties a's worst: overlapping spreads name no winner, only the highest median
    overlap = {"a": Spread.of([79, 81, 82]), "b": Spread.of([70, 75, 79])}
    assert clear_best(overlap) is None
    assert verdict_lines("topic", overlap) == [
        "- topic: highest median `a`, but seed spreads overlap: no clear winner."
    ]
    # lower is better (a loss): the clear worst is the highest loss, among three or more only
    losses = {"a": Spread.of([2.0, 2.1]), "b": Spread.of([1.0, 1.2]), "c": Spread.of([1.1, 1.3])}
    assert clear_best(losses, higher_is_better=False) is None  # b and c overlap
    assert clear_worst(losses, higher_is_better=False) == "a"
    assert verdict_lines("dev loss", losses, higher_is_better=False, worst=True) == [
        "- dev loss: lowest median `b`, but seed spreads overlap: no clear winner.",
        "- dev loss: `a` is worst on every seed (its spread overlaps no other).",
    ]
    assert clear_worst({"a": Spread.of([1]), "b": Spread.of([2])}) is None
    assert clear_best({"only": Spread.of([1, 2])}) is None


def test_fingerprint_is_stable_and_names_what_differs():
    from posattn.lab.runs.config import StepSection
    from posattn.lab.runs.fingerprint import differences, fingerprint, run_settings

    a = run_settings(pretrain=StepSection(), model={"b": 1, "a": [1, 2]})
    assert fingerprint(a) == fingerprint(
        run_settings(model={"a": [1, 2], "b": 1}, pretrain=StepSection())
    )
    b = run_settings(pretrain=StepSection(steps=7), model={"b": 1, "a": [1, 2]})
    assert fingerprint(a) != fingerprint(b) and a["posattn"]
    assert differences(a, b) == ["pretrain.steps: 300 -> 7"]
    assert differences({"x": 1}, {"y": 1}) == ["x: 1 -> (absent)", "y: (absent) -> 1"]


def test_a_stage_resumes_or_is_reused_only_with_its_own_settings(tmp_path):
    from posattn import PosAttnConfigError
    from posattn.lab.runs.fingerprint import run_settings
    from posattn.lab.runs.stages import FINISHED, FRESH, RESUME, Stage, stage_state, start_stage

    old = Stage(tmp_path / "stage", run_settings(train={"steps": 10}), marker="metrics.json")
    new = Stage(old.directory, run_settings(train={"steps": 20}), marker="metrics.json")
    assert stage_state(old) == FRESH
    assert start_stage(old) is None and old.record()["fingerprint"] == old.fingerprint
    (old.directory / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    assert stage_state(old) == RESUME
    assert start_stage(old, resume=True).endswith("checkpoint-5")
    for attempt in (lambda: stage_state(new), lambda: start_stage(new, resume=True)):
        with pytest.raises(PosAttnConfigError, match=r"train\.steps: 10 -> 20"):
            attempt()
    (old.directory / "metrics.json").write_text("{}")
    assert stage_state(old) == FINISHED
    assert stage_state(new, overwrite=True) == FRESH and not old.directory.exists()
    # outputs without a stage.json (an older posattn) cannot be told apart: refused too
    (old.directory / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    with pytest.raises(PosAttnConfigError, match=r"settings are unknown.*--overwrite"):
        stage_state(old)


def test_model_card_names_encoding_paper_options_run_and_metrics(tmp_path):
    from huggingface_hub import ModelCard

    from posattn import PosAttnConfig
    from posattn.lab.pretraining.runconfig import load_run_config
    from posattn.lab.runs.model_card import write_model_card

    config = PosAttnConfig(
        encoding="diet-rel",
        encoding_options={"max_distance": 5},
        num_layers=2,
        d_model=32,
        num_heads=4,
    )
    run = load_run_config(preset="smoke", overrides=["pretrain.steps=7"])
    metrics = {"final_eval_loss": 5.25, "eval_loss": [[1, 6.0]], "steps": 7}
    card = ModelCard.load(write_model_card(tmp_path, config, run, metrics, kind="masked LM"))
    assert card.data.library_name == "posattn" and "diet-rel" in card.data.tags
    text = card.text
    assert "Chen et al. 2021 (DIET), DIET Eq. 3" in text
    assert '`{"max_distance": 5}`' in text and "2 layers, d_model 32" in text
    assert "steps: 7" in text  # the run config, as YAML
    assert "| final_eval_loss | 5.25 |" in text and "| eval_loss |" not in text


class _Tokenizer:
    pad_token_id = 0

    def __len__(self) -> int:
        return 50


def test_an_untied_mlm_decoder_keeps_absent_tokens_out_of_the_embeddings(tmp_path):
    import torch

    from posattn.lab.pretraining.pretrain import model_config, pretrain_stage
    from posattn.lab.pretraining.runconfig import load_run_config
    from posattn.models import PosAttnForMaskedLM

    tied = load_run_config("smoke")
    untied = load_run_config("smoke", None, ["model.tie_word_embeddings=false"])
    # Added after results existed: at its default it leaves the fingerprint as it was.
    assert "tie_word_embeddings" not in pretrain_stage(tied, tmp_path).settings["model"]
    assert pretrain_stage(untied, tmp_path).settings["model"]["tie_word_embeddings"] is False
    assert (
        pretrain_stage(untied, tmp_path).fingerprint != pretrain_stage(tied, tmp_path).fingerprint
    )
    ids = torch.tensor([[2, 5, 6, 7, 3]])
    labels = torch.tensor([[-100, 5, -100, -100, -100]])
    absent = torch.ones(50, dtype=torch.bool)
    absent[ids[0]] = False
    for config, leaks in ((tied, True), (untied, False)):
        torch.manual_seed(0)
        model = PosAttnForMaskedLM(model_config(config, _Tokenizer()))
        word = model.posattn.encoder.embeddings.word.weight
        assert (model.head.decoder.weight is word) == leaks
        model(input_ids=ids, labels=labels).loss.backward()
        # The softmax's push on every token reaches the input rows only through a tied decoder.
        assert bool(word.grad[absent].abs().sum() > 0) == leaks
        assert word.grad[~absent].abs().sum() > 0


def test_word_scale_reaches_the_model_and_enters_fingerprints_only_when_set(tmp_path):
    """model.word_scale, added after results existed: at its default (None) the pretraining
    and translation stages keep the settings they had; set, it is in them and in the model."""
    from posattn.lab.pretraining.pretrain import model_config, pretrain_stage
    from posattn.lab.pretraining.runconfig import load_run_config
    from posattn.lab.translation.runconfig import load_translation_config
    from posattn.lab.translation.train import translation_stage
    from posattn.models import PosAttnForMaskedLM

    plain = load_run_config("smoke")
    scaled = load_run_config("smoke", None, ["model.word_scale=50"])
    assert "word_scale" not in pretrain_stage(plain, tmp_path).settings["model"]
    assert pretrain_stage(scaled, tmp_path).settings["model"]["word_scale"] == 50.0
    fingerprints = {pretrain_stage(c, tmp_path).fingerprint for c in (plain, scaled)}
    assert len(fingerprints) == 2
    model = PosAttnForMaskedLM(model_config(scaled, _Tokenizer()))
    assert model.get_input_embeddings().scale == 50.0
    assert PosAttnForMaskedLM(model_config(plain, _Tokenizer())).get_input_embeddings().scale == 1
    translation = load_translation_config("smoke")
    assert "word_scale" not in translation_stage(translation, tmp_path).settings["model"]
    with pytest.raises(PosAttnConfigError, match=r"^model\.word_scale=0\.0 is not allowed"):
        load_run_config("smoke", None, ["model.word_scale=0"])
