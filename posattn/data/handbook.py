"""The Debian Administrator's Handbook (Debian `debian-handbook`), paragraph by paragraph.

Every language's HTML pages carry the same sequence of text blocks (`<div class="para">`, the
headings, captions and terms) in the same order, so block i of a page in one language
translates block i of the same page in another. A page whose block counts differ is skipped
rather than guessed at. Untranslated blocks are left in English; the pair builder drops them.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from .text import one_line

HTML_DIR = Path("usr/share/doc/debian-handbook/html")
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
# Sidebar, figure and table captions, and the terms of definition lists.
BLOCK_CLASSES = {"title", "term"}


class BlockParser(HTMLParser):
    """Text of each paragraph or heading block, in the order the blocks open. A block nested in
    another (a list inside a paragraph) is a block of its own; its text is not repeated in the
    outer one."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._texts: list[list[str]] = []
        self._open: list[tuple[int, int]] = []  # (block index, open tags inside it, itself too)

    @property
    def blocks(self) -> list[str]:
        return [one_line("".join(parts)) for parts in self._texts]

    def handle_starttag(self, tag, attrs) -> None:
        if tag in VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        if (tag == "div" and "para" in classes) or tag in HEADINGS or BLOCK_CLASSES & set(classes):
            self._texts.append([])
            self._open.append((len(self._texts) - 1, 1))
        elif self._open:
            index, depth = self._open[-1]
            self._open[-1] = (index, depth + 1)

    def handle_endtag(self, tag) -> None:
        if tag in VOID or not self._open:
            return
        index, depth = self._open.pop()
        if depth > 1:
            self._open.append((index, depth - 1))

    def handle_data(self, data) -> None:
        if self._open:
            self._texts[self._open[-1][0]].append(data)


VOID = {"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "wbr", "source"}


def page_blocks(path: Path) -> list[str]:
    parser = BlockParser()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser.blocks


def aligned_blocks(root: Path, source: str, target: str) -> list[tuple[str, str, str]]:
    """(page/index key, source block, target block) for every page present in both languages
    with the same number of blocks. `source` / `target` are folder names such as "cs-CZ"."""
    html = root / HTML_DIR
    pairs = []
    for page in sorted((html / source).glob("*.html")):
        other = html / target / page.name
        if not other.is_file():
            continue
        left, right = page_blocks(page), page_blocks(other)
        if len(left) != len(right):
            continue
        pairs += [
            (f"{page.stem}/{i}", a, b) for i, (a, b) in enumerate(zip(left, right, strict=True))
        ]
    return pairs


UP_LINK = re.compile(r'<link rel="up" href="([^"]+)\.html"')
TOP = "index"


def page_parent(path: Path) -> str | None:
    """The page one level up (its `<link rel="up">`), None for the top page."""
    found = UP_LINK.search(path.read_text(encoding="utf-8"))
    return found.group(1) if found else None


def chapters(root: Path, language: str = "en-US") -> dict[str, str]:
    """Each page's chapter: the page itself when its parent is the top page (or it is the top
    page), else its parent's chapter."""
    folder = root / HTML_DIR / language
    parents = {page.stem: page_parent(page) for page in folder.glob("*.html")}

    def chapter_of(page: str) -> str:
        seen = set()
        while parents.get(page) not in (None, TOP) and page not in seen:
            seen.add(page)
            page = parents[page]
        return page

    return {page: chapter_of(page) for page in parents}


def language_pages(root: Path, language: str) -> dict[str, list[str]]:
    """The blocks of every page of one language, by page name."""
    return {
        page.stem: page_blocks(page) for page in sorted((root / HTML_DIR / language).glob("*.html"))
    }
