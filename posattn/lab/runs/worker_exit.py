"""Pool workers that end with the command that started them.

A command killed with SIGTERM (or SIGKILL, or the out-of-memory killer) exits at once, and
its ProcessPoolExecutor's workers, spawned interpreters of their own, would go on training
their cells. The run directory's lock names the command's pid only, so the next command
there takes the lock over as stale while those orphans still write the same cells. Each
worker watches its parent's sentinel (the pipe multiprocessing gives a spawned child, which
reads end-of-file when the parent dies) and exits when it fires: a cell loses the steps
since its last checkpoint, which is written atomically, as when the whole run is killed."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading

# The exit status of a worker whose command died (128 + SIGTERM, as a shell reports it).
PARENT_GONE = 143


def end_with_parent() -> None:
    """In a pool worker (from its initializer): exit when the process that spawned it dies.
    A no-op in a process that was not started by multiprocessing."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(PARENT_GONE)  # no cleanup to run: the cell's files are written atomically

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()
