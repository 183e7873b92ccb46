"""A pool whose failed task ends the run at once, for the lab's process pools (`compare`'s
cells, the probe grid's).

Leaving a `ProcessPoolExecutor` block with an error waits for every task submitted, so one
cell failing early came back only after every other cell of the run had trained. Here the
tasks not started are cancelled, the ones running finish (each stores its own outputs), and
the error is raised.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager


@contextmanager
def cancelled_on_error(pool: Executor) -> Iterator[Executor]:
    """`with ProcessPoolExecutor(...) as pool, cancelled_on_error(pool):` - an error (or an
    interrupt) inside cancels the tasks not started before it propagates."""
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
