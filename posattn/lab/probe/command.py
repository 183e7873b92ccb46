"""`posattn probe`: position probes and length generalisation."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...errors import named_as_flags
from ...option_lists import (
    encoding_options_of,
    names_of,
    positive_integers_of,
    positive_numbers_of,
)


def settings_from(args: argparse.Namespace):
    from .settings import preset

    overrides = {}
    if args.tasks:
        overrides["tasks"] = names_of("--tasks", args.tasks)
    if args.encodings:
        overrides["encodings"] = names_of("--encodings", args.encodings)
    if args.test_lens:
        overrides["test_lens"] = positive_integers_of("--test-lens", args.test_lens)
    if args.position_lr_scales is not None:
        overrides["position_lr_scales"] = positive_numbers_of(
            "--position-lr-scales", args.position_lr_scales
        )
    if args.option:
        overrides["encoding_options"] = encoding_options_of("--option", args.option)
    if args.paired_with is not None:
        overrides["paired_with"] = names_of("--paired-with", args.paired_with, none_allowed=True)
    keys = ("train_len", "seeds", "steps", "workers", "segments", "d_model", "num_heads")
    for key in (*keys, "word_scale"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    with named_as_flags(*vars(args)):  # each setting with a flag of its name
        return preset(args.preset, **overrides)


def run(args: argparse.Namespace) -> int:
    from ..runs.lock import run_lock
    from .grid import run_probe

    settings = settings_from(args)
    output = Path(args.output or f"runs/probe-{args.preset}")
    with run_lock(output, "posattn probe"):
        run_probe(settings, output, device=args.device)
    return 0


def register(commands) -> None:
    from ..runs.device import add_device_option
    from .tasks import TASKS

    parser = commands.add_parser(
        "probe",
        help="position probes: accuracy against length for each task and encoding",
        description="Train a small model per (task, encoding, seed) on synthetic tasks up to "
        "--train-len and evaluate at every --test-lens length. Tasks: " + ", ".join(TASKS) + ". "
        "A rerun in the same --output finishes a killed run without redoing its cells.",
    )
    parser.add_argument("--preset", default="default", help="default | smoke")
    parser.add_argument("--tasks", help="comma-separated tasks (default: all)")
    parser.add_argument(
        "--encodings",
        help="comma-separated encodings, or an encoding with one of the papers' ablations "
        "that set its options: ENCODING/VARIANT (tupe-a/tie-cls, diet-abs/share-none; the "
        "variants: posattn/lab/runs/variants.py)",
    )
    parser.add_argument("--train-len", type=int, help="longest training length (default 32)")
    parser.add_argument("--test-lens", help="comma-separated test lengths, e.g. 32,64,128,256")
    parser.add_argument("--seeds", type=int, help="seeds per cell (default 3)")
    parser.add_argument("--steps", type=int, help="training steps per cell")
    parser.add_argument("--d-model", type=int, help="model width (default 64)")
    parser.add_argument(
        "--num-heads", type=int, help="attention heads (default 4; head size d-model / heads)"
    )
    parser.add_argument("--segments", help="input (BERT, default) | attention (DIET Eq. 2) | none")
    parser.add_argument(
        "--word-scale",
        type=float,
        help="multiply the word vectors by this (default: 1, as BERT; 50 = 1 / init_std gives "
        "them unit RMS, which input sinusoids otherwise outweigh)",
    )
    parser.add_argument("--workers", type=int, help="processes training cells in parallel")
    parser.add_argument(
        "--position-lr-scales",
        help="comma-separated rates of each encoding's own parameters, as multiples of the "
        "learning rate (default 1,10); each task and encoding reports the one whose training "
        "loss ends lowest",
    )
    parser.add_argument(
        "--option",
        action="append",
        metavar="ENCODING.KEY=VALUE",
        help="an option of one encoding of the run (diet-abs.rank=2, t5.num_buckets=64); "
        "repeatable",
    )
    parser.add_argument(
        "--paired-with",
        help="comma-separated encodings of the run that every other one is paired with, seed "
        "by seed ('' for none; default: learned and none, where the run has them)",
    )
    parser.add_argument("--output", help="the run directory (default runs/probe-PRESET)")
    add_device_option(parser)
    parser.set_defaults(func=run)
