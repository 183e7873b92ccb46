"""Bibles in the SWORD zText format, read verse by verse into plain text.

A module's `mods.d/NAME.conf` gives its DataPath. There, per testament (ot, nt):
  .bzs  one 12-byte little-endian record (offset, size, uncompressed size) per zlib block in .bzz
  .bzv  one 10-byte little-endian record (block u32, offset u32, size u16) per verse slot
Slots follow the versification: slot 0 is the module heading, slot 1 the testament heading,
then per book one heading slot, and per chapter a heading slot followed by its verses.
The text is OSIS XML. A chapter's heading slot carries `<chapter osisID="Book.N" sID=...>`;
the slot just before a "Book.1" heading is the next book's heading. So keys such as
"Gen.1.1" come from the text itself and need no versification table.
"""

from __future__ import annotations

import html
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

CHAPTER = re.compile(r'<chapter\b[^>]*\bsID="([^"]+)"')
# A paragraph break: <div type="x-p" sID=.../> (start tags only, in either attribute order).
PARAGRAPH = re.compile(r'<div\b(?=[^>]*\btype="x-p")(?=[^>]*\bsID=)[^>]*>')
NOTE = re.compile(r"<note\b.*?</note>", re.S)
TITLE = re.compile(r"<title\b.*?</title>", re.S)
TAG = re.compile(r"<[^>]*>")
SPACE_BEFORE = re.compile(r" ([,.;:!?’”)\]])")
SPACE_AFTER = re.compile(r"([“‘(\[]) ")


@dataclass(frozen=True)
class Verse:
    key: str  # "Book.chapter.verse", e.g. "Gen.1.1"
    osis: str  # the slot's raw OSIS markup

    @property
    def chapter(self) -> str:
        return self.key.rsplit(".", 1)[0]

    @property
    def text(self) -> str:
        return osis_to_text(self.osis)

    @property
    def starts_paragraph(self) -> bool:
        return bool(PARAGRAPH.search(self.osis))


def osis_to_text(osis: str) -> str:
    """Plain text of one verse: notes and headings dropped, tags removed, entities decoded,
    KJV's pilcrows dropped, and the spaces that removed tags leave before punctuation closed."""
    text = TITLE.sub(" ", NOTE.sub(" ", osis))
    text = html.unescape(TAG.sub(" ", text)).replace("¶", " ")
    text = " ".join(text.split())
    return SPACE_AFTER.sub(r"\1", SPACE_BEFORE.sub(r"\1", text))


def module_dir(root: Path) -> Path:
    """The data folder of the one zText module under an unpacked package tree `root`."""
    confs = sorted((root / "usr/share/sword/mods.d").glob("*.conf"))
    if len(confs) != 1:
        raise ValueError(f"{root}: expected one SWORD module, found {len(confs)} .conf files")
    settings = {}
    for line in confs[0].read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), value.strip())
    if settings.get("ModDrv", "").lower() != "ztext":
        raise ValueError(f"{confs[0]}: ModDrv={settings.get('ModDrv')!r}; posattn reads zText")
    return root / "usr/share/sword" / settings["DataPath"]


def testament_slots(data: Path, testament: str) -> list[str]:
    """The raw text of every verse slot of one testament ("ot" or "nt")."""
    index = (data / f"{testament}.bzs").read_bytes()
    compressed = (data / f"{testament}.bzz").read_bytes()
    blocks = []
    for offset, size, _ in struct.iter_unpack("<III", index):
        blocks.append(zlib.decompress(compressed[offset : offset + size]))
    slots = []
    for block, offset, size in struct.iter_unpack("<IIH", (data / f"{testament}.bzv").read_bytes()):
        raw = blocks[block][offset : offset + size] if size else b""
        slots.append(raw.decode("utf-8"))
    return slots


def verses(data: Path) -> list[Verse]:
    """Every verse slot of a module in canonical order, keyed from its chapter markers."""
    found: list[Verse] = []
    for testament in ("ot", "nt"):
        if not (data / f"{testament}.bzs").is_file():
            continue  # a New-Testament-only module, say
        chapter, number, previous_was_verse = None, 0, False
        for slot in testament_slots(data, testament):
            marker = CHAPTER.search(slot)
            if marker:
                if marker.group(1).endswith(".1") and previous_was_verse:
                    found.pop()  # that slot was the heading of this new book
                chapter, number, previous_was_verse = marker.group(1), 0, False
            elif chapter is not None:
                number += 1
                found.append(Verse(f"{chapter}.{number}", slot))
                previous_was_verse = True
    return found
