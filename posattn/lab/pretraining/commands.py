"""`posattn pretrain | finetune`, and `compare --task pretraining`."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from ...option_lists import names_of
from ..runs.lock import run_lock
from ..runs.options import (
    add_overwrite_option,
    add_run_options,
    finish_distributed,
    model_directory,
)
from ..runs.trainer_section import check_machine
from .runconfig import RunConfig, load_run_config


def run_config(args: argparse.Namespace, inherited: dict | None = None) -> RunConfig:
    config = load_run_config(args.preset, args.config, args.overrides, inherited)
    if args.data_dir:
        config = replace(config, data=replace(config.data, data_dir=args.data_dir))
    check_machine(config.trainer, kernel=config.model.kernel)  # before a run directory is written
    return config


def pretrained_config(args: argparse.Namespace, trains: bool) -> tuple[RunConfig, Path]:
    """The run config of a command that reads a pretrained model (args.pretrained) and that
    model's directory: the preset with the model's own pretraining settings over it, then
    --config and the overrides (pretrained_run.py); `trains`: the command trains the model
    further, so its line names the positional rates."""
    from ..runs.stages import is_main_process
    from .pretrained_run import check_unchanged, inherited_sentence, pretraining_settings

    inherited = pretraining_settings(Path(args.pretrained))  # None where there is no run
    config = run_config(args, inherited)  # settings out of range are refused first
    pretrained = model_directory("pretrained", args.pretrained)
    if inherited is not None:
        check_unchanged(config, inherited, pretrained)
        if is_main_process():
            print(inherited_sentence(config, inherited, pretrained, trains))
    return config, pretrained


def data_for(config: RunConfig):
    from ..runs.sources import PreparedData

    return PreparedData(config.data.data_dir)


def tokenizer_for(config: RunConfig, data):
    from .warm_start import run_tokenizer

    return run_tokenizer(config.pretrain.init_from, data)


def run_pretrain(args: argparse.Namespace) -> int:
    from ..runs.standalone import reused, standalone_state
    from .pretrain import pretrain, pretrain_stage

    config = run_config(args)
    data = data_for(config)
    output = Path(args.output or f"runs/pretrain-{config.model.encoding}")
    with run_lock(output, "posattn pretrain"):
        stage = pretrain_stage(config, output, data.folders())
        state = standalone_state(stage, args.overwrite, args.resume)
        if not reused(stage, state):
            pretrain(config, output, tokenizer_for(config, data), data, resume=args.resume)
        finish_distributed()
    return 0


def run_finetune(args: argparse.Namespace) -> int:
    from ..runs.standalone import reading_model, reused, standalone_state
    from .finetune import adds_runs, finetune, finetune_stage

    config, pretrained = pretrained_config(args, trains=True)
    data = data_for(config)
    output = Path(args.output or pretrained.parent / "finetune")
    with run_lock(output, "posattn finetune"):
        read = reading_model(data.folders(config.finetune.tasks), pretrained)
        stage = finetune_stage(config, output, read)
        state = standalone_state(stage, args.overwrite, extends=adds_runs(stage))
        if not reused(stage, state):
            finetune(pretrained, config, output, tokenizer_for(config, data), data, stage)
        finish_distributed()
    return 0


def run_zero_shot(args: argparse.Namespace) -> int:
    from ..runs.stages import is_main_process, start_stage
    from ..runs.standalone import reused, standalone_state
    from .zero_shot import ZERO_SHOT_TASKS, score_model, scored_once, standalone_zero_shot_stage

    config, pretrained = pretrained_config(args, trains=False)
    data = data_for(config)
    output = Path(args.output or pretrained.parent / "zero-shot")
    tokenizer = tokenizer_for(config, data)

    def score() -> dict:
        return {
            task: score_model(pretrained, task, tokenizer, data, config.finetune)
            for task in ZERO_SHOT_TASKS
        }

    with run_lock(output, "posattn zero-shot"):
        stage = standalone_zero_shot_stage(config, output, pretrained, data)
        if reused(stage, standalone_state(stage, args.overwrite)):
            result = json.loads((output / stage.marker).read_text())
        else:
            start_stage(stage)
            result = scored_once(output, score)
    if is_main_process():
        for task, scored in result.items():
            pairs = len(scored["per_pair"])
            print(f"{task}: the written order preferred on {scored['score']:.1f}% of {pairs} pairs")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """compare --task pretraining (the default): MLM pretraining, then fine-tuning."""
    from .compare import compare

    args.preset = args.preset or "quick"
    config = run_config(args)
    if args.encodings:
        config = replace(config, encodings=names_of("--encodings", args.encodings))
    data = data_for(config)
    output = Path(args.output or f"runs/compare-{args.preset or 'custom'}")
    overwrite = getattr(args, "overwrite", False)
    with run_lock(output, "posattn compare --task pretraining"):
        tokenizer = tokenizer_for(config, data)
        adopt_pretraining(config, output, getattr(args, "adopt", []))
        compare(config, output, tokenizer, data, data, args.preset or "custom", overwrite)
        finish_distributed()
    return 0


def adopt_pretraining(config: RunConfig, output: Path, run_dirs: list[str]) -> None:
    """compare --adopt: finished standalone pretraining runs linked in as their cells."""
    from ..runs.adopt import adopt_runs
    from .compare import cells_of

    if not run_dirs:
        return
    stages = [cell.stage(config, output) for cell in cells_of(config)[0]]
    for (directory, state), run in zip(adopt_runs(run_dirs, stages), run_dirs, strict=True):
        print(f"--adopt {run}: {state} as {directory}")


def run_compare_xlingual(args: argparse.Namespace) -> int:
    """compare --task xlingual: multilingual MLM pretraining, English fine-tuning, zero-shot
    tests in every other prepared language."""
    from .xlingual import compare_xlingual, load_xlingual_config

    args.preset = args.preset or "quick"
    config = load_xlingual_config(args.preset, args.config, args.overrides)
    if args.data_dir:
        config = replace(config, data=replace(config.data, data_dir=args.data_dir))
    check_machine(config.trainer, kernel=config.model.kernel)
    if args.encodings:
        config = replace(config, encodings=names_of("--encodings", args.encodings))
    output = Path(args.output or f"runs/xlingual-{args.preset}")
    overwrite = getattr(args, "overwrite", False)
    with run_lock(output, "posattn compare --task xlingual"):
        compare_xlingual(config, output, args.preset, overwrite)
    return 0


def register(commands) -> None:
    parser = commands.add_parser("pretrain", help="masked-LM pretraining of one encoding")
    add_run_options(parser, "quick")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    add_overwrite_option(parser)
    parser.set_defaults(func=run_pretrain)

    parser = commands.add_parser("finetune", help="fine-tune a pretrained model on the tasks")
    parser.add_argument("pretrained", help="the model directory written by posattn pretrain")
    add_run_options(parser, "quick")
    add_overwrite_option(parser)
    parser.set_defaults(func=run_finetune)

    parser = commands.add_parser(
        "zero-shot",
        help="score a pretrained masked LM on word order without fine-tuning: the share of "
        "test sentences it prefers as written to their reordering",
    )
    parser.add_argument("pretrained", help="the model directory written by posattn pretrain")
    add_run_options(parser, "quick")
    add_overwrite_option(parser)
    parser.set_defaults(func=run_zero_shot)

    parser = commands.add_parser(
        "paired",
        help="arms of pretraining, fine-tuning or zero-shot runs trained apart, each against "
        "the first over pretraining seeds: differences, t-interval, sign-flip p",
        description="Each NAME=DIR is one finished run (a posattn pretrain, finetune or "
        "zero-shot --output, or a compare cell) of the arm NAME; every arm after the first is "
        "compared with the first, run by run in the order given (the i-th run of each arm "
        "pairs with the i-th of the first: give them in pretraining-seed order).",
    )
    parser.add_argument("runs", nargs="+", metavar="NAME=DIR", help="a run of the arm NAME")
    parser.add_argument(
        "--task", help="the task of fine-tuning or zero-shot runs (default: the one they scored)"
    )
    parser.add_argument(
        "--finetune-seeds",
        help="fine-tuning runs: the fine-tuning seeds averaged per run, comma-separated "
        "(default: every seed of the first run)",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="the level of the intervals over seeds (default 0.95; 0.975 for a second look "
        "at seeds added after a first, two looks at 95%% together)",
    )
    parser.add_argument("--json", help="also write the result to this JSON file")
    parser.set_defaults(func=run_paired)


def run_paired(args: argparse.Namespace) -> int:
    from ...option_lists import seeds_of
    from .paired import run_paired as paired

    seeds = (
        None if args.finetune_seeds is None else seeds_of("--finetune-seeds", args.finetune_seeds)
    )
    json_path = None if args.json is None else Path(args.json)
    print("\n".join(paired(args.runs, args.task, seeds, args.confidence, json_path)))
    return 0
