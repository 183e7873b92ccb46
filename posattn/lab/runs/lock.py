"""One command at a time in a run directory (posattn.directory_lock): a second command on the
same directory is refused with a PosAttnConfigError naming the holder. Under torchrun only
global rank 0 takes the lock: every rank writes the same run directory on behalf of the one
command."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...directory_lock import LOCK_FILE, DirectoryLock, describe, lock_path
from ...errors import PosAttnConfigError

__all__ = ["LOCK_FILE", "RunLock", "holds_lock", "lock_path", "run_lock"]


def holds_lock() -> bool:
    """Whether this process takes run locks: always, except ranks > 0 under torchrun."""
    return os.environ.get("RANK", "0") in ("", "0")


class RunLock(DirectoryLock):
    """The lock of one run directory, held by this process between acquire() and release()."""

    def refusal(self, holder: dict) -> PosAttnConfigError:
        return PosAttnConfigError(
            f"run directory {str(self.directory)!r} is locked by {describe(holder)}: "
            f"wait for it to finish or choose another --output (lock: {self.path})"
        )


@contextmanager
def run_lock(run_dir: str | Path, command: str) -> Iterator[RunLock | None]:
    """Hold `run_dir`'s lock for the block (released on exceptions too); under torchrun only
    rank 0 takes it, the other ranks yield None."""
    if not holds_lock():
        yield None
        return
    with RunLock(run_dir, command) as lock:
        yield lock
