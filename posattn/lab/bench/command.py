"""`posattn bench`: time and memory of every encoding against fused attention without a bias."""

from __future__ import annotations

import argparse
from pathlib import Path


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
