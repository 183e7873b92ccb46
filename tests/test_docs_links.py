"""The README and docs/ link to one another: every relative link names a file that exists and,
with an #anchor, a heading of that file; every page under docs/ is listed in the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where a link is a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", prose(page.read_text()), flags=re.MULTILINE)
    return {anchor(h) for h in headings}


def test_a_heading_anchor_is_githubs():
    assert anchor("Learned biases on the CPU, attention level") == (
        "learned-biases-on-the-cpu-attention-level"
    )
    assert anchor("The cross terms alone: BERT-Ad at TUPE's scale") == (
        "the-cross-terms-alone-bert-ad-at-tupes-scale"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_heading_that_exist(page):
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto: - not this repository's
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif fragment and fragment not in anchors(linked):
            broken.append(f"{target}: no heading #{fragment} in {linked.name}")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_listed_in_the_readme():
    readme = prose((ROOT / "README.md").read_text())
    listed = {target for target in LINK.findall(readme) if target.startswith("docs/")}
    pages = {f"docs/{page.name}" for page in PAGES[1:]}
    assert pages <= listed, f"not listed in the README: {sorted(pages - listed)}"
