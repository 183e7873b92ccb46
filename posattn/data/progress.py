"""Progress bars for `prepare` (rich, on stderr), silent when quiet."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

T = TypeVar("T")


class Reporter:
    def __init__(self, quiet: bool = False):
        self.console = Console(stderr=True, quiet=quiet)
        self.bars = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            disable=quiet,
        )

    def __enter__(self) -> Reporter:
        self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bars.stop()

    def track(self, items: Sequence[T], description: str) -> Iterator[T]:
        """Iterate over `items` with a bar; the label names the current item."""
        task = self.bars.add_task(description, total=len(items))
        for item in items:
            self.bars.update(task, description=f"{description}: {item}")
            yield item
            self.bars.advance(task)
        self.bars.update(task, description=description)

    @contextmanager
    def step(self, description: str) -> Iterator[None]:
        """A one-unit bar for a step that cannot count its progress."""
        task = self.bars.add_task(description, total=1)
        yield
        self.bars.advance(task)

    def log(self, message: str) -> None:
        self.console.print(message, highlight=False)
