"""What a run directory shows: its markdown tables, JSON summaries and PNG figures.

Nothing here knows which command wrote the directory (compare, bench, inspect, probe, ...):
every `*.md`, `*.json` and `*.png` is taken, in path order with the top level first, except
what only training needs (checkpoints, saved models, TensorBoard event folders) and the
report's own files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...errors import invalid

SKIPPED_DIRS = {"checkpoints", "model", "tensorboard", ".staging", "__pycache__"}
REPORT_NAMES = {"report.md", "report.html"}
MAX_DEPTH = 4


@dataclass
class RunContents:
    root: Path
    markdown: list[Path] = field(default_factory=list)
    json: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.markdown or self.json or self.figures)


def ordered(paths: list[Path], root: Path) -> list[Path]:
    return sorted(paths, key=lambda p: (len(p.relative_to(root).parts), str(p.relative_to(root))))


def visible(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts
    return (
        len(parts) <= MAX_DEPTH
        and not SKIPPED_DIRS & set(parts[:-1])
        and not any(part.startswith("checkpoint-") for part in parts[:-1])
        and not (len(parts) == 1 and parts[0] in REPORT_NAMES)
    )


def collect(run_dir: str | Path) -> RunContents:
    root = Path(run_dir)
    if not root.is_dir():
        raise invalid("run_dir", str(root), "an existing run directory")
    files = [p for p in root.rglob("*") if p.is_file() and visible(p, root)]
    contents = RunContents(
        root,
        markdown=ordered([p for p in files if p.suffix == ".md"], root),
        json=ordered([p for p in files if p.suffix == ".json"], root),
        figures=ordered([p for p in files if p.suffix == ".png"], root),
    )
    if contents.is_empty():
        raise invalid(
            "run_dir",
            str(root),
            "a run directory with markdown tables, JSON summaries or PNG figures (written by "
            "posattn compare, bench, inspect or probe)",
        )
    return contents
