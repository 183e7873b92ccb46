"""`compare --adopt RUN_DIR`: a stage run on its own (`posattn pretrain --output RUN_DIR`, in
another process or on another machine) taken into a comparison as the cell of the same
settings, instead of training that cell again.

A run is adopted only where it is finished (its marker written) and its stage.json fingerprint
equals a cell's: the same fingerprint is what a rerun of the comparison itself would accept as
that cell's result. Its files are hard-linked into the cell's directory (copied across file
systems) under a temporary name that is renamed into place once complete, so an interrupted
adoption leaves no half-filled cell. A cell that already holds the same finished stage is left
as it is; one holding anything else is refused, as `compare` refuses it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ...errors import PosAttnConfigError
from .fingerprint import differences
from .stages import STAGE_FILE, Stage, stage_record

ADOPTED, ALREADY_THERE = "adopted", "already there"


def adopt_runs(run_dirs: Sequence[str | Path], stages: Sequence[Stage]) -> list[tuple[Path, str]]:
    """Each run of `run_dirs` into the stage (of `stages`) with its fingerprint; returns
    (cell directory, ADOPTED or ALREADY_THERE) per run. Every run is checked before any is
    linked, so a refused list changes nothing."""
    chosen = [(Path(run), matching_stage(Path(run), stages)) for run in run_dirs]
    targets = [stage.directory for _, stage in chosen]
    for directory in {d for d in targets if targets.count(d) > 1}:
        runs = [str(run) for run, stage in chosen if stage.directory == directory]
        raise PosAttnConfigError(
            f"--adopt: {', '.join(runs)} are all runs of the cell {directory}; give one"
        )
    states = [(run, stage, cell_state(run, stage)) for run, stage in chosen]
    done = []
    for run, stage, state in states:
        if state == ADOPTED:
            link_tree(run, stage.directory)
        done.append((stage.directory, state))
    return done


def matching_stage(run: Path, stages: Sequence[Stage]) -> Stage:
    """The stage whose fingerprint the finished run `run` carries; an error that names the
    nearest stage's differing settings where none has it."""
    if not (run / STAGE_FILE).is_file():
        raise PosAttnConfigError(
            f"--adopt {run}: no {STAGE_FILE} there; give the --output directory of a "
            "`posattn pretrain` run"
        )
    record = stage_record(run)
    if record is None:
        raise PosAttnConfigError(f"--adopt {run}: its {STAGE_FILE} cannot be read")
    found = [s for s in stages if s.matches(record)]
    if not found:
        settings = record.get("settings", {})
        nearest = min(stages, key=lambda s: len(differences(settings, s.settings)))
        listed = "; ".join(differences(settings, nearest.settings)) or "posattn version"
        raise PosAttnConfigError(
            f"--adopt {run}: its settings are those of no cell of this comparison; the "
            f"nearest, {nearest.directory}, differs in {listed} (run -> cell)"
        )
    stage = found[0]
    if not (run / stage.marker).is_file():
        raise PosAttnConfigError(
            f"--adopt {run}: not finished (no {stage.marker}); finish it first (`posattn "
            "pretrain ... --resume` with the same --output), then adopt it"
        )
    return stage


def cell_state(run: Path, stage: Stage) -> str:
    """ADOPTED where the cell directory is empty or absent, ALREADY_THERE where it holds the
    same finished stage; anything else is refused."""
    directory = stage.directory
    if run.resolve() == directory.resolve():
        return ALREADY_THERE
    if not directory.is_dir() or not any(directory.iterdir()):
        return ADOPTED
    if stage.matches(stage.record()) and (directory / stage.marker).is_file():
        return ALREADY_THERE
    raise PosAttnConfigError(
        f"--adopt {run}: its cell {directory} already holds other or unfinished outputs; "
        "move them away (or run `compare --overwrite` without --adopt to discard them)"
    )


def link_tree(source: Path, target: Path) -> None:
    """Every file of `source` under `target`: hard links, copies where the file systems
    differ; built beside `target` and renamed into place."""
    partial = target.with_name(f".{target.name}.adopting")
    shutil.rmtree(partial, ignore_errors=True)
    for folder, _, files in os.walk(source):
        into = partial / Path(folder).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(Path(folder) / name, into / name)
            except OSError:
                shutil.copy2(Path(folder) / name, into / name)
    if target.is_dir():
        target.rmdir()  # empty: cell_state found nothing in it
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, target)
