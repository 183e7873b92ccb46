"""Probe task generators: deterministic for a seed, and their targets are right as checked by
small functions that read the answer back from the tokens (never by the generator itself)."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import torch

from posattn import PosAttnConfigError
from posattn.lab.probe.tasks import CLS, IGNORE, KEYS, NO, PAD, SEP, SYMBOLS, TASKS, YES, probe_task


def expected_absolute(ids: list[int]) -> list[int]:
    return [IGNORE, IGNORE] + [ids[1]] * (len(ids) - 2)


def expected_relative(ids: list[int]) -> list[int]:
    return [ids[i - 2] if i >= 3 else IGNORE for i in range(len(ids))]


def expected_relative_given(ids: list[int]) -> list[int]:
    k = ids[1] - 4  # offset tokens 5..8 stand for k = 1..4
    assert 1 <= k <= 4
    return [ids[i - k] if i - k >= 2 else IGNORE for i in range(len(ids))]


def split_at_sep(ids: list[int]) -> tuple[list[int], list[int]]:
    assert ids[0] == CLS and ids.count(SEP) == 1
    sep = ids.index(SEP)
    return ids[1:sep], ids[sep + 1 :]


def next_tokens_after_sep(ids: list[int]) -> list[int]:
    sep = ids.index(SEP)
    return [ids[i + 1] if sep <= i < len(ids) - 1 else IGNORE for i in range(len(ids))]


def expected_reverse(ids: list[int]) -> list[int]:
    source, output = split_at_sep(ids)
    assert output == list(reversed(source))
    return next_tokens_after_sep(ids)


def expected_sort(ids: list[int]) -> list[int]:
    source, output = split_at_sep(ids)
    assert all(a <= b for a, b in itertools.pairwise(output))
    assert Counter(output) == Counter(source)
    return next_tokens_after_sep(ids)


def expected_majority(ids: list[int]) -> list[int]:
    counts = Counter(ids[1:]).most_common()
    assert len(counts) <= 2 and (len(counts) == 1 or counts[0][1] != counts[1][1])
    return [counts[0][0]] + [IGNORE] * (len(ids) - 1)


def expected_recall(ids: list[int]) -> list[int]:
    sep = ids.index(SEP)
    pairs, questions = ids[1:sep], ids[sep + 1 :]
    assert len(pairs) % 2 == 0 and len(questions) % 2 == 0 and questions
    table = dict(zip(pairs[0::2], pairs[1::2], strict=True))
    assert len(table) == len(pairs) // 2  # distinct keys
    assert all(key in KEYS for key in table) and all(v in SYMBOLS for v in table.values())
    expected = [IGNORE] * (sep + 1)
    for key, value in zip(questions[0::2], questions[1::2], strict=True):
        assert table[key] == value  # the answer shown after a query is the stored value
        expected += [table[key], IGNORE]
    return expected


def expected_shift_equal(ids: list[int]) -> list[int]:
    first, second = split_at_sep(ids)
    assert len(first) == len(second)
    offset = len(first) + 1  # b_j sits m + 1 places after a_j
    sep = ids.index(SEP)
    return [IGNORE] * (sep + 1) + [
        YES if ids[i] == ids[i - offset] else NO for i in range(sep + 1, len(ids))
    ]


EXPECTED = {
    "absolute": expected_absolute,
    "relative": expected_relative,
    "relative-given": expected_relative_given,
    "reverse": expected_reverse,
    "sort": expected_sort,
    "majority": expected_majority,
    "recall": expected_recall,
    "shift-equal": expected_shift_equal,
}


def test_every_task_has_an_independent_check():
    assert set(EXPECTED) == set(TASKS)


@pytest.mark.parametrize("name", list(TASKS))
@pytest.mark.parametrize("length", [9, 32, 257])
def test_targets_are_right(name, length):
    task = probe_task(name)
    batch = task.batch(random.Random(0), 16, length)
    assert all(value.shape == (16, length) for value in batch.values())
    for row in range(16):
        real = int(batch["attention_mask"][row].sum())
        assert real >= length - 2  # an example fills the length up to its parity
        assert bool(batch["attention_mask"][row, :real].all())
        ids = batch["input_ids"][row, :real].tolist()
        assert batch["input_ids"][row, real:].eq(PAD).all()
        assert batch["targets"][row, real:].eq(IGNORE).all()
        assert batch["targets"][row, :real].tolist() == EXPECTED[name](ids)
        segments = batch["token_type_ids"][row, :real].tolist()
        if name == "shift-equal":
            sep = ids.index(SEP)
            assert segments == [0] * sep + [1] * (real - sep)
        else:
            assert set(segments) == {0}


@pytest.mark.parametrize("name", list(TASKS))
def test_generators_are_deterministic_for_a_seed(name):
    task = probe_task(name)
    first = task.batch(random.Random("seed-a"), 8, 24)
    again = task.batch(random.Random("seed-a"), 8, 24)
    other = task.batch(random.Random("seed-b"), 8, 24)
    for key in first:
        assert torch.equal(first[key], again[key])
    assert not torch.equal(first["input_ids"], other["input_ids"])


def test_labels_are_balanced_enough_to_need_the_skill():
    """No constant answer solves the binary tasks; shift-equal has equal and unequal pairs."""
    majority = probe_task("majority").batch(random.Random(1), 400, 20)["targets"][:, 0]
    shares = [float((majority == c).float().mean()) for c in SYMBOLS[:2]]
    assert min(shares) > 0.35, shares
    tags = probe_task("shift-equal").batch(random.Random(1), 400, 20)["targets"]
    assert 0.6 < float((tags == YES).sum() / (tags != IGNORE).sum()) < 0.9
    all_equal = ((tags == YES) | (tags == IGNORE)).all(-1).float().mean()
    assert 0.4 < float(all_equal) < 0.6


def test_unknown_task_and_short_length_are_rejected():
    with pytest.raises(PosAttnConfigError, match="task='copy'"):
        probe_task("copy")
    with pytest.raises(PosAttnConfigError, match="length=3"):
        probe_task("relative-given").batch(random.Random(0), 2, 3)
