"""`trainer.positional_lr_scale`: the positional encodings' parameters get lr * scale in their
own optimiser groups, everything else is trained as before, and the knob joins a run's
fingerprint only when it differs from 1."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config
from transformers import TrainingArguments

from posattn import PosAttnForMaskedLM
from posattn.encodings import ENCODINGS
from posattn.errors import PosAttnConfigError
from posattn.lab.runs.param_groups import positional_parameter_ids
from posattn.lab.runs.trainer import AtomicCheckpointTrainer
from posattn.lab.runs.trainer_section import TrainerSection, trainer_arguments


def trainer_for(model, scale: float, tmp_path) -> AtomicCheckpointTrainer:
    args = TrainingArguments(
        output_dir=str(tmp_path),
        learning_rate=1e-3,
        weight_decay=0.01,
        warmup_steps=2,
        report_to="none",
        use_cpu=True,
    )
    return AtomicCheckpointTrainer(model=model, args=args, positional_lr_scale=scale)


@pytest.mark.parametrize("encoding", ["diet-rel", "t5", "tupe-r"])
def test_positional_parameters_get_the_scaled_rate_through_warm_up_and_decay(encoding, tmp_path):
    model = PosAttnForMaskedLM(tiny_config(encoding))
    positional = positional_parameter_ids(model)
    expected = {id(p) for p in model.posattn.encoder.encoding.parameters()}
    assert positional == expected and positional
    scaled = trainer_for(model, 10.0, tmp_path)
    plain = trainer_for(PosAttnForMaskedLM(tiny_config(encoding)), 1.0, tmp_path / "plain")
    for trainer in (scaled, plain):
        trainer.create_optimizer_and_scheduler(num_training_steps=10)
    seen = [id(p) for group in scaled.optimizer.param_groups for p in group["params"]]
    assert sorted(seen) == sorted(id(p) for p in model.parameters())  # each exactly once
    for step in range(6):
        for group in scaled.optimizer.param_groups:
            ids = {id(p) for p in group["params"]}
            assert ids <= positional or not ids & positional  # groups are never mixed
            base = plain.optimizer.param_groups[0]["lr"]
            factor = 10.0 if ids <= positional else 1.0
            assert group["lr"] == pytest.approx(base * factor, rel=1e-12), step
        for trainer in (scaled, plain):
            trainer.optimizer.step()
            trainer.lr_scheduler.step()
    decays = {g["weight_decay"] for g in scaled.optimizer.param_groups}
    assert decays == {0.0, 0.01}


def test_a_training_step_moves_a_table_ten_times_as_far_under_adam(tmp_path):
    """Adam's first step moves every parameter by lr (the normalised gradient is +-1), so
    the scaled table's entries move 10x as far as with the plain rate."""
    moves = []
    for scale in (1.0, 10.0):
        torch.manual_seed(0)
        model = PosAttnForMaskedLM(tiny_config("diet-rel"))
        table = model.posattn.encoder.encoding.table
        before = table.detach().clone()
        trainer = trainer_for(model, scale, tmp_path / str(scale))
        trainer.args.warmup_steps, trainer.args.weight_decay = 0, 0.0
        trainer.create_optimizer_and_scheduler(num_training_steps=10)
        ids = torch.randint(4, 30, (2, 9), generator=torch.Generator().manual_seed(1))
        model(ids, labels=ids).loss.backward()
        trainer.optimizer.step()
        moves.append((table.detach() - before).abs().max().item())
    assert moves[0] == pytest.approx(1e-3, rel=1e-3)
    assert moves[1] == pytest.approx(1e-2, rel=1e-3)


def test_the_knob_is_checked_kept_from_training_arguments_and_fingerprinted():
    from posattn.lab.translation.runconfig import load_translation_config

    with pytest.raises(PosAttnConfigError, match="positional_lr_scale"):
        load_translation_config("smoke", overrides=["trainer.positional_lr_scale=0"])
    config = load_translation_config("smoke", overrides=["trainer.positional_lr_scale=10"])
    assert config.trainer.positional_lr_scale == 10
    assert "positional_lr_scale" not in trainer_arguments(config.trainer, cuda=False)
    assert config.trainer.result_settings() == {"positional_lr_scale": 10}
    assert TrainerSection().result_settings() == {}  # default runs keep their fingerprint


@pytest.mark.parametrize("encoding", ["sinusoidal", "rope", "alibi"])
def test_a_scale_that_reaches_no_parameter_is_refused_naming_the_knob(encoding, tmp_path):
    """posattn pretrain / finetune / translate with the knob on an encoding without
    positional parameters would train exactly as at 1.0 under another fingerprint."""
    model = PosAttnForMaskedLM(tiny_config(encoding))
    assert not positional_parameter_ids(model)
    with pytest.raises(PosAttnConfigError, match=rf"positional_lr_scale=10.0.*'{encoding}'"):
        trainer_for(model, 10.0, tmp_path).create_optimizer_and_scheduler(num_training_steps=4)
    plain = trainer_for(PosAttnForMaskedLM(tiny_config(encoding)), 1.0, tmp_path / "plain")
    plain.create_optimizer_and_scheduler(num_training_steps=4)  # the default stays accepted
    assert len(plain.optimizer.param_groups) == 2


def rates_by_name(trainer, module) -> dict[str, float]:
    rates = {id(p): g["lr"] for g in trainer.optimizer.param_groups for p in g["params"]}
    return {
        name: rates[id(p)] / trainer.args.learning_rate for name, p in module.named_parameters()
    }


@pytest.mark.parametrize(
    ("encoding", "options", "scaled"),
    [
        ("diet-abs-lin", {}, {"query", "key"}),
        ("linformer", {}, {"absolute.table.weight"}),
        ("linformer", {"share_kv": True}, {"absolute.table.weight"}),
    ],
)
def test_linformer_projections_keep_the_run_rate_and_its_position_terms_are_scaled(
    encoding, options, scaled, tmp_path
):
    """E and F are the attention's sequence projections, not a position term: a positional
    rate moves DIET-ABS's factors or BERT's input table alone."""
    model = PosAttnForMaskedLM(tiny_config(encoding, encoding_options=options))
    encoding_module = model.posattn.encoder.encoding
    names = {name for name, _ in encoding_module.named_parameters()}
    assert "key_projection" in names
    assert {
        n for n, p in encoding_module.named_parameters() if id(p) in positional_parameter_ids(model)
    } == scaled
    trainer = trainer_for(model, 10.0, tmp_path)
    trainer.args.warmup_steps = 0
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    rates = rates_by_name(trainer, encoding_module)
    assert rates == pytest.approx({n: 10.0 if n in scaled else 1.0 for n in rates})


def test_linformer_without_input_positions_has_no_positional_rate_to_scale(tmp_path):
    model = PosAttnForMaskedLM(
        tiny_config("linformer", encoding_options={"input_positions": False})
    )
    assert list(model.posattn.encoder.encoding.parameters())  # E and F
    assert not positional_parameter_ids(model)
    with pytest.raises(PosAttnConfigError, match=r"positional_lr_scale=10.0.*'linformer'"):
        trainer_for(model, 10.0, tmp_path).create_optimizer_and_scheduler(num_training_steps=4)


def test_bert_rs_input_table_takes_its_own_rate_beside_the_t5_tables(tmp_path):
    """BERT-R at positional_lr_scale=10 trained its input table at 10x too; with
    input_positions_lr_scale=1 only T5's bucket table moves ten times as far."""
    model = PosAttnForMaskedLM(tiny_config("bert-r"))
    encoding = model.posattn.encoder.encoding
    trainer = trainer_for(model, 10.0, tmp_path)
    trainer.input_positions_lr_scale = 1.0
    trainer.args.warmup_steps, trainer.args.weight_decay = 0, 0.0
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    rates = rates_by_name(trainer, encoding)
    assert set(rates) == {"relative.weight", "absolute.table.weight"}
    assert rates == pytest.approx({"relative.weight": 10.0, "absolute.table.weight": 1.0})
    outside = [p for n, p in model.named_parameters() if not n.startswith("posattn.encoder.enc")]
    groups = {id(p): g for g in trainer.optimizer.param_groups for p in g["params"]}
    assert {groups[id(p)]["lr"] for p in outside} == {trainer.args.learning_rate}
    # Adam's first step moves each entry by its group's rate
    before = {n: p.detach().clone() for n, p in encoding.named_parameters()}
    ids = torch.randint(4, 30, (2, 9), generator=torch.Generator().manual_seed(1))
    model(ids, labels=ids).loss.backward()
    trainer.optimizer.step()
    moves = {n: (p.detach() - before[n]).abs().max().item() for n, p in encoding.named_parameters()}
    assert moves["relative.weight"] == pytest.approx(1e-2, rel=1e-3)
    assert moves["absolute.table.weight"] == pytest.approx(1e-3, rel=1e-3)


@pytest.mark.parametrize(
    ("encoding", "options", "table"),
    [
        ("learned", {}, "table.weight"),
        ("bert-r", {}, "absolute.table.weight"),
        ("linformer", {}, "absolute.table.weight"),
    ],
)
def test_the_input_scale_alone_reaches_the_input_table(encoding, options, table, tmp_path):
    model = PosAttnForMaskedLM(tiny_config(encoding, encoding_options=options))
    module = model.posattn.encoder.encoding
    trainer = trainer_for(model, 1.0, tmp_path)
    trainer.input_positions_lr_scale = 3.0
    trainer.args.warmup_steps = 0
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    rates = rates_by_name(trainer, module)
    assert rates == pytest.approx({n: 3.0 if n == table else 1.0 for n in rates})
    positional = {id(p) for p in module.positional_parameters()}
    assert {id(p) for p in module.input_position_parameters()} <= positional


@pytest.mark.parametrize(
    ("encoding", "options"),
    [("t5", {}), ("tupe-a", {}), ("none", {}), ("linformer", {"input_positions": False})],
)
def test_an_input_scale_without_an_input_table_is_refused_naming_the_knob(
    encoding, options, tmp_path
):
    model = PosAttnForMaskedLM(tiny_config(encoding, encoding_options=options))
    assert not model.posattn.encoder.encoding.input_position_parameters()
    trainer = trainer_for(model, 1.0, tmp_path)
    trainer.input_positions_lr_scale = 1.0
    with pytest.raises(PosAttnConfigError, match=rf"input_positions_lr_scale=1.0.*'{encoding}'"):
        trainer.create_optimizer_and_scheduler(num_training_steps=4)


def test_a_positional_scale_left_with_only_the_input_table_is_refused(tmp_path):
    """`learned` has its input table alone: with the table's own rate given, a positional
    scale reaches nothing and would train as 1 under another fingerprint."""
    trainer = trainer_for(PosAttnForMaskedLM(tiny_config("learned")), 10.0, tmp_path)
    trainer.input_positions_lr_scale = 1.0
    with pytest.raises(PosAttnConfigError, match=r"positional_lr_scale=10.0.*besides its input"):
        trainer.create_optimizer_and_scheduler(num_training_steps=4)


def test_the_input_scale_is_checked_kept_from_training_arguments_and_fingerprinted():
    from posattn.lab.pretraining.runconfig import load_run_config

    for bad in ("0", "-1", "x"):
        with pytest.raises(PosAttnConfigError, match=r"trainer\.input_positions_lr_scale"):
            load_run_config("smoke", None, [f"trainer.input_positions_lr_scale={bad}"])
    config = load_run_config(
        "smoke", None, ["trainer.positional_lr_scale=10", "trainer.input_positions_lr_scale=1"]
    )
    assert config.trainer.input_positions_lr_scale == 1
    assert "input_positions_lr_scale" not in trainer_arguments(config.trainer, cuda=False)
    assert config.trainer.result_settings() == {
        "positional_lr_scale": 10,
        "input_positions_lr_scale": 1,
    }
    # null is the default, the positional scale's rate: runs without it keep their fingerprint
    default = load_run_config("smoke", None, ["trainer.input_positions_lr_scale=null"])
    assert default.trainer.result_settings() == {}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_only_bert_tables_are_input_position_parameters(encoding):
    """The input scale reaches BERT's input table (learned, bert-r, linformer) and nothing
    else: every other encoding's positions act inside attention or have no parameters."""
    module = PosAttnForMaskedLM(tiny_config(encoding)).posattn.encoder.encoding
    inputs = {
        name
        for name, p in module.named_parameters()
        if any(p is q for q in module.input_position_parameters())
    }
    expected = {"learned": {"table.weight"}, "bert-r": {"absolute.table.weight"}}
    expected["linformer"] = {"absolute.table.weight"}
    assert inputs == expected.get(encoding, set())
    positional = {id(p) for p in module.positional_parameters()}
    assert all(id(p) in positional for p in module.input_position_parameters())
