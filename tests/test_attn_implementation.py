"""transformers' `attn_implementation` on posattn's models: every name selects the posattn
kernel it maps to (seen by wrapping the registered kernels), `config._attn_implementation`
reports what the attention modules run, the choice survives from_pretrained and
set_attn_implementation, unknown names are clear errors, and posattn's own kernels run inside
transformers' models through `AttentionInterface` with eager's outputs."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config
from transformers import (
    AutoModelForMaskedLM,
    BertConfig,
    BertModel,
    LlamaConfig,
    LlamaModel,
)

from posattn import (
    PosAttnConfig,
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnModel,
    PosAttnSeq2SeqConfig,
)
from posattn.errors import PosAttnConfigError
from posattn.kernels import KERNELS, eager_attention, register_kernel
from posattn.models.attn_implementation import attn_implementation_of, kernel_of

MAPPING = {
    "eager": "eager",
    "sdpa": "sdpa",
    "flex_attention": "flex",
    "posattn-auto": "auto",
    "posattn-sdpa-lowmem": "sdpa-lowmem",
}


@pytest.fixture
def calls(monkeypatch):
    """Every registered kernel wrapped to record its name when it runs."""
    seen: list[str] = []
    for name, kernel in list(KERNELS.items()):

        def recording(*args, _name=name, _kernel=kernel, **kwargs):
            seen.append(_name)
            return _kernel(*args, **kwargs)

        monkeypatch.setitem(KERNELS, name, recording)
    return seen


def kernels_held(model) -> set[str]:
    return {m.kernel_name for m in model.modules() if hasattr(m, "kernel_name")}


@pytest.fixture(scope="module")
def saved_mlm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlm")
    torch.manual_seed(0)
    PosAttnForMaskedLM(tiny_config("t5")).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("name", "kernel"), MAPPING.items())
def test_from_pretrained_selects_the_kernel_it_names(saved_mlm, calls, name, kernel):
    model = AutoModelForMaskedLM.from_pretrained(saved_mlm, attn_implementation=name).eval()
    assert model.config._attn_implementation == name
    assert model.config.kernel == kernel
    assert kernels_held(model) == {kernel}
    with torch.no_grad():
        model(torch.randint(0, 40, (2, 6)))
    assert calls == [kernel] * 2  # one call per layer, the chosen kernel's


def test_without_a_choice_the_saved_kernel_runs_and_is_reported(saved_mlm, calls):
    model = AutoModelForMaskedLM.from_pretrained(saved_mlm).eval()
    assert model.config._attn_implementation == "posattn-auto"
    with torch.no_grad():
        model(torch.randint(0, 40, (2, 6)))
    assert calls == ["auto"] * 2


def test_set_attn_implementation_switches_every_stack(calls):
    config = PosAttnSeq2SeqConfig(
        vocab_size=30, d_model=8, num_heads=2, num_layers=1, num_decoder_layers=2
    )
    model = PosAttnForSeq2SeqLM(config).eval()
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    assert {model.encoder.config.kernel, model.decoder.config.kernel} == {"eager"}
    with torch.no_grad():
        model(torch.randint(4, 30, (1, 5)), decoder_input_ids=torch.randint(4, 30, (1, 3)))
    assert calls == ["eager"] * 5  # encoder self + decoder self and cross per layer
    model.set_attn_implementation("posattn-sdpa-lowmem")
    assert kernels_held(model) == {"sdpa-lowmem"}


def test_the_report_follows_the_kernel_however_it_is_set():
    config = tiny_config("alibi", causal=True, attn_implementation="sdpa")
    assert config.kernel == "sdpa"
    model = PosAttnForCausalLM(config)
    model.posattn.encoder.set_kernel("eager")
    assert model.config._attn_implementation == "eager"
    assert PosAttnConfig(d_model=8, num_heads=2, kernel="flex")._attn_implementation == (
        "flex_attention"
    )


def test_supports_flags_are_what_runs():
    assert PosAttnForMaskedLM._supports_sdpa and PosAttnForMaskedLM._supports_flex_attn
    assert not PosAttnForMaskedLM._supports_flash_attn  # no flash kernel takes a bias


def test_unknown_names_are_clear_errors(saved_mlm):
    for name in ("flash_attention_2", "posattn-nope", "sdpa-lowmem"):
        with pytest.raises(PosAttnConfigError, match="attn_implementation"):
            AutoModelForMaskedLM.from_pretrained(saved_mlm, attn_implementation=name)
    model = PosAttnForMaskedLM(tiny_config("t5"))
    with pytest.raises(PosAttnConfigError, match="posattn-auto"):
        model.set_attn_implementation("paged|eager")


def test_unknown_name_error_has_transformers_wording_and_allowed_names():
    """transformers' tests match its own wording; posattn's names the allowed values too."""
    model = PosAttnForMaskedLM(tiny_config("t5"))
    with pytest.raises(PosAttnConfigError) as refused:
        model.set_attn_implementation("foo")
    message = str(refused.value)
    assert 'Specified `attn_implementation="foo"` is not supported' in message
    for name in ("eager", "sdpa", "flex_attention", "posattn-auto"):
        assert repr(name) in message


def test_a_user_kernel_is_a_posattn_name():
    seen = []

    def mine(q, k, v, *, mask, bias, scale, dropout_p=0.0):
        seen.append(q.shape)
        return eager_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)

    register_kernel("mine", mine)
    try:
        assert attn_implementation_of("mine") == "posattn-mine"
        assert kernel_of("posattn-mine") == "mine"
        model = PosAttnForMaskedLM(tiny_config("rope")).eval()
        model.set_attn_implementation("posattn-mine")
        with torch.no_grad():
            model(torch.randint(0, 40, (1, 4)))
        assert len(seen) == 2
    finally:
        del KERNELS["mine"]


def tiny_bert(attn_implementation: str) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation=attn_implementation,
    )
    return BertModel(config).double().eval()


@pytest.mark.parametrize("name", ["posattn-auto", "posattn-sdpa-lowmem"])
def test_posattn_kernels_run_inside_transformers_models(calls, name):
    ids = torch.randint(1, 50, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    with torch.no_grad():
        expected = tiny_bert("eager")(ids, attention_mask=mask).last_hidden_state
        got = tiny_bert(name)(ids, attention_mask=mask).last_hidden_state
    assert calls and calls[0] == MAPPING[name]
    torch.testing.assert_close(got, expected)


def test_posattn_kernels_in_a_causal_grouped_query_model(calls):
    def llama(name):
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=50,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=32,
            attn_implementation=name,
        )
        return LlamaModel(config).double().eval()

    ids = torch.randint(1, 50, (2, 6))
    with torch.no_grad():
        expected = llama("eager")(ids).last_hidden_state
        got = llama("posattn-sdpa-lowmem")(ids).last_hidden_state
    assert calls == ["sdpa-lowmem"]
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("kernel", ["auto", "sdpa", "eager"])
def test_output_attentions_in_a_config_is_allowed_on_every_kernel(kernel):
    """transformers refuses config.output_attentions = True beside a fused kernel; posattn runs
    the eager path for a call that returns probabilities, so it accepts it on every kernel,
    keeps the kernel, and returns the same outputs as a per-call output_attentions=True."""
    config = PosAttnConfig(vocab_size=30, d_model=8, num_heads=2, num_layers=2, kernel=kernel)
    model = PosAttnModel(config).eval()
    ids = torch.randint(4, 30, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        per_call = model(ids, output_attentions=True)
    config.output_attentions = True
    assert config.kernel == kernel and config.output_attentions
    with torch.no_grad():
        from_config = model(ids)
    assert len(from_config.attentions) == 2
    for a, b in zip(from_config.attentions, per_call.attentions, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(from_config.last_hidden_state, per_call.last_hidden_state)
    built = PosAttnConfig(d_model=8, num_heads=2, kernel=kernel, output_attentions=True)
    assert built.output_attentions and built.kernel == kernel
