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
