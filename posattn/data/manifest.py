"""The manifest: what each build step read and wrote, so that a second `prepare` can skip it.

Each step records a fingerprint of its inputs (source checksums, options, the format version)
and the size and sha256 of every file it wrote. A step is redone when its fingerprint changes or
one of its files is missing or altered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Bump when a reader or a cleaning rule changes what prepare writes: every step is redone.
FORMAT_VERSION = 1


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_record(path: Path, root: Path) -> dict[str, Any]:
    return {
        "path": path.relative_to(root).as_posix(),
        "bytes": path.stat().st_size,
        "sha256": sha256_file(path),
    }


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-able inputs."""
    text = json.dumps([FORMAT_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def damaged_files(records: list[dict[str, Any]], root: Path) -> Iterator[str]:
    """The path of each record missing under root or differing from its size or sha256, one
    at a time (a caller that needs only the first hashes no further)."""
    for record in records:
        path = root / record["path"]
        intact = (
            path.is_file()
            and path.stat().st_size == record["bytes"]
            and sha256_file(path) == record["sha256"]
        )
        if not intact:
            yield record["path"]


def files_intact(records: list[dict[str, Any]], root: Path) -> bool:
    return next(damaged_files(records, root), None) is None


def step_is_current(manifest: dict[str, Any], key: str, fp: str, root: Path) -> bool:
    step = manifest.get(key)
    return bool(step) and step.get("fingerprint") == fp and files_intact(step["files"], root)


@contextlib.contextmanager
def written_beside(path: Path) -> Iterator[Path]:
    """A path beside `path` for the block to write a file or a folder at: renamed onto `path`
    when the block ends, removed when it fails, so an interrupted write never leaves half a
    file or a stray partial one. Named per process and thread: under one fixed name, two
    writers of one target (two `prepare` runs on one data directory) renamed each other's file
    away and one failed at its rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        yield partial
        os.replace(partial, path)
    except BaseException:
        if partial.is_dir() and not partial.is_symlink():
            shutil.rmtree(partial, ignore_errors=True)
        else:
            partial.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Write `text` beside the target and rename it into place (`written_beside`)."""
    with written_beside(path) as partial:
        partial.write_text(text, encoding="utf-8")


def read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}  # a damaged manifest only means every step is redone
    return manifest if manifest.get("format") == FORMAT_VERSION else {}


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    manifest["format"] = FORMAT_VERSION
    write_atomic(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
