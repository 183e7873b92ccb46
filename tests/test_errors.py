"""Bad input gets an error that names the parameter, the value and what is allowed."""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import tiny_config, tiny_encoder, tiny_seq2seq_config

from posattn import (
    PosAttnConfig,
    PosAttnConfigError,
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnForSequenceClassification,
    PosAttnSeq2SeqConfig,
    UnknownSettingWarning,
)


def raises(*fragments: str):
    """pytest.raises that checks every fragment appears in the message."""

    class Checker:
        def __enter__(self):
            self.context = pytest.raises(PosAttnConfigError)
            self.info = self.context.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.context.__exit__(*exc)
            message = str(self.info.value)
            for fragment in fragments:
                assert fragment in message, f"{fragment!r} not in {message!r}"
            return suppressed

    return Checker()


def test_unknown_encoding_lists_the_available_ones():
    with raises("encoding='tupe'", "tupe-a", "diet-abs", "none"):
        tiny_config("tupe")


def test_an_integer_serves_a_float_option():
    """YAML and JSON write a rotary base of 500000 as an integer."""
    config = tiny_config("rope", encoding_options={"layout": "half", "base": 500000})
    assert config.encoding_options["base"] == 500000


def test_d_model_not_divisible_by_heads():
    with raises("d_model=25", "num_heads=3"):
        tiny_config(d_model=25)


def test_unknown_encoding_option_lists_the_known_ones():
    with raises("'rnak'", "diet-abs", "rank", "sharing"):
        tiny_config("diet-abs", encoding_options={"rnak": 3})


@pytest.mark.parametrize("rank", [0, -2])
def test_diet_rank_below_one(rank):
    with raises(f"rank={rank}", ">= 1"):
        tiny_config("diet-abs", encoding_options={"rank": rank})


@pytest.mark.parametrize(
    ("name", "options", "fragments"),
    [
        ("diet-abs", {"sharing": "all"}, ("sharing='all'", "'layer'")),
        ("t5", {"num_buckets": 7}, ("num_buckets=7", "even")),
        ("t5", {"max_distance": 4}, ("max_distance=4",)),
        ("shaw", {"max_distance": 0}, ("max_distance=0", ">= 1")),
        ("tupe-a", {"cls_index": -1}, ("cls_index=-1", ">= 0")),
        ("bert-ad", {"scale_multiple": 0}, ("scale_multiple=0", "> 0", "sqrt(scale_multiple")),
        ("bert-ad", {"scale_multiple": -2.0}, ("scale_multiple=-2.0", "> 0")),
        # values of another kind than the option's: "false" was taken as true, "2" failed in a
        # comparison, inf passed
        ("t5", {"bidirectional": "false"}, ("bidirectional='false'", "True or False", "'t5'")),
        ("shaw", {"values": 1}, ("values=1", "True or False")),
        ("linformer", {"k": 8.0}, ("k=8.0", "an integer")),
        ("diet-abs", {"rank": "4"}, ("rank='4'", "an integer or None")),
        ("rope", {"layout": "half", "base": "1e4"}, ("base='1e4'", "a finite number")),
        ("rope", {"layout": "half", "base": float("inf")}, ("base=inf", "a finite number")),
        ("fire", {"init_c": float("nan")}, ("init_c=nan",)),
    ],
)
def test_bad_encoding_options(name, options, fragments):
    with raises(*fragments):
        tiny_config(name, encoding_options=options)


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        ({"segments": "token"}, ("segments='token'", "'attention'")),
        ({"kernel": "flash"}, ("kernel='flash'", "'sdpa'")),
        ({"norm": "mid"}, ("norm='mid'",)),
        ({"dropout": 1.5}, ("dropout=1.5",)),
        ({"num_heads": 0}, ("num_heads=0",)),
        # each was accepted, or failed inside torch's initialisation (init_std)
        ({"init_std": -0.02}, ("init_std=-0.02", "standard deviation >= 0")),
        ({"layer_norm_eps": 0.0}, ("layer_norm_eps=0.0", "> 0")),
        ({"word_scale": 0.0}, ("word_scale=0.0", "a number > 0")),
        ({"word_scale": -50}, ("word_scale=-50", "None (the model's own")),
        ({"word_scale": "50"}, ("word_scale='50'",)),
        ({"word_scale": True}, ("word_scale=True",)),
        ({"word_scale": float("inf")}, ("word_scale=inf",)),
        ({"layer_norm_eps": float("nan")}, ("layer_norm_eps=nan",)),
        ({"dropout": "0.1"}, ("dropout='0.1'", "a probability")),  # a TypeError before
        ({"pad_token_id": 40}, ("pad_token_id=40", "[0, 40)")),
        ({"bos_token_id": -1}, ("bos_token_id=-1",)),
        ({"eos_token_id": [3, 99]}, ("eos_token_id=[3, 99]",)),
        # strings were kept as given: causal="false" is truthy and built a causal model
        ({"causal": "false"}, ("causal='false'", "True or False")),
        ({"use_cache": "no"}, ("use_cache='no'", "True or False")),
        ({"tie_word_embeddings": 0}, ("tie_word_embeddings=0", "True or False")),
        # accepted; the classifier's loss then failed inside torch
        ({"problem_type": "ranking"}, ("problem_type='ranking'", "'regression'")),
        # BERT's options posattn does not have: ignored before
        ({"hidden_act": "relu"}, ("hidden_act='relu'", "'gelu' only")),
        ({"position_embedding_type": "relative_key"}, ("position_embedding_type=", "encoding")),
        ({"type_vocab_size": 0}, ("num_segments=0",)),  # BERT's name of num_segments
    ],
)
def test_bad_config(overrides, fragments):
    with raises(*fragments):
        tiny_config(**overrides)


def test_berts_names_set_posattns_settings():
    config = tiny_config(
        type_vocab_size=3, hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.2
    )
    assert (config.num_segments, config.dropout, config.attention_dropout) == (3, 0.3, 0.2)
    assert config.type_vocab_size == 3
    # the values posattn's model implies are accepted, and kept as transformers keeps them
    assert tiny_config(hidden_act="gelu", position_embedding_type="absolute").hidden_act == "gelu"


@pytest.mark.parametrize(
    ("config_class", "name", "meant"),
    [
        (PosAttnConfig, "encodings", "encoding"),
        (PosAttnConfig, "d_modle", "d_model"),
        (PosAttnConfig, "num_segment", "num_segments"),
        (PosAttnSeq2SeqConfig, "num_decoder_layer", "num_decoder_layers"),
    ],
)
def test_a_misspelt_setting_is_named_with_the_one_it_resembles(config_class, name, meant):
    # The keyword was kept as an attribute nothing reads: encodings="t5" built `learned`.
    with pytest.warns(UnknownSettingWarning, match=f"{name}=.*did you mean '{meant}'"):
        config = config_class(**{name: 2})
    assert getattr(config, name) == 2  # still kept, as transformers keeps unknown keywords


def test_other_unknown_keywords_are_kept_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownSettingWarning)
        config = PosAttnConfig(my_experiment_tag="run-7", num_labels=3, max_length=20)
    assert (config.my_experiment_tag, config.num_labels) == ("run-7", 3)


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        ({"label_smoothing": "0.1"}, ("label_smoothing='0.1'", "[0, 1)")),  # a TypeError before
        ({"num_decoder_layers": 0}, ("num_decoder_layers=0",)),  # named num_layers before
    ],
)
def test_bad_seq2seq_config(overrides, fragments):
    with raises(*fragments):
        PosAttnSeq2SeqConfig(**overrides)


def test_a_classifier_needs_a_label():
    with raises("num_labels=0", "integer >= 1"):
        PosAttnForSequenceClassification(tiny_config(num_labels=0))


@pytest.mark.parametrize("model_class", [PosAttnForMaskedLM, PosAttnForCausalLM])
def test_labels_must_label_each_token(model_class):
    # An IndexError inside the masked LM's loss, a size mismatch in the causal LM's.
    causal = model_class is PosAttnForCausalLM
    model = model_class(tiny_config(causal=causal, segments="none" if causal else "input"))
    ids = torch.zeros(2, 5, dtype=torch.long)
    with raises("labels.shape=(2, 4)", "(2, 5)"):
        model(ids, labels=torch.zeros(2, 4, dtype=torch.long))


def language_models():
    """A masked LM, a causal LM and an encoder-decoder, and ids within their vocabularies."""
    return [
        PosAttnForMaskedLM(tiny_config("t5")),
        PosAttnForCausalLM(tiny_config("t5", causal=True, segments="none")),
        PosAttnForSeq2SeqLM(tiny_seq2seq_config()),
    ]


@pytest.mark.parametrize("model_index", [0, 1, 2])
def test_labels_are_integers_of_any_width(model_index):
    """Float or bool labels were torch's "expected target dtype to be Long" (the
    encoder-decoder's float labels an embedding error after the shift); int32 labels, which
    numpy gives, were refused the same way and now score as int64 labels do."""
    model = language_models()[model_index].eval()
    ids = torch.randint(5, 20, (2, 6))
    with torch.no_grad():
        expected = model(ids, labels=ids).loss
        assert torch.equal(model(ids, labels=ids.int()).loss, expected)
        for dtype in (torch.float32, torch.bool):
            with raises(f"labels.dtype={dtype}", "an integer tensor of class indices"):
                model(ids, labels=ids.to(dtype))


def test_an_encoder_decoders_labels_match_its_decoder_inputs():
    """A batch of labels other than the source's was a batch-size error inside the loss."""
    model = PosAttnForSeq2SeqLM(tiny_seq2seq_config()).eval()
    ids = torch.randint(5, 20, (2, 6))
    with raises("labels.shape=(1, 6)", "one label per position of the logits", "(2, 6)"):
        model(ids, labels=ids[:1])
    with raises("labels.shape=(2, 5)", "(2, 4)"):
        model(ids, decoder_input_ids=ids[:, :4], labels=ids[:, :5])


@pytest.mark.parametrize(
    ("problem_type", "num_labels", "shape", "fragments"),
    [
        (None, 3, (4, 2), ("4 labels for single_label_classification", "[batch] class indices")),
        ("regression", 1, (4, 4), ("4 labels for regression", "[batch] targets")),
        # was broadcast against the [4, 2] logits with a warning, and a loss returned
        ("regression", 2, (4,), ("8 labels for regression", "[batch, num_labels] targets")),
        ("multi_label_classification", 3, (4, 2), ("12 labels", "[batch, num_labels]")),
    ],
)
def test_a_classifiers_labels_match_its_logits(problem_type, num_labels, shape, fragments):
    config = tiny_config(num_labels=num_labels, problem_type=problem_type)
    model = PosAttnForSequenceClassification(config)
    ids = torch.randint(5, 20, (4, 6))
    dtype = torch.long if problem_type is None else torch.get_default_dtype()
    with raises(f"labels.shape={shape}", *fragments):
        model(ids, labels=torch.zeros(shape, dtype=dtype))


def test_a_classifiers_class_indices_are_integers_of_any_width():
    model = PosAttnForSequenceClassification(tiny_config(num_labels=3)).eval()
    ids, labels = torch.randint(5, 20, (4, 6)), torch.tensor([0, 2, 1, 2])
    with torch.no_grad():
        expected = model(ids, labels=labels).loss
        assert torch.equal(model(ids, labels=labels.int()).loss, expected)  # a dtype error
        assert torch.equal(model(ids, labels=labels[:, None]).loss, expected)  # [batch, 1]
    model.config.problem_type = "single_label_classification"
    with raises("labels.dtype=torch.float64", "an integer tensor of class indices"):
        model(ids, labels=labels.double())


@pytest.mark.parametrize("segments", ["input", "attention"])
@pytest.mark.parametrize(
    ("argument", "dtype"),
    [("input_ids", torch.float32), ("segment_ids", torch.float32), ("segment_ids", torch.bool)],
)
def test_indices_are_int64_or_int32(argument, dtype, segments):
    """torch's "Expected tensor for argument #1 'indices'" named neither the argument nor
    the dtypes it takes; bool segment ids inside attention index a table as a mask."""
    model = tiny_encoder("t5", segments=segments).eval()
    inputs = {"input_ids": torch.randint(5, 20, (2, 6)), "segment_ids": torch.zeros(2, 6).long()}
    inputs[argument] = inputs[argument].to(dtype)
    with raises(f"{argument}.dtype={dtype}", "torch.int64 or torch.int32"):
        model(**inputs)
    inputs[argument] = inputs[argument].int()  # what an embedding also takes
    assert torch.isfinite(model(**inputs)).all()


@pytest.mark.parametrize("encoding", ["learned", "bert-r", "bert-ad", "tupe-a", "diet-abs"])
def test_sequence_longer_than_the_position_table(encoding):
    model = tiny_encoder(encoding)
    with raises("seq_len=17", "max_len=16", encoding):
        model(torch.zeros(1, 17, dtype=torch.long))


EXTRAPOLATING = ["none", "sinusoidal", "shaw", "t5", "diet-rel", "rope", "xpos", "alibi"]
EXTRAPOLATING += ["kerple", "fire", "deberta"]


@pytest.mark.parametrize("encoding", EXTRAPOLATING)
def test_functional_and_relative_encodings_run_past_max_len(encoding):
    out = tiny_encoder(encoding)(torch.zeros(1, 40, dtype=torch.long))
    assert torch.isfinite(out).all()


def test_segment_ids_outside_the_configured_number():
    model = tiny_encoder(segments="attention", num_segments=2)
    with raises("segment_ids", "[0, 2]", "num_segments=2"):
        model(torch.zeros(1, 5, dtype=torch.long), segment_ids=torch.tensor([[0, 1, 2, 0, 0]]))


def test_a_model_without_segments_refuses_segment_ids_it_would_ignore():
    """segments='none' reads no segment ids: a pair's 1s were ignored silently."""
    model = tiny_encoder(segments="none").eval()
    ids = torch.randint(5, 20, (1, 5))
    with raises("segment_ids", "[0, 1]", "0 only", "segments='none'"):
        model(ids, segment_ids=torch.tensor([[0, 0, 1, 1, 1]]))
    torch.testing.assert_close(model(ids, segment_ids=torch.zeros(1, 5).long()), model(ids))


def test_token_ids_outside_the_vocabulary_are_named():
    """torch's "index out of range in self" named neither the ids nor the vocabulary; the
    encoder-decoder's target ids go through the same embedding."""
    model = tiny_encoder()
    vocab = model.config.vocab_size
    with raises("input_ids=", f"[3, {vocab}]", f"[0, {vocab - 1}] (vocab_size={vocab})"):
        model(torch.tensor([[3, vocab, 4]]))
    with raises("input_ids=", "[-1, 4]"):
        model(torch.tensor([[-1, 4]]))
    seq2seq = PosAttnForSeq2SeqLM(tiny_seq2seq_config())
    target = torch.full((1, 3), seq2seq.config.vocab_size + 5)
    with raises("input_ids=", f"vocab_size={seq2seq.config.vocab_size}"):
        seq2seq(torch.ones(1, 4, dtype=torch.long), decoder_input_ids=target)


def test_cls_index_outside_the_sequence():
    model = tiny_encoder("tupe-r", encoding_options={"cls_index": 6})
    with raises("cls_index=6", "length 5"):
        model(torch.zeros(1, 5, dtype=torch.long))


@pytest.mark.parametrize("argument", ["attention_mask", "segment_ids"])
def test_mask_and_segment_shapes_must_match_the_input(argument):
    model = tiny_encoder()
    ids = torch.zeros(2, 5, dtype=torch.long)
    with raises(f"{argument}.shape=(2, 4)", "(2, 5)"):
        model(ids, **{argument: torch.zeros(2, 4, dtype=torch.long)})


def test_an_additive_float_mask_is_refused_not_read_inverted():
    """A 0 / -inf mask (what SDPA's attn_mask takes) was read as nonzero = real token: the
    real tokens hidden, the padding attended."""
    model = PosAttnForMaskedLM(tiny_config("t5")).eval()
    ids = torch.randint(5, 40, (2, 8))
    real = torch.ones(2, 8)
    real[1, 5:] = 0
    additive = (1 - real) * torch.finfo(real.dtype).min
    with raises("attention_mask=", "values in [-1.79769e+308, 0]", "pass (mask == 0)"):
        model(ids, attention_mask=additive)
    with raises("attention_mask=", "values in [0, 0.5]"):
        model(ids, attention_mask=real / 2)
    with torch.no_grad():  # a float 0/1 mask is the bool mask
        expected = model(ids, attention_mask=real.bool()).logits
        torch.testing.assert_close(model(ids, attention_mask=real).logits, expected)


def test_the_source_mask_of_given_encoder_outputs_is_checked():
    """With encoder_outputs given, the source mask reaches only the cross-attention: a wrong
    shape was torch's broadcasting error, an additive mask read inverted."""
    model = PosAttnForSeq2SeqLM(tiny_seq2seq_config()).eval()
    source, target = torch.randint(5, 20, (2, 8)), torch.randint(5, 20, (2, 5))
    with torch.no_grad():
        memory = model.get_encoder()(source, torch.ones(2, 8))
        for shape in ((2, 7), (3, 8)):
            with raises(f"attention_mask.shape={shape}", "(2, 8) (the source tokens)"):
                model(encoder_outputs=memory, attention_mask=torch.ones(shape),
                      decoder_input_ids=target)  # fmt: skip
        with raises("attention_mask=", "values in [-inf, 0]"):
            additive = torch.zeros(2, 8)
            additive[0, 6:] = float("-inf")
            model(encoder_outputs=memory, attention_mask=additive, decoder_input_ids=target)


def test_input_ids_must_be_two_dimensional():
    with raises("input_ids=(5,)", "[batch, seq_len]"):
        tiny_encoder()(torch.zeros(5, dtype=torch.long))


@pytest.mark.parametrize("embeds", [False, True])
def test_an_input_without_tokens(embeds):
    model = tiny_encoder("t5")
    inputs = torch.zeros(2, 0, 24) if embeds else torch.zeros(2, 0, dtype=torch.long)
    name = "inputs_embeds" if embeds else "input_ids"
    with raises(f"{name}.shape=(2, 0", "at least one token"):
        model(None, inputs_embeds=inputs) if embeds else model(inputs)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        ((64, 0), ("num_heads=0",)),
        ((63, 4), ("d_model=63", "divisible by num_heads=4")),  # was accepted: 15-wide heads
        ((64, 4, 1.0), ("dropout=1.0",)),
        ((64, 4, "0.1"), ("dropout='0.1'", "a probability in [0, 1)")),  # a TypeError before
    ],
)
def test_attention_module_sizes(args, fragments):
    from posattn import MultiHeadAttention

    with raises(*fragments):
        MultiHeadAttention(*args)


def test_rope_layout_is_never_implicit():
    with raises("layout=None", "'interleaved'", "'half'"):
        tiny_config("rope", encoding_options={"layout": None})
    with raises("layout='neox'", "'half'"):
        tiny_config("rope", encoding_options={"layout": "neox"})


def test_rope_needs_an_even_head_dimension():
    with raises("head_dim=5", "even"):
        tiny_config("rope", d_model=15, num_heads=3)


def test_rope_fraction_must_leave_an_even_number_of_dims():
    with raises("fraction=0.375", "3", "even"):
        tiny_config("rope", encoding_options={"fraction": 0.375})  # 0.375 * 8 = 3


@pytest.mark.parametrize("encoding", ["xpos", "fire"])
def test_causal_only_methods_refuse_bidirectional_attention(encoding):
    with raises("causal=False", encoding, "causal=True"):
        tiny_config(encoding, causal=False)


def test_deberta_buckets_that_cannot_map_max_len():
    with raises("max_relative_positions=8", "position_buckets=6", "max_len=16"):
        tiny_config(
            "deberta", encoding_options={"position_buckets": 6, "max_relative_positions": 8}
        )
    with raises("max_relative_positions=4", "position_buckets=6"):
        tiny_config(
            "deberta", encoding_options={"position_buckets": 6, "max_relative_positions": 4}
        )


@pytest.mark.parametrize(
    ("name", "options", "fragments"),
    [
        ("deberta", {"terms": ("c2c",)}, ("terms=('c2c',)", "'c2p'")),
        ("kerple", {"kernel": "cubic"}, ("kernel='cubic'", "'log'", "'power'")),
        ("rope", {"layout": "half", "scale": 0.5}, ("scale=0.5",)),
        ("fire", {"mlp_width": 0}, ("mlp_width=0",)),
    ],
)
def test_bad_modern_options(name, options, fragments):
    with raises(*fragments):
        tiny_config(name, encoding_options=options, causal=True)


def test_a_refusal_keeps_its_parts_through_a_process_boundary():
    """Process pools (compare, probe) send errors back pickled: the command line renames the
    parameter of what comes back, so the parts must survive."""
    import pickle

    from posattn.errors import invalid, named_as_flags

    error = pickle.loads(pickle.dumps(invalid("train_len", 1, "at least 3")))
    assert (error.parameter, error.value, error.allowed) == ("train_len", 1, "at least 3")
    renamed = r"^--train-len=1 is not allowed: at least 3$"
    with pytest.raises(PosAttnConfigError, match=renamed), named_as_flags("train_len"):
        raise error
    # a setting without a flag passes unchanged
    with pytest.raises(PosAttnConfigError, match=r"^steps=0 is not"), named_as_flags("seeds"):
        raise invalid("steps", 0, "at least 1")
