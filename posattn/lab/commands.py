"""`posattn pretrain | finetune | compare | bench`."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from .runconfig import RunConfig, load_run_config


def add_run_options(
    parser: argparse.ArgumentParser,
    default_preset: str | None,
    presets: str = "smoke | quick | paper-mini",
    example: str = "pretrain.steps=200 model.encoding=t5",
) -> None:
    parser.add_argument("--preset", default=default_preset, help=presets)
    parser.add_argument("--config", help="a YAML run config, applied over the preset")
    parser.add_argument("--output", help="the run directory")
    parser.add_argument("--data-dir", help="a prepared data directory (posattn data prepare)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=f"e.g. {example}")


def run_config(args: argparse.Namespace) -> RunConfig:
    config = load_run_config(args.preset, args.config, args.overrides)
    if args.data_dir:
        config = replace(config, data=replace(config.data, data_dir=args.data_dir))
    return config


def data_for(config: RunConfig):
    from .sources import PreparedData

    return PreparedData(config.data.data_dir)


def finish_distributed() -> None:
    """Under torchrun: wait for every rank, then tear the process group down before the
    interpreter exits (gloo aborts a rank whose group is destroyed by exit instead)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def run_pretrain(args: argparse.Namespace) -> int:
    from .pretrain import pretrain

    config = run_config(args)
    data = data_for(config)
    output = Path(args.output or f"runs/pretrain-{config.model.encoding}")
    pretrain(config, output, data.tokenizer(), data, resume=args.resume)
    finish_distributed()
    return 0


def run_finetune(args: argparse.Namespace) -> int:
    from .finetune import finetune

    config = run_config(args)
    data = data_for(config)
    output = Path(args.output or Path(args.pretrained).parent / "finetune")
    output.mkdir(parents=True, exist_ok=True)
    finetune(Path(args.pretrained), config, output, data.tokenizer(), data)
    finish_distributed()
    return 0


def run_compare(args: argparse.Namespace) -> int:
    if args.task == "translation":
        from ..translation.commands import run_compare as run_translation_compare

        return run_translation_compare(args)
    from .compare import compare

    args.preset = args.preset or "quick"
    config = run_config(args)
    if args.encodings:
        config = replace(config, encodings=[e.strip() for e in args.encodings.split(",")])
    data = data_for(config)
    output = Path(args.output or f"runs/compare-{args.preset or 'custom'}")
    compare(config, output, data.tokenizer(), data, data, args.preset or "custom")
    finish_distributed()
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from .bench import BenchSettings, bench

    settings = BenchSettings.quick() if args.quick else BenchSettings()
    if args.lengths:
        settings.lengths = [int(n) for n in args.lengths.split(",")]
    if args.encodings:
        settings.encodings = [e.strip() for e in args.encodings.split(",")]
    if args.kernels:
        settings.kernels = [k.strip() for k in args.kernels.split(",")]
    if args.model_lengths:
        settings.model_lengths = [int(n) for n in args.model_lengths.split(",")]
    settings.dtype = args.dtype
    bench(settings, Path(args.output or ("runs/bench-quick" if args.quick else "runs/bench")))
    return 0


def register(commands) -> None:
    parser = commands.add_parser("pretrain", help="masked-LM pretraining of one encoding")
    add_run_options(parser, "quick")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.set_defaults(func=run_pretrain)

    parser = commands.add_parser("finetune", help="fine-tune a pretrained model on the tasks")
    parser.add_argument("pretrained", help="the model directory written by posattn pretrain")
    add_run_options(parser, "quick")
    parser.set_defaults(func=run_finetune)

    parser = commands.add_parser(
        "compare", help="pretrain and fine-tune every encoding, then compare (the main job)"
    )
    parser.add_argument("--encodings", help="comma-separated encodings (default: the preset's)")
    parser.add_argument(
        "--task",
        choices=("pretraining", "translation"),
        default="pretraining",
        help="pretraining: MLM + fine-tuning (default); translation: encoder-decoders, BLEU",
    )
    add_run_options(parser, None)
    parser.set_defaults(func=run_compare)

    parser = commands.add_parser("bench", help="time and memory of every encoding vs SDPA")
    parser.add_argument("--quick", action="store_true", help="a run of about two minutes")
    parser.add_argument("--lengths", help="comma-separated sequence lengths")
    parser.add_argument("--encodings", help="comma-separated encodings")
    parser.add_argument("--model-lengths", help="comma-separated lengths of the model level")
    parser.add_argument(
        "--kernels", help="comma-separated attention kernels to measure (default: auto)"
    )
    parser.add_argument(
        "--dtype", help="float32 | bfloat16 | float16 (default: bfloat16 on GPU, else float32)"
    )
    parser.add_argument("--output", help="the run directory")
    parser.set_defaults(func=run_bench)
