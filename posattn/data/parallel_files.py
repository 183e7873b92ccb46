"""The parallel file format: two UTF-8 text files, one segment per line, line i of the source
file translating line i of the target file.

Reading checks what a misaligned pair of files looks like: a file with no segment, files with
different numbers of lines, and a line that is blank on one side only. Each error names the
file and the line number.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import invalid
from .manifest import write_atomic


def read_lines(path: Path, parameter: str) -> list[str]:
    if not Path(path).is_file():
        raise invalid(parameter, str(path), "an existing UTF-8 text file, one segment per line")
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise invalid(
            f"{parameter} {path}:{line}", raw[error.start : error.start + 4], "UTF-8"
        ) from None
    return text.splitlines()


def read_parallel(source: Path, target: Path) -> list[tuple[str, str]]:
    """(source, target) segments of two line-aligned files; blank lines on both sides are
    skipped. Raises PosAttnConfigError naming the file and line where they do not align."""
    left, right = read_lines(source, "source"), read_lines(target, "target")
    for name, path, lines in (("source", source, left), ("target", target, right)):
        if not any(line.strip() for line in lines):
            raise invalid(name, str(path), "a file with at least one non-blank line")
    if len(left) != len(right):
        shorter, longer = ("source", "target") if len(left) < len(right) else ("target", "source")
        line = min(len(left), len(right)) + 1
        raise invalid(
            f"{shorter} file",
            str(source if shorter == "source" else target),
            f"as many lines as the {longer} file: it ends after line {line - 1}, the "
            f"{longer} goes on at line {line} ({len(left)} vs {len(right)} lines)",
        )
    pairs = []
    for number, (a, b) in enumerate(zip(left, right, strict=True), start=1):
        if bool(a.strip()) != bool(b.strip()):
            blank = "source" if not a.strip() else "target"
            raise invalid(
                f"{blank} line {number}",
                "",
                f"a segment: line {number} of the other file is not blank, so the files are "
                "misaligned there",
            )
        if a.strip():
            pairs.append((a.strip(), b.strip()))
    return pairs


def write_parallel(source: Path, target: Path, pairs: list[tuple[str, str]]) -> None:
    write_atomic(source, "".join(a + "\n" for a, _ in pairs))
    write_atomic(target, "".join(b + "\n" for _, b in pairs))
