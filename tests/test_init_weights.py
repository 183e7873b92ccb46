"""Every parameter is initialised by `_init_weights`: a checkpoint without an encoding's
parameters (another encoding's, or a partial one) loads into it with those parameters drawn as a
fresh model draws them, never left as the uninitialised memory `from_pretrained` allocates."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import CAUSAL_ONLY, PROJECTED, tiny_config, tiny_seq2seq_config
from safetensors.torch import save_file
from torch import nn
from transformers.utils import logging

from posattn import (
    ENCODINGS,
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnForSequenceClassification,
    PosAttnModel,
    PosAttnSeq2SeqConfig,
)
from posattn.encodings.base import OwnsParameters
from posattn.models.encoder import init_weights

# Options that add parameters beyond an encoding's defaults.
EXTRA_OPTIONS = {
    "shaw": {"values": True},
    "deberta": {"share_att_key": False},
    "diet-abs": {"sharing": "none"},
    "kerple": {"kernel": "power"},
    "linformer": {"share_kv": False},
}
TORCH_LAYERS = (nn.Linear, nn.Embedding, nn.LayerNorm)


@pytest.fixture(autouse=True)
def quiet_loading():
    """The load report lists the missing keys these tests create on purpose."""
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    yield
    logging.set_verbosity(level)


def config_of(encoding: str, options: dict | None = None, **overrides):
    segments = "input" if encoding in PROJECTED else "attention"
    return tiny_config(
        encoding, segments=segments, encoding_options=options or {}, num_labels=3, **overrides
    )


def init_as_loading_does(model: nn.Module, missing: set[str], seed: int) -> None:
    """What `from_pretrained` does after reading a checkpoint: every parameter not in `missing`
    is marked as loaded, and `initialize_weights` draws the others (seeded)."""
    for name, parameter in model.named_parameters(remove_duplicate=False):
        parameter._is_hf_initialized = name not in missing
    for module in model.modules():
        module._is_hf_initialized = False
    torch.manual_seed(seed)
    model.initialize_weights()


def assert_sane(model: nn.Module) -> None:
    for name, parameter in model.named_parameters():
        assert parameter.device.type == "cpu", name
        assert torch.isfinite(parameter).all(), name
        # uninitialised memory shows up as huge values (1e32) as often as NaN
        assert parameter.abs().max() < 1e4 if parameter.numel() else True, name


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_init_weights_sets_every_parameter(encoding):
    """Every parameter is written by `init_weights` (the function `_init_weights` applies to
    each module): a model whose every value is NaN comes back finite."""
    for options in ({}, EXTRA_OPTIONS.get(encoding, {})):
        model = PosAttnForMaskedLM(config_of(encoding, options))
        for module in model.modules():
            if list(module.parameters(recurse=False)):
                assert isinstance(module, (*TORCH_LAYERS, OwnsParameters)), type(module)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(float("nan"))
        for module in model.modules():
            init_weights(module, model.config.init_std)
        assert_sane(model)


@pytest.mark.parametrize(
    ("model_class", "encoding"),
    [(PosAttnForMaskedLM, encoding) for encoding in ENCODINGS]
    + [(PosAttnModel, "tupe-r"), (PosAttnForSequenceClassification, "diet-abs")],
)
def test_another_encodings_checkpoint_loads_with_fresh_positional_parameters(
    tmp_path, encoding, model_class
):
    """A checkpoint of `learned` (BERT) or of tupe-r loaded into every encoding: the content
    weights are the checkpoint's, the positional parameters are what a fresh model's
    `_init_weights` draws under the same seed."""
    for source in ("learned", "tupe-r"):
        torch.manual_seed(0)
        saved = model_class(config_of(source))
        saved.save_pretrained(tmp_path / source)
        config = config_of(encoding, EXTRA_OPTIONS.get(encoding))
        torch.manual_seed(5)
        loaded, info = model_class.from_pretrained(
            tmp_path / source, config=config, output_loading_info=True, ignore_mismatched_sizes=True
        )
        assert_sane(loaded)
        # a table of another size (tupe-r's T5 buckets in t5) is drawn like a missing one
        missing = set(info["missing_keys"]) | {key for key, *_ in info["mismatched_keys"]}
        saved_weights = saved.state_dict()
        for name, value in loaded.state_dict().items():
            if name in missing:
                assert ".encoding." in name or ".segment" in name, name
            else:
                torch.testing.assert_close(value, saved_weights[name], rtol=0, atol=0)
        fresh = model_class(config)
        init_as_loading_does(fresh, missing, seed=5)
        fresh_weights = fresh.state_dict()
        for name in missing:
            torch.testing.assert_close(loaded.state_dict()[name], fresh_weights[name])
        ids = torch.randint(5, 40, (2, 7))
        assert torch.isfinite(loaded(ids)[0]).all()


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_positional_parameters_drawn_on_load_have_the_fresh_distribution(tmp_path, encoding):
    """A larger model, so that statistics mean something: each positional parameter drawn by
    `from_pretrained` has the mean and spread of the same parameter in a fresh model (built
    by its constructor), constants exactly. Seeded: the mean test allows about 3 standard
    errors, which one draw in a few hundred passes, whatever tests ran before."""
    torch.manual_seed(0)
    sizes = dict(d_model=48, num_heads=4, max_len=64)
    PosAttnModel(config_of("none", **sizes)).save_pretrained(tmp_path)
    config = config_of(encoding, EXTRA_OPTIONS.get(encoding), **sizes)
    loaded = PosAttnModel.from_pretrained(tmp_path, config=config)
    fresh = PosAttnModel(config)
    draws = {name: [] for name, _ in fresh.named_parameters()}
    for _ in range(20):  # many fresh draws, for parameters with few values (KERPLE's r1, r2)
        for module in fresh.modules():
            init_weights(module, config.init_std)
        for name, value in fresh.named_parameters():
            draws[name].append(value.detach().clone())
    for name, value in loaded.named_parameters():
        value = value.detach()
        if ".encoding." not in name or value.numel() == 0:
            continue
        expected = torch.stack(draws[name])
        if expected.std() == 0:  # constants: FIRE's c and L, LayerNorms, biases
            torch.testing.assert_close(value, expected[0], rtol=0, atol=0, msg=name)
        elif value.numel() >= 64:
            assert 0.75 < float(value.std() / expected.std()) < 1.33, name
            assert abs(float(value.mean() - expected.mean())) < 0.3 * float(expected.std()), name
        else:  # a few values: inside the range of the fresh draws
            assert expected.min() <= value.min() and value.max() <= expected.max(), name


@pytest.mark.parametrize("encoding", ["learned", "t5", "tupe-r", "diet-abs", "kerple", "fire"])
def test_causal_lm_loads_a_checkpoint_without_positional_parameters(tmp_path, encoding):
    torch.manual_seed(0)
    PosAttnForCausalLM(config_of("none", causal=True)).save_pretrained(tmp_path)
    config = config_of(encoding, causal=True)
    torch.manual_seed(1)
    loaded, info = PosAttnForCausalLM.from_pretrained(
        tmp_path, config=config, output_loading_info=True
    )
    assert_sane(loaded)
    missing = set(info["missing_keys"])
    assert missing == {n for n, _ in loaded.named_parameters() if ".encoding." in n}
    fresh = PosAttnForCausalLM(config)
    init_as_loading_does(fresh, missing, seed=1)
    for name in missing:
        torch.testing.assert_close(loaded.state_dict()[name], fresh.state_dict()[name])


def seq2seq_config(encoding: str, **overrides) -> PosAttnSeq2SeqConfig:
    values = dict(vocab_size=30, d_model=16, num_heads=2, num_layers=2, ffn_dim=20, max_len=16)
    options = {"layout": "half"} if encoding == "rope" else {}
    return PosAttnSeq2SeqConfig(encoding=encoding, encoding_options=options, **values | overrides)


@pytest.mark.parametrize("encoding", ["learned", "shaw", "t5", "tupe-a", "diet-rel", "rope"])
def test_seq2seq_loads_another_encodings_checkpoint(tmp_path, encoding):
    torch.manual_seed(0)
    PosAttnForSeq2SeqLM(seq2seq_config("sinusoidal")).save_pretrained(tmp_path)
    config = seq2seq_config(encoding)
    torch.manual_seed(2)
    loaded, info = PosAttnForSeq2SeqLM.from_pretrained(
        tmp_path, config=config, output_loading_info=True
    )
    assert_sane(loaded)
    missing = set(info["missing_keys"])
    fresh = PosAttnForSeq2SeqLM(config)
    init_as_loading_does(fresh, missing, seed=2)
    for name in missing:
        torch.testing.assert_close(loaded.state_dict()[name], fresh.state_dict()[name])


@pytest.mark.parametrize("tie", [True, False])
def test_seq2seq_word_matrices_are_drawn_when_the_checkpoint_lacks_them(tmp_path, tie):
    """A checkpoint without any word matrix: every one is drawn N(0, 1/d_model) on the CPU
    (none left on the meta device), one shared parameter exactly when tied."""
    config = seq2seq_config("t5", tie_word_embeddings=tie)
    model = PosAttnForSeq2SeqLM(config)
    kept = {
        name: value.contiguous()
        for name, value in model.state_dict().items()
        if "word" not in name and "lm_head" not in name
    }
    save_file(kept, tmp_path / "model.safetensors", metadata={"format": "pt"})
    config.save_pretrained(tmp_path)
    loaded = PosAttnForSeq2SeqLM.from_pretrained(tmp_path)
    assert_sane(loaded)
    words = [module.weight for module in loaded.word_matrices()]
    assert [word is words[0] for word in words] == [True, tie, tie]
    for word in words:
        assert 0.7 < float(word.detach().std()) * config.d_model**0.5 < 1.3


@pytest.mark.parametrize("tie", [True, False])
def test_seq2seq_ties_its_word_matrices_only_when_the_config_says_so(tmp_path, tie):
    torch.manual_seed(0)
    model = PosAttnForSeq2SeqLM(seq2seq_config("diet-rel", tie_word_embeddings=tie)).eval()
    words = [module.weight for module in model.word_matrices()]
    assert [word is words[0] for word in words] == [True, tie, tie]
    if not tie:
        with torch.no_grad():  # the untied matrices must keep values of their own
            model.lm_head.weight.mul_(2.0)
            model.decoder.embeddings.word.weight.add_(0.5)
    model.save_pretrained(tmp_path)
    loaded = PosAttnForSeq2SeqLM.from_pretrained(tmp_path).eval()
    loaded_words = [module.weight for module in loaded.word_matrices()]
    assert [word is loaded_words[0] for word in loaded_words] == [True, tie, tie]
    for original, again in zip(words, loaded_words, strict=True):
        assert torch.equal(original, again)
    ids = torch.randint(4, 30, (2, 6))
    torch.testing.assert_close(
        loaded(ids, decoder_input_ids=ids).logits,
        model(ids, decoder_input_ids=ids).logits,
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("encoding", ["tupe-r", "diet-abs", "shaw", "kerple", "deberta"])
def test_from_config_initialises_like_the_constructor(encoding):
    config = config_of(encoding, EXTRA_OPTIONS.get(encoding))
    for model_class in (PosAttnForMaskedLM, PosAttnForSequenceClassification):
        torch.manual_seed(4)
        built = model_class._from_config(config)
        torch.manual_seed(4)
        constructed = model_class(config)
        assert_sane(built)
        for (name, a), (_, b) in zip(
            built.state_dict().items(), constructed.state_dict().items(), strict=True
        ):
            assert torch.equal(a, b), name


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_posattn_draws_nothing_on_the_meta_device(encoding, monkeypatch):
    """A config builds its encoding on the meta device, and `from_pretrained` builds the whole
    model there: no value exists to draw, so posattn's initialisation never reaches torch's
    meta draw (a Python decomposition, about 1 ms a parameter). torch's own layers draw their
    defaults as torch decides."""
    draw = nn.init.normal_

    def refusing_posattn_meta_draws(tensor, *args, **kwargs):
        caller = sys._getframe(1).f_globals["__name__"]
        assert not (tensor.is_meta and caller.startswith("posattn")), (
            f"{caller} drew {tuple(tensor.shape)} on the meta device"
        )
        return draw(tensor, *args, **kwargs)

    monkeypatch.setattr(nn.init, "normal_", refusing_posattn_meta_draws)
    for options in ({}, EXTRA_OPTIONS.get(encoding, {})):
        with torch.device("meta"):
            models = [PosAttnForMaskedLM(config_of(encoding, options))]
            if encoding not in PROJECTED:  # keys projected along the sequence: encoders only
                models.append(PosAttnForCausalLM(config_of(encoding, options, causal=True)))
            if encoding not in PROJECTED | CAUSAL_ONLY:
                pairs = tiny_seq2seq_config(encoding, encoding_options=options)
                models.append(PosAttnForSeq2SeqLM(pairs))
        assert all(p.is_meta for model in models for p in model.parameters())
