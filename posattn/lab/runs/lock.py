"""One command at a time in a run directory: a lock file created atomically (O_CREAT|O_EXCL)
that names its holder (pid, host, command, start time).

A second command on the same directory is refused with a PosAttnConfigError naming the
holder; a lock left by a process that died on this host (killed, out of memory) is taken over
with a warning. Under torchrun only global rank 0 takes the lock: every rank writes the same
run directory on behalf of the one command."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...errors import PosAttnConfigError

LOCK_FILE = ".posattn.lock"


def lock_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / LOCK_FILE


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


def holds_lock() -> bool:
    """Whether this process takes run locks: always, except ranks > 0 under torchrun."""
    return os.environ.get("RANK", "0") in ("", "0")


class RunLock:
    """The lock of one run directory, held by this process between acquire() and release()."""

    def __init__(self, run_dir: str | Path, command: str) -> None:
        self.run_dir = Path(run_dir)
        self.path = lock_path(run_dir)
        self.command = command
        self.token: str | None = None

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
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

    def acquire(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a stale lock taken over, or a holder that finished meanwhile
            if self._create():
                return self
            holder = read_holder(self.path)
            if holder is None:
                continue  # released between our attempt and the read
            if not is_stale(holder):
                raise PosAttnConfigError(
                    f"run directory {str(self.run_dir)!r} is locked by {describe(holder)}: "
                    f"wait for it to finish or choose another --output (lock: {self.path})"
                )
            warnings.warn(
                f"taking over the stale lock of {self.run_dir}: {describe(holder)} is no "
                "longer running",
                stacklevel=2,
            )
            # Remove it only if it is still the stale holder's (another command may have
            # taken it over between our read and now).
            if read_holder(self.path) == holder:
                self.path.unlink(missing_ok=True)
        raise PosAttnConfigError(
            f"run directory {str(self.run_dir)!r}: could not take its lock {self.path}"
        )

    def release(self) -> None:
        """Remove the lock file if it is still ours."""
        if self.token is None:
            return
        holder = read_holder(self.path)
        if holder is not None and holder.get("token") == self.token:
            self.path.unlink(missing_ok=True)
        self.token = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@contextmanager
def run_lock(run_dir: str | Path, command: str) -> Iterator[RunLock | None]:
    """Hold `run_dir`'s lock for the block (released on exceptions too); under torchrun only
    rank 0 takes it, the other ranks yield None."""
    if not holds_lock():
        yield None
        return
    with RunLock(run_dir, command) as lock:
        yield lock
