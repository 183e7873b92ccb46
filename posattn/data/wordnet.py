"""WordNet 3.0 synsets from its `data.{noun,verb,adj,adv}` files (wndb(5WN)).

Each data line: offset, lex_filenum (2 decimal digits), ss_type, w_cnt (2 hex digits), then
w_cnt pairs (word, lex_id), pointers, verb frames, and after " | " the gloss. Lines that start
with two spaces are the licence header. lex_filenum names one of the 45 lexicographer files
(lexnames(5WN)), the supersense classes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event",
    "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object",
    "noun.person", "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance",
    "noun.time", "verb.body", "verb.change", "verb.cognition", "verb.communication",
    "verb.competition", "verb.consumption", "verb.contact", "verb.creation", "verb.emotion",
    "verb.motion", "verb.perception", "verb.possession", "verb.social", "verb.stative",
    "verb.weather", "adj.ppl",
)  # fmt: skip
DATA_FILES = ("noun", "verb", "adj", "adv")
# Adjective markers such as (a), (p), (ip) that follow a word in adjective synsets.
ADJECTIVE_MARKER = re.compile(r"\([a-z]+\)$")


@dataclass(frozen=True)
class Synset:
    offset: str
    pos: str  # ss_type: n, v, a, s (satellite adjective), r
    lexname: str
    words: tuple[str, ...]
    gloss: str

    @property
    def key(self) -> str:
        """Unique across the data files: offsets repeat between parts of speech."""
        return f"{self.pos}{self.offset}"


def parse_line(line: str) -> Synset:
    fields, _, gloss = line.partition(" | ")
    parts = fields.split()
    offset, lexfile, pos, count = parts[0], int(parts[1]), parts[2], int(parts[3], 16)
    words = tuple(
        ADJECTIVE_MARKER.sub("", word).replace("_", " ") for word in parts[4 : 4 + 2 * count : 2]
    )
    return Synset(offset, pos, LEXNAMES[lexfile], words, gloss.strip())


def synsets(root: Path) -> Iterator[Synset]:
    """Every synset of an unpacked wordnet-base tree, noun, verb, adj, adv, in file order."""
    for name in DATA_FILES:
        path = root / "usr/share/wordnet" / f"data.{name}"
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip() and not line.startswith("  "):
                    yield parse_line(line)
