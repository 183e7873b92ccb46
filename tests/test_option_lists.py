"""Comma-separated command-line lists: what every command (the data command's included)
takes from `--encodings a,b`, `--lengths 16,32`, `--tasks ''`."""

import argparse

import pytest

from posattn.data.commands import name_list
from posattn.errors import PosAttnConfigError
from posattn.option_lists import (
    encoding_options_of,
    names_of,
    positive_integers_of,
    seeds_of,
)


def test_names_are_stripped_and_a_trailing_comma_dropped():
    assert names_of("--encodings", " t5, diet-rel ,") == ["t5", "diet-rel"]


def test_a_repeated_name_is_refused_with_the_option_and_its_value():
    with pytest.raises(PosAttnConfigError, match=r"--kernels='sdpa, sdpa'.*none repeated"):
        names_of("--kernels", "sdpa, sdpa")


def test_an_empty_list_is_refused_unless_none_is_allowed():
    with pytest.raises(PosAttnConfigError, match="at least one"):
        names_of("--encodings", " , ")
    assert names_of("--floor-backends", "", none_allowed=True) == []


def test_positive_integers_keep_their_order_and_refuse_repeats_zero_and_words():
    assert positive_integers_of("--lengths", "512, 16") == [512, 16]
    for bad in ("16,16", "0,16", "16,x", "-4"):
        with pytest.raises(PosAttnConfigError, match="--lengths"):
            positive_integers_of("--lengths", bad)
    assert positive_integers_of("--model-lengths", "", none_allowed=True) == []
    with pytest.raises(PosAttnConfigError, match="or '' for none, none repeated"):
        positive_integers_of("--model-lengths", "8,8", none_allowed=True)


def test_seeds_take_zero_keep_their_order_and_refuse_repeats_signs_and_none():
    assert seeds_of("--finetune-seeds", "3, 0,") == [3, 0]
    for bad in ("0,0", "-1", "1.5", "x", " , "):
        with pytest.raises(PosAttnConfigError, match=r"--finetune-seeds.*integers >= 0"):
            seeds_of("--finetune-seeds", bad)


def test_the_data_commands_lists_take_none_and_refuse_a_repeat_as_argparse_errors():
    parse = name_list("--tasks")
    assert parse("") == []
    assert parse("topic,word-order") == ["topic", "word-order"]
    with pytest.raises(argparse.ArgumentTypeError, match="--tasks='topic,topic'"):
        parse("topic,topic")


def test_encoding_options_are_grouped_by_encoding_with_json_values():
    pairs = ["rope.layout=interleaved", "t5.num_buckets=64", "rope.base = 500000.0",
             "diet-abs.rank=null", "kerple.kernel=log"]  # fmt: skip
    assert encoding_options_of("--option", pairs) == {
        "rope": {"layout": "interleaved", "base": 500000.0},
        "t5": {"num_buckets": 64},
        "diet-abs": {"rank": None},
        "kerple": {"kernel": "log"},
    }
    assert encoding_options_of("--option", []) == {}


@pytest.mark.parametrize("bad", ["rope", "rope=half", ".layout=half", "rope.=half"])
def test_an_encoding_option_without_its_encoding_and_key_is_refused(bad):
    with pytest.raises(PosAttnConfigError, match=r"--option=.*ENCODING.KEY=VALUE"):
        encoding_options_of("--option", [bad])


def test_an_encoding_option_given_twice_is_refused():
    with pytest.raises(PosAttnConfigError, match="each once"):
        encoding_options_of("--option", ["rope.layout=half", "rope.layout=interleaved"])
