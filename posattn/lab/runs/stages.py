"""Stages of a run and their fingerprints: what lets a rerun reuse or resume only results of
the same settings.

A stage (a model's pretraining, its fine-tuning, one translation run) is a directory whose
result is fixed by some config sections. Its fingerprint is a stable hash of those sections as
canonical JSON plus the posattn version. The settings name the data directory by path, so a
stage also records a digest of each prepared data folder it reads (data/identity.py): the same
settings on rebuilt data are other inputs. `start_stage` records both in the directory's
stage.json ({fingerprint, settings, data}) before the first step, and `save_run` writes the
stage's outputs, its marker file last. On a rerun `stage_state` decides:

    same fingerprint and data, marker written -> "finished": the outputs are reused
    same fingerprint and data, checkpoints, no marker -> "resume": training continues
    outputs of other (or unknown) settings or data -> refused with a PosAttnConfigError that
                                              names the differing keys (old -> new), unless
                                              overwrite, which deletes the stage so it is
                                              computed afresh

A stage.json written before stages recorded their data has settings but no digests: it is
reused on its settings alone, with a warning that its data cannot be checked - unless a file
of the folders it reads was written after it (the data was prepared again since): refused.

Refusing (rather than quietly recomputing) keeps a comparison's directory from holding results
of two settings and never throws away hours of training without being asked to.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...data.identity import CHECKPOINT, PRETRAINED, DataFolders, shortened
from ...data.manifest import write_atomic
from ...errors import PosAttnConfigError
from .config import to_yaml
from .fingerprint import differences, fingerprint
from .model_card import write_model_card
from .ranks import barrier
from .trainer import checkpoints, last_intact_checkpoint

# Whether a recorded stage (its stage.json) of other settings is the start of this one.
Extends = Callable[[dict], bool]
STAGE_FILE = "stage.json"
FRESH, RESUME, FINISHED = "fresh", "resume", "finished"
# Outputs of other settings or data: the caller refuses or discards them (`outputs_state`).
FOREIGN = "foreign"
REMEDY = "Pass a new --output to keep both, or --overwrite to discard these outputs."
DATA_KEY = "data"
WRITTEN_KEY = "_written"  # stage.json's modification time, added when read, never stored
_warned_undigested: list[Path] = []  # one warning per process, not one per old stage


def is_main_process() -> bool:
    """Rank 0 under torchrun (RANK), or a single process: the one that writes shared files."""
    return int(os.environ.get("RANK", "0")) == 0


@dataclass(frozen=True)
class Stage:
    """A stage's directory, its settings, the file it writes last (its marker) and the
    prepared data folders it reads (None: a stage of no data directory, or one built only for
    its settings)."""

    directory: Path
    settings: dict
    marker: str
    data: DataFolders | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.settings)

    def data_digests(self) -> dict[str, str] | None:
        return None if self.data is None else self.data.digests()

    def record(self) -> dict | None:
        """The stage.json found in the directory; None where missing or damaged."""
        return stage_record(self.directory)

    def matches(self, record: dict | None) -> bool:
        """Whether `record` (a stage.json) is of this stage's settings and data."""
        if record is None or record.get("fingerprint") != self.fingerprint:
            return False
        recorded = record.get(DATA_KEY)
        if self.data is None:
            return True
        if recorded is None:
            if data_written_since(self, record):
                return False
            warn_undigested(self.directory)
            return True
        return recorded == self.data_digests()


def data_written_since(stage: Stage, record: dict) -> bool:
    """Whether a file of the stage's data folders is newer than `record` (a stage.json)."""
    written = record.get(WRITTEN_KEY)
    return stage.data is not None and written is not None and stage.data.last_written() > written


def warn_undigested(directory: Path) -> None:
    if not _warned_undigested:
        warnings.warn(
            f"{directory / STAGE_FILE} records no data digests (written before posattn "
            "recorded them): the data it was computed from cannot be checked, it is reused on "
            "its settings alone (so is any other such stage, without a further warning from "
            "this process)",
            stacklevel=4,
        )
    _warned_undigested.append(directory)


def stage_record(directory: Path) -> dict | None:
    """The stage.json of a stage directory ({fingerprint, settings}); None where missing or
    damaged."""
    path = Path(directory) / STAGE_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(record, dict):
            record[WRITTEN_KEY] = path.stat().st_mtime
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def mismatch_error(stage: Stage, record: dict | None, remedy: str) -> PosAttnConfigError:
    where = str(stage.directory)
    if record is None:
        return PosAttnConfigError(
            f"{where} holds outputs without a {STAGE_FILE} (written by an older posattn, or "
            f"damaged): their settings are unknown. {remedy}"
        )
    changed = differences(record.get("settings", {}), stage.settings)
    recorded = record.get(DATA_KEY)
    if recorded is None and data_written_since(stage, record):
        changed.append(
            f"data: prepared again after this {STAGE_FILE} was written, which records no "
            "digests (an older posattn): the data it read cannot be shown to be the same"
        )
    if recorded is not None and stage.data is not None:
        now = shortened(stage.data_digests())
        data = differences({DATA_KEY: shortened(recorded)}, {DATA_KEY: now})
        changed += [f"{line} ({changed_input(line)})" for line in data]
    listed = "; ".join(changed) or "fingerprint differs"
    return PosAttnConfigError(f"{where} holds results of other settings ({listed}). {remedy}")


def changed_input(line: str) -> str:
    """Why a line of a data difference (`data.NAME: old -> new`) matters, by its folder."""
    if line.startswith(f"{DATA_KEY}.{CHECKPOINT}"):
        return "the checkpoint the model starts from, pretrain.init_from, changed"
    if line.startswith(f"{DATA_KEY}.{PRETRAINED}"):
        return "another pretrained model, or the same directory's model changed"
    return "the prepared data was rebuilt or changed"


def stage_state(stage: Stage, overwrite: bool = False, extends: Extends | None = None) -> str:
    """FINISHED, RESUME or FRESH for a stage about to run (see the module docstring); with
    overwrite, a stage of other settings is deleted and FRESH; `extends`: see `extended`.
    Every rank of a launched run calls it for every stage."""
    state = read_stage_state(stage, overwrite, extends)
    # Under a launcher every rank reads every stage: none may start writing one before all
    # have read it (a rank reading a half-started stage would take it for a foreign one).
    barrier()
    return state


def reuse_counts(states: list[str]) -> dict:
    """{"total", "reused"} of a comparison's stage states read before it runs: the wall-time
    line of its report says how many stages an earlier invocation had finished."""
    return {"total": len(states), "reused": states.count(FINISHED)}


def extended(stage: Stage, record: dict | None, extends: Extends | None) -> bool:
    """Whether outputs of the recorded, other settings stay as the start of `stage`:
    extends(record) holds (a fine-tuning given more seeds keeps the runs it has). Their
    marker, a result of the old settings, is then removed; the stage starts FRESH."""
    if record is None or extends is None or not extends(record):
        return False
    if is_main_process():
        (stage.directory / stage.marker).unlink(missing_ok=True)
    return True


def outputs_state(stage: Stage, extends: Extends | None = None) -> tuple[str, dict | None]:
    """What a stage's directory that holds outputs holds, with its stage.json's record:
    FINISHED (its marker), RESUME (checkpoints, no marker), FRESH (neither, or outputs of
    other settings that `extends` keeps as its start) or FOREIGN (other or unknown settings or
    data). What to do about checkpoints and foreign outputs is the caller's: a comparison's
    cell resumes and, with overwrite, discards; a standalone command needs --resume and
    --overwrite (runs/standalone.py)."""
    record = stage.record()
    if not stage.matches(record):
        return (FRESH if extended(stage, record, extends) else FOREIGN), record
    if (stage.directory / stage.marker).is_file():
        return FINISHED, record
    return (RESUME if checkpoints(stage.directory / "checkpoints") else FRESH), record


def read_stage_state(stage: Stage, overwrite: bool, extends: Extends | None = None) -> str:
    """`stage_state` on this process alone, without waiting for the other ranks."""
    directory = stage.directory
    if not directory.is_dir() or not any(directory.iterdir()):
        return FRESH
    state, record = outputs_state(stage, extends)
    if state != FOREIGN:
        return state
    if not overwrite:
        raise mismatch_error(stage, record, REMEDY)
    shutil.rmtree(directory, ignore_errors=True)  # every rank may try: none must fail
    return FRESH


def start_stage(stage: Stage, resume: bool = False) -> str | None:
    """Before a stage's first step: with resume, the path of its last checkpoint, which must
    have been written with the same settings; records stage.json; returns the checkpoint (None
    for a fresh start)."""
    checkpoint = None
    if resume:
        checkpoint = str(last_intact_checkpoint(stage.directory / "checkpoints"))
        record = stage.record()
        if not stage.matches(record):
            raise mismatch_error(
                stage, record, "Resume with the settings of that run, or start a new --output."
            )
    if is_main_process():
        record = {"fingerprint": stage.fingerprint, "settings": stage.settings}
        if stage.data is not None:
            record[DATA_KEY] = stage.data_digests()
        write_atomic(stage.directory / STAGE_FILE, json.dumps(record, indent=2) + "\n")
    return checkpoint


def save_run(
    output: Path,
    files: dict[str, Any],
    config: Any = None,
    trainer: Any = None,
    tokenizer: Any = None,
) -> None:
    """Write a run's outputs on the main process (call it on every rank): with a trainer,
    its model (and tokenizer) into output/model with a model card (README.md; the first dict
    of `files` as its metrics); with a config, config.yaml; then `files` in their order, each
    atomically (str: as text, else as indented JSON). Put the stage's marker last: it is
    written only once everything else is in place."""
    output = Path(output)
    if trainer is not None:
        # Every rank: a sharded (FSDP) model's full state dict is gathered from all of them;
        # the Trainer writes it on the main process only.
        trainer.save_model(str(output / "model"))
    main = trainer.is_world_process_zero() if trainer is not None else is_main_process()
    if not main:
        return
    if trainer is not None:
        if tokenizer is not None:
            tokenizer.save_pretrained(str(output / "model"))
        model = trainer.model
        metrics = next((c for c in files.values() if isinstance(c, dict)), None)
        write_model_card(output / "model", model.config, config, metrics, kind=type(model).__name__)
    if config is not None:
        write_atomic(output / "config.yaml", to_yaml(config))
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content, indent=2)
        write_atomic(output / name, text)
