"""Markdown tables of every lab report, written one way: `| a | b |` rows under a `|---|---|`
rule (or `:---`, `---:`, `:---:` where a column is aligned)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

ALIGNMENTS = {None: "---", "left": ":---", "right": "---:", "center": ":---:"}


def table_row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def table_lines(
    header: Sequence[object],
    rows: Iterable[Sequence[object]],
    align: Sequence[str | None] | None = None,
) -> list[str]:
    """The lines of a markdown table: the header, the rule, one line per row. Cells are
    written with str(); align: one of None, "left", "right", "center" per column."""
    align = list(align) if align is not None else [None] * len(header)
    if len(align) != len(header):
        raise ValueError(f"{len(align)} alignments for {len(header)} columns")
    unknown = [a for a in align if a not in ALIGNMENTS]
    if unknown:
        raise ValueError(f"alignment {unknown[0]!r}: one of None, 'left', 'right', 'center'")
    rule = "|" + "".join(ALIGNMENTS[a] + "|" for a in align)
    lines = [table_row(header), rule]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells under {len(header)} columns: {row}")
        lines.append(table_row(row))
    return lines


def markdown_table(
    header: Sequence[object],
    rows: Iterable[Sequence[object]],
    align: Sequence[str | None] | None = None,
) -> str:
    """`table_lines` joined by newlines (no trailing newline)."""
    return "\n".join(table_lines(header, rows, align))


def estimate_text(
    value: float,
    interval: Sequence[float] | None,
    digits: int = 1,
    signed: bool = False,
    without_interval: str = "",
) -> str:
    """A measured value and its interval, every number written alike: "+1.2 [-0.3, +2.7]"
    (signed, for differences) or "0.512 [0.498, 0.526]". Without an interval (one seed) the
    value alone, followed by `without_interval` (e.g. " (one seed)")."""
    sign = "+" if signed else ""

    def number(x: float) -> str:
        return f"{x:{sign}.{digits}f}"

    if interval is None:
        return number(value) + without_interval
    low, high = interval
    return f"{number(value)} [{number(low)}, {number(high)}]"
