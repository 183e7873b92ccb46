"""Cleaning rules, deterministic splits and de-duplication (no download)."""

from __future__ import annotations

from collections import Counter

from posattn.data.corpus import Paragraph, split_corpus
from posattn.data.splits import TASK_FRACTIONS, assign_split
from posattn.data.task_builders import deduplicate, split_items
from posattn.data.text import between_gutenberg_markers, paragraphs, prose


def test_paragraphs_join_lines_until_a_blank_line():
    lines = ["It is a truth", "universally  acknowledged,", "", "", "that a single man", ""]
    assert paragraphs(lines) == ["It is a truth universally acknowledged,", "that a single man"]


def test_prose_drops_headings_ornaments_notes_and_italics_marks():
    found = prose(
        [
            "CHAPTER IV",
            "Chapter 12",
            "CHAPTER 11. Nightgown.",
            "Book the First",
            "* * * * *",
            "By Jane Austen",
            "Produced by some volunteers",
            "[Transcriber's Note: fixed a typo]",
            "She was _very_ sure of _it.",
            '"Yes."',
            "Part of the money was lost.",
        ]
    )
    assert found == ["She was very sure of it.", '"Yes."', "Part of the money was lost."]


def test_gutenberg_markers_cut_header_and_licence():
    text = "Licence\r\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\nCall me Ishmael.\r\n"
    text += "*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\nMore licence"
    assert between_gutenberg_markers(text).strip() == "Call me Ishmael."


def test_split_depends_only_on_the_key_and_salt():
    keys = [f"item-{i}" for i in range(2000)]
    first = [assign_split(k, TASK_FRACTIONS, "salt") for k in keys]
    again = [assign_split(k, TASK_FRACTIONS, "salt") for k in reversed(keys)][::-1]
    assert first == again
    counts = Counter(first)
    assert (
        1500 < counts["train"] < 1700 and 150 < counts["dev"] < 250 and 150 < counts["test"] < 250
    )
    other_salt = [assign_split(k, TASK_FRACTIONS, "other") for k in keys]
    assert other_salt != first


def test_groups_never_straddle_splits():
    found = [Paragraph(f"paragraph {i}", f"group-{i % 37}") for i in range(3000)]
    splits = split_corpus(found)
    side = {}
    for split, texts in splits.items():
        for text in texts:
            group = f"group-{int(text.split()[1]) % 37}"
            assert side.setdefault(group, split) == split
    assert sum(map(len, splits.values())) == 3000


def test_deduplicate_keeps_one_copy_and_drops_conflicts():
    items = [
        ("a", {"text": "Good flight", "label": "positive"}),
        ("a", {"text": "good flight", "label": "positive"}),
        ("b", {"text": "Late again", "label": "negative"}),
        ("c", {"text": "Late again", "label": "positive"}),
        ("d", {"text": "Fine", "label": "positive"}),
    ]
    kept = [example["text"] for _, example in deduplicate(items)]
    assert kept == ["Good flight", "Fine"]


def test_an_explicit_split_field_wins():
    items = [(f"k{i}", {"text": f"t{i}", "label": "x", "split": "test"}) for i in range(50)]
    splits = split_items(items, salt="s")
    assert len(splits["test"]) == 50 and not splits["train"] and not splits["dev"]
    assert all("split" not in example for example in splits["test"])
