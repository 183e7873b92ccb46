"""Comma-separated command-line lists: what every command (the data command's included)
takes from `--encodings a,b`, `--lengths 16,32`, `--tasks ''`."""

import argparse

import pytest

from posattn.data.commands import name_list
from posattn.errors import PosAttnConfigError
from posattn.option_lists import names_of, positive_integers_of


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


def test_the_data_commands_lists_take_none_and_refuse_a_repeat_as_argparse_errors():
    parse = name_list("--tasks")
    assert parse("") == []
    assert parse("topic,word-order") == ["topic", "word-order"]
    with pytest.raises(argparse.ArgumentTypeError, match="--tasks='topic,topic'"):
        parse("topic,topic")
