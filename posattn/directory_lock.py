"""One command at a time in a directory: a lock file created atomically (O_CREAT|O_EXCL) that
names its holder (pid, host, command, start time).

A lock left by a process that died on this host (killed, out of memory) is taken over with a
warning; one held by a live process is refused (`acquire`) or waited for (`wait`). The lab's
run directories refuse a second command (lab/runs/lock.py); a data directory's `prepare`
waits for the one before it and then finds its steps done."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

from .errors import PosAttnConfigError

LOCK_FILE = ".posattn.lock"


def lock_path(directory: str | Path) -> Path:
    return Path(directory) / LOCK_FILE


def read_holder(path: Path) -> dict | None:
    """The lock's holder, or None when the file is gone; {} while it is being written."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return holder if isinstance(holder, dict) else {}


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (a zombie, dead but not yet reaped, does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return "Z" not in line.split()[1]
    except OSError:
        pass
    return True


def describe(holder: dict) -> str:
    if not holder:
        return "another command that is starting (the lock file is being written)"
    since = holder.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "?"
    return (
        f"pid {holder.get('pid')} on {holder.get('host')} ({holder.get('command')!r}, since {when})"
    )


def is_stale(holder: dict) -> bool:
    pid = holder.get("pid")
    return (
        holder.get("host") == socket.gethostname()
        and isinstance(pid, int)
        and not process_alive(pid)
    )


class DirectoryLock:
    """The lock of one directory, held by this process between acquire() (or wait()) and
    release()."""

    def __init__(self, directory: str | Path, command: str) -> None:
        self.directory = Path(directory)
        self.path = lock_path(directory)
        self.command = command
        self.token: str | None = None
        # The folders the lock made (deepest first), removed on release when left empty: a
        # command refused after taking the lock leaves no empty run directory behind.
        self.made: list[Path] = []

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except FileNotFoundError:  # its folder removed meanwhile by a holder's release
            return False
        token = uuid.uuid4().hex
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "argv": sys.argv,
            "since": time.time(),
            "token": token,
        }
        with os.fdopen(fd, "w") as file:
            json.dump(holder, file)
        self.token = token
        return True

    def _take(self) -> dict | None:
        """Take the lock (None), or say who holds it: a live holder, or {} while its file is
        being written."""
        for _ in range(3):  # a stale lock taken over, or a holder that finished meanwhile
            made = self._make_directory()
            if self._create():
                self.made = made
                return None
            holder = read_holder(self.path)
            if holder is None:
                continue  # released between our attempt and the read
            if not is_stale(holder):
                return holder
            warnings.warn(
                f"taking over the stale lock of {self.directory}: {describe(holder)} is no "
                "longer running",
                stacklevel=3,
            )
            # Remove it only if it is still the stale holder's (another command may have
            # taken it over between our read and now).
            if read_holder(self.path) == holder:
                self.path.unlink(missing_ok=True)
        raise PosAttnConfigError(f"{self.directory}: could not take its lock {self.path}")

    def _make_directory(self) -> list[Path]:
        """mkdir -p of the directory; the folders it made, deepest first."""
        missing = [p for p in (self.directory, *self.directory.parents) if not p.exists()]
        self.directory.mkdir(parents=True, exist_ok=True)
        return missing

    def refusal(self, holder: dict) -> PosAttnConfigError:
        return PosAttnConfigError(
            f"directory {str(self.directory)!r} is locked by {describe(holder)} (lock: {self.path})"
        )

    def acquire(self) -> DirectoryLock:
        """Take the lock, or refuse (PosAttnConfigError naming the holder) while it is held."""
        holder = self._take()
        if holder is not None:
            raise self.refusal(holder)
        return self

    def wait(self, notice: Callable[[str], None], poll_seconds: float = 1.0) -> DirectoryLock:
        """Take the lock, waiting while another live command holds it; `notice` is told once
        whom this waits for."""
        told = False
        while (holder := self._take()) is not None:
            if not told and holder:
                notice(f"waiting for {describe(holder)}, which holds {self.path}")
                told = True
            time.sleep(poll_seconds)
        return self

    def release(self) -> None:
        """Remove the lock file if it is still ours, and the folders taking it made if they
        are empty."""
        if self.token is None:
            return
        holder = read_holder(self.path)
        if holder is not None and holder.get("token") == self.token:
            self.path.unlink(missing_ok=True)
        self.token = None
        for folder in self.made:
            try:
                folder.rmdir()  # only an empty one: nothing written is ever removed
            except OSError:
                break
        self.made = []

    def __enter__(self) -> DirectoryLock:
        return self if self.token is not None else self.acquire()  # held already: by wait()

    def __exit__(self, *exc) -> None:
        self.release()
