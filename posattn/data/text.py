"""Cleaning rules shared by the readers: from printed lines to plain one-line paragraphs."""

from __future__ import annotations

import re
from collections.abc import Iterable

WHITESPACE = re.compile(r"\s+")
# "CHAPTER 11. Nightgown.", "Book the First", "VOLUME II" (checked on short paragraphs only).
NUMBER = r"[0-9]+|[ivxlc]+|the|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
HEADING = re.compile(rf"^(chapter|book|volume|part|letter|stave)\s+({NUMBER})\b", re.I)
HEADING_MAX_WORDS = 8
# Notes by the transcribers and publishers of the e-texts, not part of the book.
BOILERPLATE = re.compile(r"gutenberg|\betext|transcriber|^produced by", re.I)
SENTENCE_MARK = re.compile(r"[.!?;:\"”’']")


def one_line(text: str) -> str:
    """Collapse every run of whitespace (newlines, tabs, CR) into one space."""
    return WHITESPACE.sub(" ", text).strip()


def paragraphs(lines: Iterable[str]) -> list[str]:
    """Join printed lines into paragraphs; a blank line ends a paragraph."""
    found, current = [], []
    for line in lines:
        if line.strip():
            current.append(line)
        elif current:
            found.append(one_line(" ".join(current)))
            current = []
    if current:
        found.append(one_line(" ".join(current)))
    return found


def is_prose(paragraph: str) -> bool:
    """False for what is not the book's running text: headings and ornaments ("CHAPTER IV",
    "Chapter 12. The Ship", "* * *"), title-page fragments ("By Jane Austen") and the
    e-text's own notes."""
    words = word_count(paragraph)
    if not any(c.islower() for c in paragraph) or BOILERPLATE.search(paragraph):
        return False
    if words <= HEADING_MAX_WORDS and HEADING.match(paragraph):
        return False
    return words >= 4 or bool(SENTENCE_MARK.search(paragraph))


def prose(paragraphs_: Iterable[str]) -> list[str]:
    """The running text of a printed book. Gutenberg marks italics with underscores, not
    always in pairs; they are markup, so all of them go."""
    cleaned = (one_line(p.replace("_", "")) for p in paragraphs_)
    return [p for p in cleaned if p and is_prose(p)]


def between_gutenberg_markers(text: str) -> str:
    """The book inside a Project Gutenberg file, without the licence header and footer."""
    start = re.search(r"^\*\*\* ?START OF TH(IS|E) PROJECT GUTENBERG.*$", text, re.M)
    end = re.search(r"^\*\*\* ?END OF TH(IS|E) PROJECT GUTENBERG.*$", text, re.M)
    begin = start.end() if start else 0
    return text[begin : end.start() if end else len(text)]


def word_count(text: str) -> int:
    return len(text.split())
