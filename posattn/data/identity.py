"""Which prepared data a result was computed from: a digest of each data folder it read.

A run's settings name its data directory by path; the files there change when `posattn data
prepare` rebuilds them (a newer source package, another --builtin-corpus, a task file given
again). A stage records the digests of the folders it reads (lab/runs/stages.py), so a rerun
on changed data is not answered with results of the old data, and a report can say which data
its numbers came from.

A folder's digest is the sha256 of its files' relative paths and sha256s, hidden files (the
partial files of a write under way) left out; a missing folder digests as MISSING.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .layout import paths
from .manifest import sha256_file

MISSING = "missing"
SHORT = 12  # hex digits shown in a report line: enough to tell two builds apart


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
    # Keyed by the file's stat as well as its path: a rewritten file is hashed again, an
    # untouched one once per process however many stages read it.
    return sha256_file(Path(path))


def file_digest(path: Path) -> str:
    stat = path.stat()
    return _file_digest(str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)


def data_files(folder: Path) -> Iterator[Path]:
    """Every file under `folder` that is data: hidden files and folders (a write under way)
    left out."""
    for directory, subfolders, files in os.walk(folder):
        subfolders[:] = [d for d in subfolders if not d.startswith(".")]
        yield from (Path(directory) / name for name in files if not name.startswith("."))


def folder_digest(folder: Path) -> str:
    """The digest of every file under `folder` (see the module docstring)."""
    if not folder.is_dir():
        return MISSING
    lines = [
        f"{path.relative_to(folder).as_posix()}\0{file_digest(path)}\n"
        for path in data_files(folder)
    ]
    return hashlib.sha256("".join(sorted(lines)).encode("utf-8")).hexdigest()


# The name under which a stage records the checkpoint its model starts from.
CHECKPOINT = "init_from"
# The name under which a stage records the model directory it reads (a fine-tuning's or a
# zero-shot score's pretrained model): another model in the same --output is other inputs.
PRETRAINED = "pretrained"


@dataclass(frozen=True)
class DataFolders:
    """Folders of one prepared data directory that a stage reads: `names` relative to `root`
    (the data directory), so a record stays comparable wherever the directory is; and
    `outside`, (name, folder) pairs read from elsewhere (the checkpoint a model starts from)."""

    root: Path
    names: tuple[str, ...]
    outside: tuple[tuple[str, Path], ...] = ()

    @classmethod
    def under(cls, root: Path, *folders: Path) -> DataFolders:
        return cls(root, tuple(folder.relative_to(root).as_posix() for folder in folders))

    def folders(self) -> dict[str, Path]:
        """{name: folder} of everything the stage reads."""
        return {**{name: self.root / name for name in self.names}, **dict(self.outside)}

    def digests(self) -> dict[str, str]:
        """{folder name: digest} of each folder."""
        return {name: folder_digest(folder) for name, folder in self.folders().items()}

    def last_written(self) -> float:
        """The newest modification time (seconds) of any file in the prepared folders; 0 for
        none. Not of `outside`: a checkpoint's files carry the time its package was
        installed, which says nothing of whether they changed."""
        times = [path.stat().st_mtime for n in self.names for path in data_files(self.root / n)]
        return max(times, default=0.0)

    def starting_from(self, checkpoint: Path) -> DataFolders:
        """What a stage reads when its model starts from `checkpoint` (weights and their
        tokenizer): the checkpoint, recorded as CHECKPOINT, instead of the prepared
        tokenizer, which it does not read."""
        tokenizer = paths(self.root).tokenizer.relative_to(self.root).as_posix()
        names = tuple(name for name in self.names if name != tokenizer)
        return DataFolders(self.root, names, (*self.outside, (CHECKPOINT, Path(checkpoint))))


def english_folders(data_dir: str | os.PathLike | None, tasks=()) -> DataFolders:
    """What the English lab reads: the corpus and tokenizer, and the named tasks."""
    where = paths(data_dir)
    tasks_read = (where.task_dir(task) for task in tasks)
    return DataFolders.under(where.root, where.corpus_dir, where.tokenizer, *tasks_read)


def xlingual_folders(data_dir: str | os.PathLike | None) -> DataFolders:
    """The cross-lingual set: its corpus, tokenizer and tasks live in one folder."""
    where = paths(data_dir)
    return DataFolders.under(where.root, where.xlingual_dir)


def translation_folders(data_dir: str | os.PathLike | None, name: str) -> DataFolders:
    where = paths(data_dir)
    return DataFolders.under(where.root, where.translation_dir(name))


def shortened(digests: dict[str, str]) -> dict[str, str]:
    """The digests cut to their first SHORT hex digits, as reports and messages show them."""
    return {name: digest[:SHORT] for name, digest in digests.items()}


def digest_line(digests: dict[str, str]) -> str:
    """'corpus 1a2b3c4d5e6f, tokenizer ...': the folders' digests shortened for a report."""
    return ", ".join(f"{name} {digest}" for name, digest in shortened(digests).items())
