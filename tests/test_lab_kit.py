"""The lab's shared kit (lab/runs/): markdown tables, the verdict rule, run fingerprints."""

from __future__ import annotations

import pytest

from posattn.lab.runs.tables import markdown_table, table_lines


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
