"""`posattn bench`: time and memory of every encoding against fused attention without a bias."""

from __future__ import annotations

import argparse
from pathlib import Path


def run_bench(args: argparse.Namespace) -> int:
    from ... import execution
    from ...errors import named_as_flags
    from ...option_lists import encoding_options_of, names_of, positive_integers_of
    from .bench import bench
    from .settings import BenchSettings

    settings = BenchSettings.quick() if args.quick else BenchSettings()
    if args.lengths is not None:  # the attention level is always measured
        settings.lengths = positive_integers_of("--lengths", args.lengths)
    if args.encodings:
        settings.encodings = names_of("--encodings", args.encodings)
    if args.kernels:
        settings.kernels = names_of("--kernels", args.kernels)
    for name in ("model_lengths", "long_lengths"):
        value = getattr(args, name)
        if value is not None:  # "" measures none of that level
            option = "--" + name.replace("_", "-")
            setattr(settings, name, positive_integers_of(option, value, none_allowed=True))
    if args.floor_backends is not None:  # "" pins none
        settings.floor_backends = names_of(
            "--floor-backends", args.floor_backends, none_allowed=True
        )
    settings.dtype = args.dtype
    settings.encoding_options = encoding_options_of("--option", args.option or [])
    if args.attention_dropout is not None:
        from ...errors import require

        require(
            0 <= args.attention_dropout < 1,
            "--attention-dropout", args.attention_dropout, "a probability 0 <= p < 1",
        )  # fmt: skip
        settings.attention_dropout = args.attention_dropout
    choices = {}
    for text in args.choose or []:
        choices.update(execution.parse(text))
    output = Path(args.output or ("runs/bench-quick" if args.quick else "runs/bench"))
    with execution.choose(**choices), named_as_flags(*vars(args)):
        bench(settings, output)
    return 0


def register(commands) -> None:
    parser = commands.add_parser("bench", help="time and memory of every encoding vs SDPA")
    parser.add_argument("--quick", action="store_true", help="a run of about two minutes")
    parser.add_argument("--lengths", help="comma-separated sequence lengths")
    parser.add_argument("--encodings", help="comma-separated encodings")
    parser.add_argument(
        "--model-lengths", help="comma-separated lengths of the model level ('' for none)"
    )
    parser.add_argument(
        "--long-lengths", help="comma-separated lengths of the Linformer level ('' for none)"
    )
    parser.add_argument(
        "--kernels", help="comma-separated attention kernels to measure (default: auto)"
    )
    parser.add_argument(
        "--floor-backends",
        help="SDPA's kernels (flash, cudnn, efficient) to time pinned, without a bias, beside "
        "its own choice (default: all three on a GPU, none on CPU; '' for none)",
    )
    parser.add_argument(
        "--dtype", help="float32 | bfloat16 | float16 (default: bfloat16 on GPU, else float32)"
    )
    parser.add_argument(
        "--choose",
        action="append",
        metavar="NAME=VALUE",
        help="an execution choice for the whole run (posattn.execution: fold=true, skew=none, "
        "kernel=sdpa, ..._threshold_bytes=N); repeatable",
    )
    parser.add_argument(
        "--option",
        action="append",
        metavar="ENCODING.KEY=VALUE",
        help="an encoding option for the whole run, over the bench's own (rope.layout=half, "
        "xpos.layout=half): rope.layout=interleaved, t5.num_buckets=64, ...; repeatable",
    )
    parser.add_argument(
        "--attention-dropout",
        type=float,
        help="dropout inside attention for every model of the model level (default 0; "
        "BERT's is 0.1)",
    )
    parser.add_argument("--output", help="the run directory")
    parser.set_defaults(func=run_bench)
