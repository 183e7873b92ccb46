"""What a standalone command (`posattn pretrain | finetune | zero-shot | translate train
--output DIR`) finds in its run directory, and what it does about it:

    nothing yet (the lock aside)      -> computed
    this stage finished               -> reused: nothing is computed, the command says so
    this stage's checkpoints only     -> --resume continues from them; without it, refused
    outputs of other settings or data -> refused, naming what differs
    --overwrite                       -> the directory's outputs are discarded first

("this stage": the same settings and data; a fine-tuning or zero-shot score also records the
model directory it reads, by its digest.)

A second command on a run directory used to train again over the first one's outputs whatever
their settings: a finished model of other settings was replaced without a word, and a killed
run's checkpoints stayed beside the new run's, where a later --resume would take the newest of
either. A comparison's cells follow the same rules through `stage_state`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...data.identity import PRETRAINED, DataFolders
from ...errors import PosAttnConfigError, require
from .lock import LOCK_FILE
from .ranks import barrier
from .stages import (
    FINISHED,
    FOREIGN,
    FRESH,
    REMEDY,
    RESUME,
    STAGE_FILE,
    Extends,
    Stage,
    is_main_process,
    mismatch_error,
    outputs_state,
    stage_record,
)
from .trainer import checkpoints


def reading_model(data: DataFolders, model_dir: Path) -> DataFolders:
    """`data` plus the model directory a stage reads, recorded by its digest as PRETRAINED."""
    return DataFolders(data.root, data.names, (*data.outside, (PRETRAINED, Path(model_dir))))


def outputs_in(directory: Path) -> list[Path]:
    """What a run directory holds besides the lock of the command now running in it."""
    if not directory.is_dir():
        return []
    return [entry for entry in directory.iterdir() if entry.name != LOCK_FILE]


def discard_outputs(directory: Path) -> None:
    """Delete a run directory's outputs; the lock this command holds stays. A directory
    without a stage.json is not known to be a run (`--output ~` is a typo away): refused."""
    found = outputs_in(directory)
    if found and stage_record(directory) is None:
        raise PosAttnConfigError(
            f"--overwrite: {directory} holds {len(found)} entries but no readable {STAGE_FILE}, "
            "so it is not known to be a posattn run and nothing in it is deleted: choose "
            "another --output, or empty it yourself"
        )
    if is_main_process():
        for entry in found:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    barrier()


def standalone_state(
    stage: Stage, overwrite: bool = False, resume: bool = False, extends: Extends | None = None
) -> str:
    """FRESH, RESUME or FINISHED for a standalone command's stage (see the module docstring);
    `extends`: outputs of other settings that may stay as the start of this stage
    (`stages.extended`)."""
    directory = stage.directory
    require(
        not (overwrite and resume),
        "--overwrite",
        True,
        "not with --resume: one discards the directory's outputs, the other continues them",
    )
    if overwrite:
        discard_outputs(directory)
        return FRESH
    state = FRESH
    if outputs_in(directory):
        state = state_of_outputs(stage, resume, extends)
    barrier()
    return state


def state_of_outputs(stage: Stage, resume: bool, extends: Extends | None) -> str:
    state, record = outputs_state(stage, extends)
    if state == FOREIGN:
        unknown = "Pass a new --output (--overwrite deletes only a posattn run's outputs)."
        raise mismatch_error(stage, record, REMEDY if record is not None else unknown)
    if state == RESUME and not resume:
        last = checkpoints(stage.directory / "checkpoints")[-1]
        raise PosAttnConfigError(
            f"{stage.directory} holds checkpoints of this run with these settings (the last: "
            f"{last.name}): pass --resume to continue from it, or --overwrite to start again"
        )
    return state


def reused(stage: Stage, state: str) -> bool:
    """Whether a standalone command's stage was finished before it started: then the main
    process says so."""
    if state != FINISHED:
        return False
    if is_main_process():
        print(
            f"{stage.directory}: finished before with these settings and data; its "
            f"{stage.marker} is reused and nothing is computed (--overwrite computes it again)"
        )
    return True
