"""THE table of transformers common tests that posattn fails today because of a known gap.

Each entry is marked xfail(strict=True): when the gap is closed the test passes, the XPASS
fails the suite, and the entry is removed. An entry's test runs with its subtests folded into
the test (the first failing subtest fails it), so that subtests that pass do not each count as
a strict XPASS. Keys are test names; an entry may be limited to
some model families ("encoder", "causal", "seq2seq") or encodings (or labels of the
tester's SETTINGS).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gap:
    reason: str
    families: tuple[str, ...] | None = None  # None: every family
    encodings: tuple[str, ...] | None = None  # None: every encoding

    def applies(self, family: str, encoding: str) -> bool:
        return (self.families is None or family in self.families) and (
            self.encodings is None or encoding in self.encodings
        )


# test name -> the gaps that fail it, the first that applies to a family and encoding wins.
KNOWN_GAPS: dict[str, tuple[Gap, ...]] = {}


def gap_for(test: str, family: str, encoding: str) -> str | None:
    """The reason `test` fails for this family and encoding, or None."""
    for gap in KNOWN_GAPS.get(test, ()):
        if gap.applies(family, encoding):
            return gap.reason
    return None
