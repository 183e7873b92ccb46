"""posattn.execution: every "how to run" choice readable, settable process-wide, and chosen for
a block that restores it; bad names and values rejected with the parameter named."""

from __future__ import annotations

import threading

import pytest
import torch
from conftest import tiny_encoder

from posattn import execution
from posattn.errors import PosAttnConfigError


def test_defaults_are_the_measured_choices():
    assert execution.current() == execution.Choices(
        kernel="auto",
        fold=None,
        skew=None,
        triton_threshold_bytes=2**28,
        triton_inference_threshold_bytes=2**30,
        flex_threshold_bytes=2**30,
        recompute_threshold_bytes=2**23,
    )
    cpu = torch.device("cpu")
    assert not execution.use_fold(cpu) and not execution.use_skew(cpu)


def test_choose_restores_the_previous_choices_on_exit_and_on_error():
    before = execution.current()
    with execution.choose(fold=True, skew=False) as inside:
        assert inside == execution.current()
        assert (inside.fold, inside.skew, inside.kernel) == (True, False, before.kernel)
        with execution.choose(fold=False):
            assert (execution.current().fold, execution.current().skew) == (False, False)
        assert execution.current().fold is True
    assert execution.current() == before
    with pytest.raises(RuntimeError, match="inside"), execution.choose(flex_threshold_bytes=0):
        assert execution.current().flex_threshold_bytes == 0
        raise RuntimeError("inside")
    assert execution.current() == before


def test_set_changes_the_process_wide_choices_and_choose_overrides_them():
    before = execution.current()
    try:
        execution.set(skew=True)
        assert execution.current().skew is True
        assert execution.use_skew(torch.device("cpu"))
        with execution.choose(skew=False):
            execution.set(fold=True)  # a name the block did not choose: seen inside it
            assert (execution.current().skew, execution.current().fold) == (False, True)
        assert (execution.current().skew, execution.current().fold) == (True, True)
    finally:
        execution.set(**vars(before))
    assert execution.current() == before


def test_choose_is_per_thread():
    seen = []
    with execution.choose(fold=True):
        thread = threading.Thread(target=lambda: seen.append(execution.current().fold))
        thread.start()
        thread.join()
        assert execution.current().fold is True
    assert seen == [None]


@pytest.mark.parametrize(
    ("choices", "expected"),
    [
        ({"fold": 1}, ("fold=1", "None", "True or False")),
        ({"skew": "yes"}, ("skew='yes'", "True or False")),
        ({"kernel": "fast"}, ("kernel='fast'", "'auto'", "'eager'")),
        ({"flex_threshold_bytes": -1}, ("flex_threshold_bytes=-1", ">= 0")),
        ({"flex_threshold_bytes": 1.5}, ("flex_threshold_bytes=1.5", "integer")),
        ({"recompute_threshold_bytes": -2}, ("recompute_threshold_bytes=-2", ">= 0")),
        ({"triton_threshold_bytes": "1G"}, ("triton_threshold_bytes='1G'", "integer")),
        ({"folding": True}, ("folding=True", "execution choice", "'fold'")),
    ],
)
def test_bad_names_and_values_name_the_parameter(choices, expected):
    before = execution.current()
    with pytest.raises(PosAttnConfigError) as by_set:
        execution.set(**choices)
    with pytest.raises(PosAttnConfigError) as by_choose, execution.choose(**choices):
        pass
    for error in (by_set, by_choose):
        for part in expected:
            assert part in str(error.value)
    assert execution.current() == before


def test_kernel_choice_is_the_default_of_modules_built_without_one():
    from posattn import MultiHeadAttention

    assert MultiHeadAttention(8, 2).kernel_name == "auto"
    with execution.choose(kernel="eager"):
        attention = MultiHeadAttention(8, 2)
    assert attention.kernel_name == "eager"
    assert MultiHeadAttention(8, 2, kernel="sdpa").kernel_name == "sdpa"
    # a model names its kernel in its config: the choice does not change it
    with execution.choose(kernel="eager"):
        assert tiny_encoder("t5").layers[0].attention.kernel_name == "auto"


@pytest.mark.parametrize("encoding", ["shaw", "deberta"])
def test_forcing_skew_gives_the_same_values(encoding):
    model = tiny_encoder(encoding)
    ids = torch.randint(1, 40, (2, 7))
    with execution.choose(skew=False):
        gathered = model(ids)
    with execution.choose(skew=True):
        skewed = model(ids)
    torch.testing.assert_close(skewed, gathered)


def test_choices_parse_from_the_command_line_and_bad_ones_name_the_choice():
    """`execution.parse` ("name=value", as `posattn bench --choose` takes it): true / false /
    none for fold and skew, integers for the thresholds, names for the kernel; anything else
    refused with the choice (or --choose) named."""
    assert execution.parse("fold=true") == {"fold": True}
    assert execution.parse(" skew = None ") == {"skew": None}
    assert execution.parse("kernel=sdpa") == {"kernel": "sdpa"}
    assert execution.parse("triton_threshold_bytes=1024") == {"triton_threshold_bytes": 1024}
    for text, named in [("fold", "--choose"), ("=1", "--choose"), ("fold=yes", "fold"),
                        ("flex_threshold_bytes=-1", "flex_threshold_bytes"),
                        ("kernel=fast", "kernel"), ("speed=1", "speed")]:  # fmt: skip
        with pytest.raises(PosAttnConfigError, match=rf"^{named}="):
            execution.parse(text)
