"""Parallel data: the file format's errors, the pair filters, the handbook's block alignment,
the Bible pairing and the shared tokenizer."""

from __future__ import annotations

import pytest
from data_fixtures import write_sword_module

from posattn.data.handbook import page_blocks
from posattn.data.parallel import bible_pairs, degenerate, split_pairs
from posattn.data.parallel_files import read_parallel
from posattn.data.translation_tokenizer import train_shared_bpe
from posattn.errors import PosAttnConfigError


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_parallel_files_read_pairs_and_skip_blank_pairs(tmp_path):
    src = write(tmp_path / "a.en", ["one two", "", "three"])
    tgt = write(tmp_path / "a.es", ["uno dos", "", "tres"])
    assert read_parallel(src, tgt) == [("one two", "uno dos"), ("three", "tres")]


def test_misaligned_files_name_the_line(tmp_path):
    src = write(tmp_path / "a.en", ["one", "two", "three"])
    tgt = write(tmp_path / "a.es", ["uno", "dos"])
    with pytest.raises(PosAttnConfigError, match=r"target file.*ends after line 2.*line 3"):
        read_parallel(src, tgt)
    tgt = write(tmp_path / "b.es", ["uno", "", "tres"])
    with pytest.raises(PosAttnConfigError, match="target line 2"):
        read_parallel(src, tgt)


def test_empty_or_missing_parallel_file_is_refused(tmp_path):
    src = write(tmp_path / "a.en", ["", " "])
    tgt = write(tmp_path / "a.es", ["uno", "dos"])
    with pytest.raises(PosAttnConfigError, match=r"source=.*at least one non-blank line"):
        read_parallel(src, tgt)
    with pytest.raises(PosAttnConfigError, match=r"target=.*existing UTF-8 text file"):
        read_parallel(tgt, tmp_path / "missing.es")
    (tmp_path / "bad.es").write_bytes(b"uno\n\xff\xfe\n")
    with pytest.raises(PosAttnConfigError, match=r"bad\.es:2"):
        read_parallel(tgt, tmp_path / "bad.es")


def test_degenerate_pairs():
    assert degenerate("Iddo, Ginnetho, Abijah,", "Iddo, Ginnetho, Abías,")
    assert degenerate("Gibeon, and Ramah, and Beeroth,", "Gabaón, Rama, Beeroth,")
    assert degenerate("a b c d e f g h i j", "x y z")  # word counts more than 3x apart
    assert degenerate("12:3", "12:3")
    assert not degenerate("Thou shalt not steal.", "No hurtarás.")
    assert not degenerate("And Noah begat three sons, Shem, Ham, and Japheth.", "Y engendró Noé")


def test_bible_pairs_join_by_verse_key_and_keep_chapters_in_one_split(tmp_path):
    english = {"Gen": [["In the beginning God created.", "And the earth was void."]] * 3}
    spanish = {"Gen": [["En el principio crió Dios.", "¿ Y la tierra estaba?"]] * 3}
    write_sword_module(tmp_path / "kjv", english)
    write_sword_module(tmp_path / "sparv", spanish)
    pairs = bible_pairs(
        {"sword-text-kjv": tmp_path / "kjv", "sword-text-sparv": tmp_path / "sparv"}
    )
    assert pairs[1] == ("bible/Gen.1", "And the earth was void.", "¿Y la tierra estaba?")
    assert [group for group, _, _ in pairs] == ["bible/Gen.1"] * 2 + ["bible/Gen.2"] * 2 + [
        "bible/Gen.3"
    ] * 2
    splits, dropped = split_pairs("en-es", pairs)
    assert dropped == 0 and sum(map(len, splits.values())) == 6
    assert all(len(pairs) % 2 == 0 for pairs in splits.values())  # chapters stay whole


def test_handbook_blocks_align_by_position(tmp_path):
    page = """<html><body><div class="titlepage"><h2 class="title">{title}</h2></div>
    <div class="para">{para} <code class="command">apt</code> &amp; more<br/></div>
    <div class="sidebar"><p class="title"><strong>{note}</strong></p></div></body></html>"""
    (tmp_path / "en.html").write_text(page.format(title="Basics", para="Run", note="Note"))
    (tmp_path / "cs.html").write_text(page.format(title="Základy", para="Spusťte", note="Pozn"))
    assert page_blocks(tmp_path / "en.html") == ["Basics", "Run apt & more", "Note"]
    assert page_blocks(tmp_path / "cs.html") == ["Základy", "Spusťte apt & more", "Pozn"]


def test_shared_tokenizer_is_cased_and_decodes_back_to_the_text():
    texts = ["Haz pues esto que te decimos: ¿Hay cuatro?", "Do therefore this that we say."]
    tokenizer = train_shared_bpe(texts * 20, vocab_size=120)
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
