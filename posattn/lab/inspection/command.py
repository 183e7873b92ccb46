"""`posattn inspect CHECKPOINT_OR_BERT_PATH`."""

from __future__ import annotations

import argparse


def run_inspect(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..runs.lock import run_lock
    from .run import InspectSettings, inspect_model

    settings = InspectSettings(
        length=args.length,
        samples=args.samples,
        layer=args.layer,
        head=args.head,
        text=args.text,
        data_dir=args.data_dir,
        device=args.device,
    )
    output = Path(args.output or f"runs/inspect-{Path(args.path).resolve().name}")
    with run_lock(output, "posattn inspect"):
        inspect_model(args.path, output, settings)
    print((output / "inspect.md").read_text())
    print(f"figures and inspect.json in {output}")
    return 0


def register(commands) -> None:
    from ..runs.device import add_device_option

    parser = commands.add_parser(
        "inspect",
        help="what positions do in a model: TUPE Figs. 2, 4, 6 and DIET Theorem 1 (figures + JSON)",
    )
    parser.add_argument(
        "path", help="a posattn model / pretrain run directory or a BERT checkpoint"
    )
    parser.add_argument("--output", help="the output directory (default runs/inspect-NAME)")
    parser.add_argument("--layer", type=int, help="focus on this layer (1-based)")
    parser.add_argument("--head", type=int, help="draw this head (1-based)")
    parser.add_argument("--text", help="inspect this text instead of the prepared corpus")
    parser.add_argument(
        "--length", type=int, help="tokens per text (default 64, at most the model's max_len)"
    )
    parser.add_argument("--samples", type=int, default=8, help="corpus blocks (default 8)")
    parser.add_argument("--data-dir", help="a prepared data directory (posattn data prepare)")
    add_device_option(parser)
    parser.set_defaults(func=run_inspect)
