"""A task failing in one of `compare`'s worker processes ends the run at once: the error comes
back, and cells not started by then are not run (the probe grid's: tests/test_probe_run.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from posattn.lab.pretraining.compare import run_cells


def first_fails(config, cell: str, output: Path, overwrite: bool) -> str:
    """A cell runner for spawned workers: cell "0" fails at once, every other one takes a
    while and leaves a file behind."""
    if cell == "0":
        raise ValueError("cell 0 failed")
    time.sleep(0.5)
    (output / cell).write_text("ran")
    return cell


def test_a_failed_cell_of_compare_ends_the_run_without_running_the_rest(tmp_path):
    cells = [str(index) for index in range(24)]
    with pytest.raises(ValueError, match="cell 0 failed"):
        run_cells(None, cells, tmp_path, False, workers=2, runner=first_fails)
    ran = sorted(path.name for path in tmp_path.iterdir())
    # The cells running or already handed to the workers' queue when cell 0 failed (a
    # worker's own and the executor's call queue of workers + 1; a loaded machine starts one
    # worker late), not the other 23 that leaving the pool's block ran before.
    assert len(ran) <= 12, ran
