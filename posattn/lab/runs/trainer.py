"""The transformers Trainer with checkpoints that appear atomically and a resumable run dir."""

from __future__ import annotations

import os
import re
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging as transformers_logging

from ...errors import PosAttnConfigError, invalid, require
from .integrity import checkpoint_problems, write_checksums
from .param_groups import scale_positional_lr
from .ranks import world_size
from .trainer_section import TrainerSection, trainer_arguments

STAGING = ".staging"
TENSORBOARD = "tensorboard"
TENSORBOARD_ENV = "TENSORBOARD_LOGGING_DIR"
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class AtomicCheckpointTrainer(Trainer):
    """Writes each checkpoint into a staging folder, adds the sha256 of each of its files
    (checksums.json), then renames it into place: a run killed while saving leaves the
    previous checkpoints intact and no half-written one."""

    _staging_dir: str | None = None

    def __init__(
        self,
        *args,
        positional_lr_scale: float = 1.0,
        input_positions_lr_scale: float | None = None,
        **kwargs,
    ) -> None:
        """positional_lr_scale: the positional encodings' learning rate as a multiple of the
        run's (`trainer.positional_lr_scale`, param_groups.py); input_positions_lr_scale: the
        input position table's (`trainer.input_positions_lr_scale`, None: the same)."""
        super().__init__(*args, **kwargs)
        self.positional_lr_scale = positional_lr_scale
        self.input_positions_lr_scale = input_positions_lr_scale

    def create_optimizer(self, model=None):
        fresh = self.optimizer is None
        optimizer = super().create_optimizer(model)
        scale, input_scale = self.positional_lr_scale, self.input_positions_lr_scale
        if fresh and (scale != 1.0 or input_scale is not None):
            moved, moved_inputs = scale_positional_lr(optimizer, self.model, scale, input_scale)
            encoding = getattr(self.model.config, "encoding", None)
            what = (
                "has none to scale"
                if input_scale is None
                else "has none besides its input position table, which "
                "trainer.input_positions_lr_scale sets"
            )
            # a scale that reaches no parameter would train exactly as 1 under another name
            require(
                moved > 0 or scale == 1.0,
                "trainer.positional_lr_scale",
                scale,
                f"1.0 for a model without trainable positional parameters (encoding "
                f"{encoding!r} {what})",
            )
            require(
                moved_inputs > 0 or input_scale is None,
                "trainer.input_positions_lr_scale",
                input_scale,
                f"null for a model without an input position table (encoding {encoding!r} "
                "has none: learned, bert-r and linformer do)",
            )
        return optimizer

    def _get_output_dir(self, trial):
        return self._staging_dir or super()._get_output_dir(trial)

    def _issue_warnings_after_load(self, load_result) -> None:
        # A tied output matrix is saved once, under the word embeddings' name: its own key is
        # missing from every checkpoint by design and the tie restored it, so only the keys
        # that are really absent are reported.
        tied = getattr(self.model, "all_tied_weights_keys", None) or {}  # empty when untied
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = super()._get_output_dir(trial)
        staging = os.path.join(run_dir, STAGING)
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        self._staging_dir = staging
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_dir = None
            self.args.save_total_limit = limit
        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # every rank has written its RNG state into the staging folder
        if self.args.should_save:
            name = f"checkpoint-{self.state.global_step}"
            target = os.path.join(run_dir, name)
            write_checksums(Path(staging) / name)
            if os.path.exists(target):
                shutil.rmtree(target)
            os.replace(os.path.join(staging, name), target)
            prune_checkpoints(Path(run_dir), limit)
        if dist.is_available() and dist.is_initialized():
            dist.barrier()


def checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints in a Trainer output dir, oldest first."""
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if (m := CHECKPOINT.match(p.name))]
    return [path for _, path in sorted(found)]


def prune_checkpoints(run_dir: Path, keep: int | None) -> None:
    if keep:
        for old in checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old)


def last_checkpoint(run_dir: Path) -> Path:
    found = checkpoints(run_dir)
    if not found:
        raise invalid(
            "--resume",
            str(run_dir),
            "a run directory that holds a checkpoint (checkpoint-N); none was found",
        )
    return found[-1]


def last_intact_checkpoint(run_dir: Path) -> Path:
    """The newest checkpoint whose files match their checksums (last_checkpoint's error when
    there is none at all): each damaged newer one is reported by a warning naming the file;
    a PosAttnConfigError when every checkpoint is damaged."""
    last_checkpoint(run_dir)  # none at all: its error
    found = checkpoints(run_dir)
    damaged = []
    for checkpoint in reversed(found):
        problems = checkpoint_problems(checkpoint)
        if not problems:
            if damaged:
                warnings.warn(f"resuming from {checkpoint}", stacklevel=2)
            return checkpoint
        path, problem = problems[0]
        damaged.append(f"{path}: {problem}")
        warnings.warn(f"damaged checkpoint {checkpoint}: {path} ({problem})", stacklevel=2)
    raise PosAttnConfigError(
        f"--resume: no intact checkpoint in {run_dir}: every one is damaged ("
        + "; ".join(damaged)
        + "); remove them, or start the run again in a new --output"
    )


class EpochToDataset(TrainerCallback):
    """Tells a dataset the epoch, so its random masking changes per epoch deterministically."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.dataset.set_epoch(int(state.epoch or 0))


@contextmanager
def tensorboard_logs(directory: Path) -> Iterator[None]:
    """Route the Trainer's own TensorBoardCallback (report_to=["tensorboard"]) to `directory`.

    transformers v5 dropped TrainingArguments.logging_dir: the callback reads
    $TENSORBOARD_LOGGING_DIR when the Trainer builds it, else writes under output_dir/runs/<date>.
    Build the Trainer inside this block; the variable is restored right after, so that each of
    the runs of one process (compare's encodings, fine-tuning seeds) keeps its own folder.
    A resumed run appends a new event file to the same folder.
    """
    previous = os.environ.get(TENSORBOARD_ENV)
    os.environ[TENSORBOARD_ENV] = str(directory)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TENSORBOARD_ENV, None)
        else:
            os.environ[TENSORBOARD_ENV] = previous


def per_device_batch(
    batch_size: int, key: str, trainer: TrainerSection, processes: int | None = None
) -> int:
    """The micro-batch of one process for a global `batch_size` (config key `key`): split over
    the processes and the gradient accumulation steps, which must divide it."""
    processes = world_size() if processes is None else processes
    parts = processes * trainer.gradient_accumulation_steps
    require(
        batch_size % parts == 0,
        key,
        batch_size,
        f"a multiple of processes ({processes}) x trainer.gradient_accumulation_steps "
        f"({trainer.gradient_accumulation_steps}): it is the global batch",
    )
    return batch_size // parts


def step_training_arguments(
    section, section_name: str, output: Path, trainer: TrainerSection, **overrides
) -> TrainingArguments:
    """TrainingArguments of a step-based run from a config section with steps, batch_size
    (global), learning_rate, warmup_ratio, weight_decay, max_grad_norm, adam_epsilon,
    eval_steps, save_steps, logging_steps and seed, and the run config's trainer section;
    `overrides` are the run's own choices."""
    processes = world_size()
    micro_batch = per_device_batch(section.batch_size, f"{section_name}.batch_size", trainer)
    arguments = dict(
        output_dir=str(output / "checkpoints"),
        max_steps=section.steps,
        per_device_train_batch_size=micro_batch,
        per_device_eval_batch_size=micro_batch * trainer.gradient_accumulation_steps,
        learning_rate=section.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=round(section.warmup_ratio * section.steps),
        weight_decay=section.weight_decay,
        max_grad_norm=section.max_grad_norm,
        adam_epsilon=section.adam_epsilon,
        eval_strategy="steps",
        prediction_loss_only=True,
        eval_steps=section.eval_steps,
        save_strategy="steps",
        save_steps=section.save_steps,
        save_total_limit=2,
        logging_steps=section.logging_steps,
        seed=section.seed,
        data_seed=section.seed,
        remove_unused_columns=False,
        use_cpu=not torch.cuda.is_available(),
        # Under torchrun: NCCL on GPUs, gloo on CPUs; a single process sets none.
        ddp_backend=(("nccl" if torch.cuda.is_available() else "gloo") if processes > 1 else None),
    )
    return TrainingArguments(**{**arguments, **trainer_arguments(trainer), **overrides})


@contextmanager
def quiet_transformers():
    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(level)
