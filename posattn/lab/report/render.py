"""The report page: the claims table where a results.json has `claims` (lab/runs/claims.py),
the run's markdown rendered (tables included), its figures, and its JSON summaries flattened
into key / value tables (a `claims` list left out there: it has its own section). Written as
report.html and report.md inside the run directory, so images are referenced relatively and the
page reads offline; `embed=True` inlines them instead (one self-contained HTML file)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import markdown as markdown_lib

from ..runs.results import claims_markdown
from ..runs.tables import table_lines
from .collect import RunContents

MAX_ROWS = 80  # rows of one JSON table; the rest is counted, the file keeps everything
INLINE_LIST = 8

STYLE = """
body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
th { background: #f2f2f2; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption, .path { color: #555; font-size: 0.85em; }
"""


def flatten(value, prefix: str = "") -> list[tuple[str, str]]:
    """Scalar leaves of a JSON value as (dotted key, text); long lists are summarised."""
    if isinstance(value, dict):
        return [
            row
            for k, v in value.items()
            for row in flatten(v, f"{prefix}.{k}" if prefix else str(k))
        ]
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            if len(value) <= INLINE_LIST:
                return [(prefix, ", ".join(scalar(v) for v in value))]
            numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
            summary = f"list of {len(value)}"
            if numbers:
                summary += f" (min {scalar(min(numbers))}, max {scalar(max(numbers))})"
            return [(prefix, summary)]
        if len(value) > INLINE_LIST and all(isinstance(v, list) for v in value):
            return [(prefix, f"nested list of {len(value)} rows")]
        return [row for i, v in enumerate(value) for row in flatten(v, f"{prefix}[{i}]")]
    return [(prefix, scalar(value))]


def scalar(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def evaluated_claims(value) -> list[dict] | None:
    """A results.json's `claims` list (dicts with at least id, statement and verdict)."""
    if not isinstance(value, dict) or not isinstance(value.get("claims"), list):
        return None
    claims = value["claims"]
    needed = {"id", "statement", "verdict"}
    if claims and all(isinstance(c, dict) and needed <= set(c) for c in claims):
        return claims
    return None


def claims_sections(contents: RunContents) -> list[tuple[Path, str]]:
    """(path, markdown) of the claims of every JSON summary that has them; none where the
    run's own markdown already carries a `## Claims` section."""
    own = (line.strip() for path in contents.markdown for line in path.read_text().splitlines())
    if "## Claims" in own:
        return []
    sections = []
    for path in contents.json:
        claims = evaluated_claims(read_json(path))
        if claims is not None:
            full = [{"paper": "", "reason": "", **c} for c in claims]
            sections.append((path, claims_markdown(full)))
    return sections


def json_rows(path: Path) -> tuple[list[tuple[str, str]], int]:
    try:
        value = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        rows = [("(unreadable)", str(error))]
    else:
        if (claims := evaluated_claims(value)) is not None:
            value = {**value, "claims": f"{len(claims)} claims: see the Claims section"}
        rows = flatten(value)
    return rows[:MAX_ROWS], max(0, len(rows) - MAX_ROWS)


def image_source(path: Path, root: Path, embed: bool) -> str:
    if embed:
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return path.relative_to(root).as_posix()


def html_page(contents: RunContents, embed: bool) -> str:
    root = contents.root
    title = f"posattn report: {root.resolve().name}"
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="path">Run directory {html.escape(str(root.resolve()))}</p>',
    ]
    for path, text in claims_sections(contents):
        parts.append(
            f'<section class="claims"><p class="path">'
            f"{html.escape(path.relative_to(root).as_posix())}</p>"
        )
        parts.append(markdown_lib.markdown(text, extensions=["tables"]))
        parts.append("</section>")
    for path in contents.markdown:
        parts.append(
            f'<section><p class="path">{html.escape(path.relative_to(root).as_posix())}</p>'
        )
        parts.append(markdown_lib.markdown(path.read_text(), extensions=["tables", "fenced_code"]))
        parts.append("</section>")
    if contents.figures:
        parts.append("<section><h2>Figures</h2>")
        for path in contents.figures:
            name = html.escape(path.relative_to(root).as_posix())
            parts.append(
                f'<figure><img src="{html.escape(image_source(path, root, embed))}" '
                f'alt="{name}"><figcaption>{name}</figcaption></figure>'
            )
        parts.append("</section>")
    if contents.json:
        parts.append("<section><h2>JSON summaries</h2>")
        for path in contents.json:
            rows, more = json_rows(path)
            parts.append(f"<h3>{html.escape(path.relative_to(root).as_posix())}</h3>")
            parts.append("<table><thead><tr><th>key</th><th>value</th></tr></thead><tbody>")
            parts += [
                f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows
            ]
            parts.append("</tbody></table>")
            if more:
                parts.append(f"<p>{more} more values in the file.</p>")
        parts.append("</section>")
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def markdown_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_page(contents: RunContents) -> str:
    root = contents.root
    parts = [f"# posattn report: {root.resolve().name}", ""]
    for path, text in claims_sections(contents):
        parts += [f"<!-- {path.relative_to(root).as_posix()} -->", text, ""]
    for path in contents.markdown:
        parts += [f"<!-- {path.relative_to(root).as_posix()} -->", path.read_text().rstrip(), ""]
    if contents.figures:
        parts += ["## Figures", ""]
        parts += [
            f"![{p.relative_to(root).as_posix()}]({p.relative_to(root).as_posix()})\n"
            for p in contents.figures
        ]
    if contents.json:
        parts += ["## JSON summaries", ""]
        for path in contents.json:
            rows, more = json_rows(path)
            cells = [[markdown_cell(k), markdown_cell(v)] for k, v in rows]
            parts += [f"### {path.relative_to(root).as_posix()}", ""]
            parts += table_lines(["key", "value"], cells)
            parts += [f"\n{more} more values in the file." if more else "", ""]
    return "\n".join(parts).rstrip() + "\n"


def write_report(contents: RunContents, embed: bool = False) -> tuple[Path, Path]:
    """report.html and report.md in the run directory."""
    page, text = contents.root / "report.html", contents.root / "report.md"
    page.write_text(html_page(contents, embed), encoding="utf-8")
    text.write_text(markdown_page(contents), encoding="utf-8")
    return page, text
